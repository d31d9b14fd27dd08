#!/usr/bin/env bash
# tests/linux_initramfs.sh DIR: the Linux guest of the tests, built from
# this machine's packages (nothing downloaded): Debian's kernel (the newest
# /boot/vmlinuz-*, linux-image-amd64) and DIR/initrd.gz, a gzip'ed newc cpio
# of busybox-static, the kernel's virtio and ext4 modules with their
# dependencies (modprobe -S KVER --show-depends, as tests/nested/run.sh
# does), mke2fs (as mkfs.ext4) with its libraries, and an /init. Prints one line,
# "KERNEL INITRD" (absolute paths); exit 77 with a line "SKIP: why" when a
# package is missing, 1 on another failure.
#
# The /init mounts proc, sys and devtmpfs, loads the modules, prints
#   ut: ready mode=MODE cpus=N kernel=KVER
# on the console (the kernel's console=ttyS0) and runs the mode that the
# kernel command line names (the kernel hands parameters with a dot to no
# one, so /init reads them from /proc/cmdline):
#   ut.mode=shell     (default) a shell on the console, with job control
#   ut.mode=poweroff  prints "ut: nproc N", "ut: poweroff", powers off (ACPI)
#   ut.mode=reboot    prints "ut: reboot", reboots
#   ut.mode=server    needs ut.ip=ADDR/LEN (ut.gw=, ut.port=, default 7000):
#       eth0 at ADDR; /dev/vda mounted at /mnt (ext4 driver; formatted with
#       mkfs.ext4 first when its first 64 KiB are zeros, never
#       otherwise); then a TCP server whose handler takes
#       request lines and, for each, under a lock on the file: appends
#       "SEQ LINE" to /mnt/requests.log (SEQ = the file's line count after
#       it), fsyncs the file, and only then replies "SEQ LINE" (busybox
#       nc -ll -e: a handler per connection). Prints
#       "ut: server listening on ADDR:PORT" once it accepts; a request line
#       "ut-poweroff" gets "ut: bye", unmounts /mnt and powers off.
# Error lines start "ut: error" (then a shell on the console).
set -u
dir=${1:?usage: linux_initramfs.sh DIR}
skip() { echo "SKIP: $*"; exit 77; }
die() { echo "linux_initramfs: $*" >&2; exit 1; }

kernel=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -1)
[ -n "$kernel" ] || skip "no Linux kernel in /boot (make deps-nested: linux-image-amd64)"
[ -r "$kernel" ] || skip "$kernel not readable (root needed)"
kver=${kernel#/boot/vmlinuz-}
busybox=$(command -v busybox) || skip "no busybox (make deps-nested: busybox-static)"
ldd "$busybox" 2>&1 | grep -qE 'not a dynamic|statically linked' || skip "$busybox is not static (busybox-static)"
command -v cpio >/dev/null || skip "no cpio"
mke2fs=$(command -v mke2fs) || skip "no mke2fs (e2fsprogs)"
mods=$(for m in virtio_pci virtio_blk virtio_net ext4; do
	modprobe -S "$kver" --show-depends "$m" || echo "missing $m"; done 2>/dev/null)
case $mods in *missing*) skip "no modules for $kver ($(echo "$mods" | grep missing | tr '\n' ' '))" ;; esac
mods=$(echo "$mods" | awk '$1 == "insmod" { print $2 }' | awk '!seen[$0]++')

mkdir -p "$dir" || die "cannot make $dir"
dir=$(cd "$dir" && pwd)
root=$(mktemp -d "$dir/root.XXXXXX") || die "mktemp in $dir"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,dev,proc,sys,mnt,mods,etc,tmp} || die "mkdir"
cp "$busybox" "$root/bin/busybox" || die "copy busybox"
for a in $("$busybox" --list); do
	[ "$a" = busybox ] || ln -s busybox "$root/bin/$a"
done
# mkfs.ext4: mke2fs from e2fsprogs (busybox's makes ext2 only, and
# Debian's busybox shell runs its own applet for the name mke2fs), with its
# libraries.
cp "$mke2fs" "$root/bin/mkfs.ext4" || die "copy mke2fs"
[ -f /etc/mke2fs.conf ] && cp /etc/mke2fs.conf "$root/etc/"
for lib in $(ldd "$mke2fs" | grep -o '/[^ ]*'); do
	mkdir -p "$root$(dirname "$lib")" && cp -L "$lib" "$root$lib" || die "copy $lib"
done
order=
for f in $mods; do
	b=$(basename "$f"); b=${b%.xz}; b=${b%.zst}; b=${b%.ko}
	case $f in *.xz) xz -dc "$f" ;; *.zst) zstd -dc "$f" ;; *) cat "$f" ;; esac >"$root/mods/$b.ko" ||
		die "module $f"
	order="$order $b"
done

cat >"$root/init" <<EOI
#!/bin/sh
export PATH=/bin HOME=/
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in$order; do insmod /mods/\$m.ko || echo "ut: warning: insmod \$m failed"; done
mode=shell ip= gw= port=7000
for a in \$(cat /proc/cmdline); do
	case \$a in
	ut.mode=*) mode=\${a#*=} ;;
	ut.ip=*) ip=\${a#*=} ;;
	ut.gw=*) gw=\${a#*=} ;;
	ut.port=*) port=\${a#*=} ;;
	esac
done
echo "ut: ready mode=\$mode cpus=\$(nproc) kernel=\$(uname -r)"
shell() { echo "ut: shell"; exec setsid cttyhack sh -l; }
case \$mode in
poweroff) echo "ut: nproc \$(nproc)"; echo "ut: poweroff"; poweroff -f ;;
reboot) echo "ut: reboot"; reboot -f ;;
server) /bin/ut-server "\$ip" "\$gw" "\$port" || shell ;;
shell) shell ;;
*) echo "ut: error unknown ut.mode=\$mode"; shell ;;
esac
echo "ut: error \$mode returned"
shell
EOI

cat >"$root/bin/ut-server" <<'EOS'
#!/bin/sh
# ut-server ADDR/LEN GW PORT (the /init's server mode)
ip=$1 gw=$2 port=$3
[ -n "$ip" ] || { echo "ut: error server mode needs ut.ip=ADDR/LEN"; exit 1; }
ip link set lo up
ip link set eth0 up && ip addr add "$ip" dev eth0 || { echo "ut: error eth0 ($ip)"; exit 1; }
[ -n "$gw" ] && ip route add default via "$gw"
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -b /dev/vda ] || { echo "ut: error no /dev/vda (no virtio-blk disk?)"; exit 1; }
if ! mount -t ext4 /dev/vda /mnt 2>/dev/null; then
	if cmp -s -n 65536 /dev/vda /dev/zero; then
		echo "ut: formatting /dev/vda (blank)"
		mkfs.ext4 -q -F /dev/vda || { echo "ut: error mkfs.ext4 /dev/vda"; exit 1; }
		mount -t ext4 /dev/vda /mnt || { echo "ut: error mount /dev/vda"; exit 1; }
	else
		echo "ut: error /dev/vda is neither ext4 nor blank: not formatting it"
		exit 1
	fi
fi
touch /mnt/requests.log
echo "ut: disk mounted, $(wc -l </mnt/requests.log) requests in /mnt/requests.log"
addr=${ip%/*}
nc -ll -p "$port" -e /bin/ut-handler &
srv=$!
i=0
until netstat -ltn 2>/dev/null | grep -q ":$port "; do
	kill -0 $srv 2>/dev/null || { echo "ut: error nc -ll -p $port exited"; exit 1; }
	sleep 0.05
done
echo "ut: server listening on $addr:$port"
wait $srv
echo "ut: error nc -ll exited"
exit 1
EOS

cat >"$root/bin/ut-handler" <<'EOH'
#!/bin/sh
# One TCP connection (nc -ll -e: stdin and stdout are the socket): each
# request line is appended to the log with its sequence number and fsynced
# (busybox sync FILE: fsync) before the reply names that number. The lock
# (a directory: busybox has no flock) keeps the numbers of concurrent
# connections apart.
f=/mnt/requests.log
while IFS= read -r line; do
	line=${line%"$(printf '\r')"}
	if [ "$line" = ut-poweroff ]; then
		echo "ut: bye"
		echo "ut: poweroff requested" >/dev/console
		sync; umount /mnt; poweroff -f
	fi
	until mkdir /tmp/lock 2>/dev/null; do usleep 1000; done
	n=$(($(wc -l <$f) + 1))
	echo "$n $line" >>$f
	sync $f || { rmdir /tmp/lock; echo "ERR fsync"; exit 1; }
	rmdir /tmp/lock
	echo "$n $line"
done
EOH
chmod +x "$root/init" "$root/bin/ut-server" "$root/bin/ut-handler"

(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) | gzip -6 >"$dir/initrd.gz.tmp" ||
	die "cpio"
mv "$dir/initrd.gz.tmp" "$dir/initrd.gz" || die "mv"
echo "$kernel $dir/initrd.gz"
