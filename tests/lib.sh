# Shared helpers for the system tests (sourced).
BIN=${UNDERSTUDY_BIN:-$PWD/build/understudy}
fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok - $*"; }
need_kvm() { [ -r /dev/kvm ] && [ -w /dev/kvm ] || { echo "SKIP: /dev/kvm not usable here"; exit 77; }; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait_port PORT [seconds]: until something listens on 127.0.0.1:PORT
wait_port() {
	local i
	for i in $(seq 1 $((${2:-10} * 20))); do
		python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1',$1)))" 2>/dev/null && return 0
		sleep 0.05
	done
	return 1
}
