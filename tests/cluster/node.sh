#!/bin/sh
# One node of the test cluster, run by run.sh inside the node's own network
# namespace and a new mount + UTS namespace: private /etc/corosync,
# /var/lib/pacemaker, /var/lib/corosync, /run, /dev/shm, the test's fence
# agent and resource agent laid over /usr/sbin and the OCF directory; then
# corosync and pacemakerd in the foreground (PID 1 is not systemd).
# usage: node.sh N STATE
set -eu
n=$1 state=$2
d=$state/node$n
mount --make-rprivate /
hostname "node$n"
for m in /etc/corosync /var/lib/pacemaker /var/lib/corosync /run /dev/shm /var/log/pacemaker /var/log/cluster; do
	[ -d "$m" ] || continue
	mount -t tmpfs -o mode=0755 "tmpfs-node$n" "$m"
done
chmod 1777 /dev/shm   # the daemons that run as hacluster create their IPC rings there
cp "$state/corosync.conf" /etc/corosync/corosync.conf
for s in cib pengine blackbox cores; do mkdir -p "/var/lib/pacemaker/$s"; done
chown -R hacluster:haclient /var/lib/pacemaker
chmod 750 /var/lib/pacemaker/*
mkdir -p /run/crm /run/understudy
# the agents' logs outlive the node's /run (a power-off), for the test's
# report: the guests' log files are links to the test's state, one per boot
boot=$(date +%s)
for v in us $(seq -f 'vm%g' 16); do ln -s "$d/$v-boot$boot.log" "/run/understudy/$v.log"; done
chown hacluster:haclient /run/crm
mount -t overlay "sbin-node$n" -o "lowerdir=$state/sbin:/usr/sbin" /usr/sbin
mount -t overlay "ocf-node$n" -o "lowerdir=$state/ocf:/usr/lib/ocf/resource.d" /usr/lib/ocf/resource.d
readlink /proc/self/ns/net > "$state/ns.node$n"
echo $$ > "$d/holder.pid"
export PCMK_logfile=$d/pacemaker.log PCMK_debug=no
corosync -f >"$d/corosync.out" 2>&1 &
echo $! > "$d/corosync.pid"
i=0
until corosync-cfgtool -s >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 100 ] && { echo "corosync did not start" >&2; exit 1; }
	sleep 0.1
done
pacemakerd -f >"$d/pacemakerd.out" 2>&1 &
echo $! > "$d/pacemakerd.pid"
echo started > "$d/started"
wait
