# Shared by sys_migrate_handover.sh and sys_migrate_handover_witness.sh:
# a destination (secondary) with a test hook, a counter guest's client, the
# migration, and what both tests check of the source. Set before use: BIN,
# tmp, fo_ms, to_ms; n is the case.
state() { "$BIN" status --control "$tmp/$n.src.ctl" 2>/dev/null | sed -n 's/^state //p'; }
# dest DEST_STOP [ARGS]: the destination, a secondary with the hook given.
dest() {
	dport=$(free_port); dcon=$(free_port); scon=$(free_port)
	UNDERSTUDY_TEST_HOOKS=1 UNDERSTUDY_TEST_STOP=$1 "$BIN" secondary --listen 127.0.0.1:$dport \
		--console tcp:127.0.0.1:$dcon --insecure --failover-timeout-ms $fo_ms \
		--control "$tmp/$n.dst.ctl" ${2:-} 2>"$tmp/$n.dst.log" &
	dp=$!
	wait_port $dport || fail "$n: destination did not listen"
}
# client_migrate: a client increments until $tmp/$n.stop exists, then once
# more, one value a line in $tmp/$n.seen; migrate to the destination starts.
client_migrate() {
	python3 - $scon "$tmp/$n.stop" >"$tmp/$n.seen" 2>"$tmp/$n.client.out" <<'PY' &
import os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=600)
f = s.makefile("rwb", buffering=0)
while True:
    last = os.path.exists(sys.argv[2])
    f.write(b"incr\n")
    line = f.readline().decode()
    if not line:
        sys.exit("console closed")
    print(line.split()[0], flush=True)
    if last:
        break
PY
	cp=$!
	for _ in $(seq 200); do [ "$(wc -l <"$tmp/$n.seen")" -ge 3 ] && break; sleep 0.1; done
	[ "$(wc -l <"$tmp/$n.seen")" -ge 3 ] || fail "$n: the client got no replies: $(cat "$tmp/$n.client.out")"
	"$BIN" migrate --timeout-ms $to_ms --control "$tmp/$n.src.ctl" --to 127.0.0.1:$dport --insecure \
		--max-time 600 >/dev/null 2>"$tmp/$n.migrate.out" &
	mp=$!
}
# kill_dest: the destination killed -9 and reaped: its socket is closed.
kill_dest() { kill -9 $dp; wait $dp 2>/dev/null; }
# alive WHY: the source still answers on its control socket (not merely
# an unreaped process: kill -0 passes a zombie).
alive() { [ -n "$(state)" ] || { wait $sp; fail "$n: the source ended (exit $?) $1: $(tail -2 "$tmp/$n.src.log")"; }; }
# client_done: the client makes its last request and ends.
client_done() {
	touch "$tmp/$n.stop"
	wait $cp || fail "$n: the client: $(cat "$tmp/$n.client.out")"
}
# in_order: the client's values were 1..N, each once; prints N (else why).
in_order() { awk '$1 != NR { print "reply " NR " was " $1; bad = 1; exit } END { if (!bad) print NR }' "$tmp/$n.seen"; }
