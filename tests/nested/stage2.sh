#!/bin/sh
# Inside the nested VM (tests/nested/run.sh): the host's root under an
# overlay. Set up what the tests expect of a machine, load KVM, run
# /out/cmd.sh with its output in /out/run.log and its status in /out/rc.
mount -t proc proc /proc
mount -t sysfs sys /sys
mkdir -p /dev/pts /dev/shm /out
mount -t devpts devpts /dev/pts
mount -t tmpfs shm /dev/shm
mount -t tmpfs run /run
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
mount -t 9p -o trans=virtio,version=9p2000.L out /out
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
{
	modprobe kvm_amd || echo "nested: kvm_amd did not load"
	for m in tun bridge veth nf_tables; do modprobe $m 2>/dev/null; done
	ip link set lo up
	echo "nested: $(uname -r), $(nproc) vCPUs, /dev/kvm: $(ls -l /dev/kvm 2>&1)"
	sh /out/cmd.sh
	echo $? >/out/rc
} >/out/run.log 2>&1
sync
poweroff -f
