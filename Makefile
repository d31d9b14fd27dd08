# understudy - fault tolerance for KVM virtual machines.
#
#   make            build build/understudy
#   make check      install missing Debian packages, build, run every test (on
#                   a host without /dev/kvm, the KVM tests in a nested VM:
#                   see check-nested; NESTED=0 skips them instead)
#   make demo       install missing Debian packages, build, run the demo
#   make demo-linux the same with a Linux guest and a TCP client (skips until --kernel)
#   make bench      run the benchmarks (figure, reference, ratio)
#   make bench-counts only the counts that do not depend on the host's speed
#                   (per reply, per epoch, exits per virtio request with
#                   ioeventfd on/off); quick, and valid in the nested VM
#   make bench-soak failover false-alarm soak, 10 minutes (SOAK_SECONDS=N,
#                   SOAK_KILLS=N); not part of make bench or make check
#   make bench-fleet per-VM cost of 1, 4 and 16 protected idle VMs on one
#                   host pair, 10 minutes each (FLEET_SECONDS=N, FLEET_N=1,4,16);
#                   not part of make bench (make bench FLEET=1 adds it)
#   make plots      the benchmark figures as PNGs (gnuplot), under build/plots
#   make SAN=1 check   the same with ASan + UBSan (in build/san), the agents of
#                      the system tests too; any report fails (tests/run.sh)
#   make check-mutants build each mutant of an invariant, check its tests catch it
#   make check-nested  the tests inside a VM under QEMU's emulator with a
#                      nested KVM, for hosts without /dev/kvm (ONLY="..." for a subset)

BUILD    ?= build
ifeq ($(SAN),1)
BUILD    := build/san
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer
# Both runtimes linked in: with gcc's shared libubsan beside libasan, UBSan
# ignores UBSAN_OPTIONS=log_path and reports only to stderr, where
# tests/run.sh cannot find a report of an agent (see there).
SANLINK  := -static-libasan -static-libubsan
endif

CC       ?= gcc
MODULES  := kmod machine checkpoint replication net proto primary secondary host cli guest
PKGS     := libprotobuf-c openssl liblz4 libfabric libcurl json-c libmicrohttpd libsystemd
VERSION  := 0.4.0

CFLAGS   := -std=gnu11 -O2 -g -Wall -Wextra -Werror -Wno-missing-field-initializers \
            -D_GNU_SOURCE -pthread -I. -I$(BUILD)/gen $(SANFLAGS) -DUNDERSTUDY_VERSION='"$(VERSION)"' \
            $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
# make check-mutants builds one deliberately broken product per MUTANT
# (e.g. make BUILD=build/mutant-release_early MUTANT=release_early all):
# MUTANT(release_early) is then 1 (kmod/mutant.h), 0 in any other build.
ifneq ($(MUTANT),)
CFLAGS   += -DUNDERSTUDY_MUTANT_$(MUTANT)
endif
# libfabric is dlopen'ed by net/rdma.c when an RDMA link is made (see there).
LDLIBS   := $(shell pkg-config --libs $(filter-out libfabric,$(PKGS)) 2>/dev/null) -lev -lm -ldl -pthread
LDFLAGS  := $(SANFLAGS) $(SANLINK)
# A packager's flags on top (debian/rules: dpkg-buildflags, the hardening ones).
CFLAGS   += $(EXTRA_CFLAGS)
LDFLAGS  += $(EXTRA_LDFLAGS)

# Built-in guests: freestanding 64-bit programs, linked at 1 MiB, embedded as flat images.
GUESTS       := counter dirty stress blk udpecho kv
GUEST_CFLAGS := -std=gnu11 -O2 -g -Wall -Wextra -Werror -ffreestanding -nostdlib -fno-pic -fno-pie \
                -mno-red-zone -mcmodel=small -fno-stack-protector -fno-asynchronous-unwind-tables \
                -mgeneral-regs-only -fcf-protection=none -Iguest/src \
                $(if $(GUEST_IOPL),-DGUEST_IOPL=$(GUEST_IOPL))
GUEST_RT     := guest/src/rt.S guest/src/lib.c

PROTOS     := $(wildcard proto/*.proto)
PROTO_C    := $(patsubst proto/%.proto,$(BUILD)/gen/proto/%.pb-c.c,$(PROTOS))
PROTO_H    := $(PROTO_C:.c=.h)

LIB_SRC  := $(filter-out cli/%,$(foreach m,$(MODULES),$(wildcard $(m)/*.c)))
CLI_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard cli/*.c))
LIB_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRC)) \
            $(patsubst %.c,$(BUILD)/obj/%.o,$(PROTO_C:$(BUILD)/%=%)) \
            $(if $(wildcard guest/images.S),$(BUILD)/obj/guest/images.o)
LIB      := $(BUILD)/libunderstudy.a
BIN      := $(BUILD)/understudy

TEST_SRC := $(wildcard tests/test_*.c)
TESTS    := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
TEST_HELPERS := $(filter-out $(TEST_SRC),$(wildcard tests/*.c))
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_REPLAY := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%-replay,$(FUZZ_SRC))
BENCH_SRC := $(wildcard bench/bench_*.c)
BENCHES  := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

.PHONY: all check check-build check-nested deps-nested demo bench bench-run bench-counts bench-soak bench-fleet deps clean certs fuzz fuzz-corpus fuzz-run check-mutants lint
.SECONDARY:
all: $(BIN)

# ---- Debian packages ---------------------------------------------------------
DEB := libev-dev libprotobuf-c-dev protobuf-c-compiler libssl-dev liblz4-dev \
       libfabric-dev libibverbs-dev librdmacm-dev libcmocka-dev pkg-config openssl \
       iproute2 nftables clang libcurl4-openssl-dev libjson-c-dev etcd-server \
       resource-agents pacemaker-cli-utils libxml2-utils curl \
       libmicrohttpd-dev libsystemd-dev prometheus mandoc gnuplot-nox \
       lintian debhelper netcat-openbsd iputils-ping
deps:
	@missing=$$(for p in $(DEB); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | \
	    grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "deps: installing$$(echo $$missing | tr '\n' ' ' | sed 's/^/ /')"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null || \
	      { echo "deps: apt-get install failed"; exit 1; }; \
	  else \
	    echo "deps: missing Debian packages. Run as root:"; \
	    echo "  apt-get update && apt-get install -y $$(echo $$missing)"; exit 1; \
	  fi; \
	fi

# ---- build -----------------------------------------------------------------
$(BUILD)/gen/proto/%.pb-c.c $(BUILD)/gen/proto/%.pb-c.h: proto/%.proto
	@mkdir -p $(@D)
	protoc-c --c_out=$(BUILD)/gen $<

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Wno-unused-parameter -MMD -MP -c -o $@ $<

$(BUILD)/obj/%.o: %.c | $(PROTO_H)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/guest/%.elf: guest/src/%.c $(GUEST_RT) guest/src/guest.ld guest/src/glib.h
	@mkdir -p $(@D)
	$(CC) $(GUEST_CFLAGS) -T guest/src/guest.ld -Wl,--build-id=none -static -o $@ $(GUEST_RT) $<

# The virtio guests share the virtio-pci transport.
GUEST_VPCI   := guest/src/vpci.c
GUEST_VBLK   := $(GUEST_VPCI) guest/src/vblk.c
$(BUILD)/guest/blk.elf: guest/src/blk.c $(GUEST_VBLK) guest/src/vpci.h guest/src/vblk.h \
                        $(GUEST_RT) guest/src/guest.ld guest/src/glib.h
	@mkdir -p $(@D)
	$(CC) $(GUEST_CFLAGS) -T guest/src/guest.ld -Wl,--build-id=none -static -o $@ $(GUEST_RT) \
		$(GUEST_VBLK) $<

# Guests on the network share the virtio-net driver and the IPv4 stack.
GUEST_NET    := $(GUEST_VPCI) guest/src/vnet.c guest/src/ipstack.c
$(BUILD)/guest/udpecho.elf: guest/src/udpecho.c $(GUEST_NET) guest/src/vpci.h guest/src/vnet.h \
                            guest/src/ipstack.h $(GUEST_RT) guest/src/guest.ld guest/src/glib.h
	@mkdir -p $(@D)
	$(CC) $(GUEST_CFLAGS) -T guest/src/guest.ld -Wl,--build-id=none -static -o $@ $(GUEST_RT) \
		$(GUEST_NET) $<

# kv: the network guests' code plus the virtio-blk driver.
GUEST_KV     := $(GUEST_NET) guest/src/vblk.c
$(BUILD)/guest/kv.elf: guest/src/kv.c $(GUEST_KV) guest/src/vpci.h guest/src/vnet.h guest/src/ipstack.h \
                       guest/src/vblk.h $(GUEST_RT) guest/src/guest.ld guest/src/glib.h
	@mkdir -p $(@D)
	$(CC) $(GUEST_CFLAGS) -T guest/src/guest.ld -Wl,--build-id=none -static -o $@ $(GUEST_RT) \
		$(GUEST_KV) $<

$(BUILD)/guest/%.bin: $(BUILD)/guest/%.elf
	objcopy -O binary $< $@

$(BUILD)/obj/guest/images.o: guest/images.S $(patsubst %,$(BUILD)/guest/%.bin,$(GUESTS))
	@mkdir -p $(@D)
	$(CC) -c -Wa,-I,$(BUILD)/guest -o $@ $<

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(CLI_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(TEST_HELPERS) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Wno-unused-parameter -o $@ $< $(TEST_HELPERS) $(LIB) $(LDFLAGS) $(LDLIBS) -lcmocka

# Replays of the saved corpora (run by make check): each file's verdict is
# asserted. With SAN=1 they run under ASan + UBSan, any report fatal.
# A target that fuzzes command-line parsers also links cli/options.c.
FUZZ_CLI := fuzz_options
$(BUILD)/fuzz/%-replay: tests/fuzz/%.c tests/fuzz/replay.c tests/fuzz/fuzz.h $(LIB) cli/options.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(if $(SANFLAGS),-fno-sanitize-recover=all) -o $@ $< tests/fuzz/replay.c \
	    $(if $(filter $*,$(FUZZ_CLI)),cli/options.c) $(LIB) $(LDFLAGS) $(LDLIBS)

# Regenerates the generated corpus files (see tests/fuzz/mkcorpus.c).
fuzz-corpus: $(BUILD)/fuzz/mkcorpus
	$(BUILD)/fuzz/mkcorpus tests/fuzz/corpus

$(BUILD)/fuzz/mkcorpus: tests/fuzz/mkcorpus.c $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(wildcard bench/*.h) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

# libFuzzer builds (clang), for fuzzing by hand: make fuzz
fuzz: $(PROTO_H) $(filter %/images.o,$(LIB_OBJ))
	@mkdir -p $(BUILD)/fuzz
	for f in $(FUZZ_SRC); do n=$$(basename $$f .c); x=; \
	  case " $(FUZZ_CLI) " in *" $$n "*) x=cli/options.c;; esac; \
	  clang -std=gnu11 -g -O1 -D_GNU_SOURCE -I. -I$(BUILD)/gen -fsanitize=fuzzer,address,undefined \
	    -o $(BUILD)/fuzz/$$n $$f $$x $(LIB_SRC) $(PROTO_C) $(filter %/images.o,$(LIB_OBJ)) \
	    $(LDLIBS) || exit 1; done

# Builds the libFuzzer targets and runs each for SECONDS seconds (default 60)
# over a copy of its corpus; prints executions and crashes per target.
fuzz-run: fuzz
	@BUILD=$(BUILD) SECS=$(or $(SECONDS),60) tests/fuzz/run.sh

# ---- test, demo, bench ---------------------------------------------------
# Without /dev/kvm, tests/run.sh runs the KVM tests in a nested VM
# (check-nested's), whose packages come first.
NESTED_DEPS := $(if $(wildcard /dev/kvm),,$(if $(filter 1,$(SAN)),,$(if $(filter 0,$(NESTED)),,deps-nested)))
check: deps $(NESTED_DEPS)
	@$(MAKE) --no-print-directory check-build
	@BUILD=$(BUILD) SAN=$(SAN) tests/run.sh

# Everything make check runs.
check-build: all $(TESTS) $(FUZZ_REPLAY)

# The KVM tests where there is no /dev/kvm: inside a Linux VM under QEMU's
# emulator, whose SVM gives it a nested KVM (tests/nested/run.sh; slow, for
# verdicts, not figures). ONLY="test_machine sys_kv" runs a subset.
check-nested: deps deps-nested
	@BUILD=build/nested tests/nested/run.sh

deps-nested:
	@$(MAKE) --no-print-directory deps DEB="qemu-system-x86 linux-image-amd64 busybox-static"

# Dependencies point down only; no call cycles inside a module; a public
# header declares only what files outside its module use; no file over
# 800 lines but the known exceptions (docs/design.md).
# tests/epoch_path.py: a steady epoch's path through primary/ and replication/
# (issue 27: at most 6 files), from the compiler's call graph with these flags.
lint: export EPOCH_PATH_CFLAGS = $(CFLAGS)
lint: all
	@python3 tests/lint_deps.py $(BUILD)
	@python3 tests/epoch_path.py $(BUILD)

check-mutants: deps
	@BUILD=$(BUILD) bash tests/mutants.sh

# Without /dev/kvm the demo runs in the nested VM (tests/demo.sh says so).
demo: deps $(NESTED_DEPS)
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) tests/demo.sh

# A stock Linux guest (Debian's kernel, a busybox initramfs built here)
# keeps a client's TCP connection across kill -9 of its primary
# (tests/demo_linux.sh). Where this host's KVM cannot boot Linux it runs in
# the nested VM of check-nested: several minutes. Skips, saying why, while
# understudy has no --kernel.
.PHONY: demo-linux
demo-linux: deps deps-nested
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) tests/demo_linux.sh; rc=$$?; [ $$rc = 77 ] && echo "demo-linux: skipped" && exit 0; exit $$rc

# The figures also go to $(BUILD)/bench/bench.log, which `make plots` reads.
bench: deps
	@mkdir -p $(BUILD)/bench
	@{ $(MAKE) --no-print-directory bench-run; echo $$? > $(BUILD)/bench/.rc; } 2>&1 | \
	    tee $(BUILD)/bench/bench.log
	@python3 bench/plots.py --from-log $(BUILD)/bench/bench.log --results $(BUILD)/bench/results.json \
	    --no-draw; exit $$(cat $(BUILD)/bench/.rc)

bench-run:
	@$(MAKE) --no-print-directory all $(BENCHES)
	@python3 bench/figures.py machine
	@for b in $(BENCHES); do echo "== $$b"; $$b || exit 1; done
	@echo "== bench/bench_protect.py"; UNDERSTUDY_BIN=$(BUILD)/understudy python3 bench/bench_protect.py
	@echo "== bench/bench_witness.py"; UNDERSTUDY_BIN=$(BUILD)/understudy python3 bench/bench_witness.py
	@echo "== bench/bench_migrate.py"; UNDERSTUDY_BIN=$(BUILD)/understudy python3 bench/bench_migrate.py
	@echo "== bench/bench_switchover.py"; UNDERSTUDY_BIN=$(BUILD)/understudy python3 bench/bench_switchover.py
	@echo "== bench/bench_latency.py"; UNDERSTUDY_BIN=$(BUILD)/understudy python3 bench/bench_latency.py
	@echo "== bench/bench_hot.py"; UNDERSTUDY_BIN=$(BUILD)/understudy python3 bench/bench_hot.py
	@echo "== bench/bench_net_guest.py"; UNDERSTUDY_BIN=$(BUILD)/understudy python3 bench/bench_net_guest.py
	@echo "== bench/bench_disk.py"; UNDERSTUDY_BIN=$(BUILD)/understudy python3 bench/bench_disk.py
	@echo "== bench/bench_kv.py"; UNDERSTUDY_BIN=$(BUILD)/understudy python3 bench/bench_kv.py
	@echo "== bench/bench_syscalls.py"; UNDERSTUDY_BIN=$(BUILD)/understudy python3 bench/bench_syscalls.py; \
	  rc=$$?; [ $$rc = 0 ] || [ $$rc = 77 ]
	@echo "== bench/bench_exits.py"; UNDERSTUDY_BIN=$(BUILD)/understudy python3 bench/bench_exits.py; \
	  rc=$$?; [ $$rc = 0 ] || [ $$rc = 77 ]
	@if [ "$(FLEET)" = 1 ]; then echo "== bench/bench_fleet.py"; \
	  UNDERSTUDY_BIN=$(BUILD)/understudy python3 bench/bench_fleet.py --n $(FLEET_N); \
	  rc=$$?; [ $$rc = 0 ] || [ $$rc = 77 ]; fi

# Only the counts that do not depend on the host's speed (bench/counts.py):
# epochs and round trips a reply waits for (counter and kv guests), the
# epochs the timer and waiting output started, pages sent and re-protected
# and KVM's write faults per epoch, the agents' system calls per epoch. make
# bench has them too, beside the times; this runs only them, quickly, and
# means something in the nested VM, where times do not:
#   NESTED_MEM=5G NESTED_CMD="make -s bench-counts BUILD=build/nested" \
#     BUILD=build/nested NESTED_VM=build/nested/counts-vm tests/nested/run.sh
# The figures go to $(BUILD)/bench/counts.log and counts.json (results.json's
# format). COUNTS_ROUNDS rounds (default 3), COUNTS_REQUESTS requests a
# round of bench_latency.py and of bench_kv.py (default 100).
COUNTS_ROUNDS ?= 3
COUNTS_REQUESTS ?= 100
COUNTS_BENCH := bench_latency.py@--counts@--requests@$(COUNTS_REQUESTS) bench_hot.py@--counts \
	bench_syscalls.py bench_kv.py@--counts@--requests@$(COUNTS_REQUESTS) bench_exits.py
bench-counts: all
	@mkdir -p $(BUILD)/bench
	@python3 bench/figures.py machine | tee $(BUILD)/bench/counts.log
	@{ rc=0; for b in $(COUNTS_BENCH); do echo "== bench/$${b%%@*}"; \
	  PYTHONUNBUFFERED=1 UNDERSTUDY_BIN=$(BUILD)/understudy python3 bench/$$(echo $$b | tr @ ' ') \
	    --rounds $(COUNTS_ROUNDS); r=$$?; [ $$r = 0 ] || [ $$r = 77 ] || rc=$$r; done; \
	  echo $$rc > $(BUILD)/bench/.counts-rc; } 2>&1 | tee -a $(BUILD)/bench/counts.log
	@rc=$$(cat $(BUILD)/bench/.counts-rc); [ $$rc = 0 ] || exit $$rc; \
	  python3 bench/plots.py --from-log $(BUILD)/bench/counts.log --results $(BUILD)/bench/counts.json \
	    --no-draw

# Spurious takeovers under load at a 50 ms failover timeout, and kill ->
# first reply (bench/bench_soak.py); SOAK_SECONDS (default 600), SOAK_KILLS.
bench-soak: all
	@mkdir -p $(BUILD)/bench
	@python3 bench/figures.py machine | tee $(BUILD)/bench/soak.log
	@UNDERSTUDY_BIN=$(BUILD)/understudy python3 bench/bench_soak.py 2>&1 | tee -a $(BUILD)/bench/soak.log

# Per-VM CPU and memory of N protected idle VMs on one host pair, N in
# FLEET_N (bench/bench_fleet.py); FLEET_SECONDS per N (default 600). The
# figures go to $(BUILD)/bench/fleet.log and fleet.json (results.json's
# format); make bench FLEET=1 puts them in results.json with the rest.
# Without /dev/kvm it says SKIP and stops there.
FLEET_N ?= 1,4,16
bench-fleet: all
	@mkdir -p $(BUILD)/bench
	@python3 bench/figures.py machine | tee $(BUILD)/bench/fleet.log
	@{ UNDERSTUDY_BIN=$(BUILD)/understudy python3 bench/bench_fleet.py --n $(FLEET_N); \
	  echo $$? > $(BUILD)/bench/.fleet-rc; } 2>&1 | tee -a $(BUILD)/bench/fleet.log
	@rc=$$(cat $(BUILD)/bench/.fleet-rc); [ $$rc = 77 ] && exit 0; [ $$rc = 0 ] || exit $$rc; \
	  python3 bench/plots.py --from-log $(BUILD)/bench/fleet.log --results $(BUILD)/bench/fleet.json \
	    --no-draw

certs: $(BIN)
	tests/mkcerts.sh $(BUILD)/certs

# make plots: the figures of a `make bench` run as PNGs under $(PLOTS), drawn
# by gnuplot (bench/plots.py describes results.json). Without RESULTS=FILE it
# reads $(BUILD)/bench/results.json, made first from the output of
# `make bench | tee $(BUILD)/bench/bench.log` when that log is newer. Titles
# name the machine of the run, or say "sample data" (results without one).
PLOTS   ?= $(BUILD)/plots
.PHONY: plots
plots:
ifeq ($(origin RESULTS),command line)
	@python3 bench/plots.py --results $(RESULTS) --out $(PLOTS)
else
	@if [ -f $(BUILD)/bench/bench.log ] && { [ ! -f $(BUILD)/bench/results.json ] || \
	    [ $(BUILD)/bench/bench.log -nt $(BUILD)/bench/results.json ]; }; then \
	  from="--from-log $(BUILD)/bench/bench.log"; fi; \
	python3 bench/plots.py $$from --results $(BUILD)/bench/results.json --out $(PLOTS)
endif

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# ---- install, Debian package, cluster test ------------------------------------
# make install [PREFIX=/usr/local] [DESTDIR=...]: the program, its man page,
# the systemd units (contrib/systemd/, ExecStart pointed at $(BINDIR)), the
# Pacemaker resource agent (ocf:understudy:understudy, docs/pacemaker.md)
# and an example configuration; make uninstall removes exactly those.
PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
MANDIR  ?= $(PREFIX)/share/man
DOCDIR  ?= $(PREFIX)/share/doc/understudy
UNITDIR ?= $(if $(filter /usr,$(PREFIX)),/lib/systemd/system,$(PREFIX)/lib/systemd/system)
OCFDIR  ?= /usr/lib/ocf/resource.d/understudy
UNITS   := understudy-primary@.service understudy-secondary@.service understudy-run@.service
.PHONY: install uninstall deb check-cluster
install: $(BIN)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(UNITDIR) \
	    $(DESTDIR)$(OCFDIR) $(DESTDIR)$(DOCDIR)/examples
	install -m 755 $(BIN) $(DESTDIR)$(BINDIR)/understudy
	install -m 644 man/understudy.8 $(DESTDIR)$(MANDIR)/man8/understudy.8
	for u in $(UNITS); do \
	  sed -e 's|/usr/bin/understudy|$(BINDIR)/understudy|g' \
	      -e 's|/usr/share/doc/understudy|$(DOCDIR)|g' contrib/systemd/$$u >$(DESTDIR)$(UNITDIR)/$$u && \
	  chmod 644 $(DESTDIR)$(UNITDIR)/$$u || exit 1; done
	install -m 755 ocf/understudy $(DESTDIR)$(OCFDIR)/understudy
	install -m 644 contrib/understudy.conf.example $(DESTDIR)$(DOCDIR)/examples/understudy.conf.example

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/understudy $(DESTDIR)$(MANDIR)/man8/understudy.8 \
	    $(addprefix $(DESTDIR)$(UNITDIR)/,$(UNITS)) $(DESTDIR)$(OCFDIR)/understudy \
	    $(DESTDIR)$(DOCDIR)/examples/understudy.conf.example
	rmdir $(DESTDIR)$(OCFDIR) $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) 2>/dev/null || true

# make deb: the Debian package (debian/), built by dpkg-buildpackage in a copy
# of this tree (its clean step would remove build/), into $(BUILD)/deb/.
deb:
	rm -rf $(BUILD)/deb && mkdir -p $(BUILD)/deb/src/understudy-$(VERSION)
	tar -c --exclude=./build --exclude=./$(BUILD) --exclude=./.git . | tar -x -C $(BUILD)/deb/src/understudy-$(VERSION)
	cd $(BUILD)/deb/src/understudy-$(VERSION) && dpkg-buildpackage -us -uc -b >../build.log 2>&1 || \
	  { tail -30 ../build.log; exit 1; }
	mv $(BUILD)/deb/src/*.deb $(BUILD)/deb/src/*.changes $(BUILD)/deb/src/*.buildinfo \
	    $(BUILD)/deb/src/build.log $(BUILD)/deb/
	rm -rf $(BUILD)/deb/src
	@ls $(BUILD)/deb/*.deb

# A real Pacemaker cluster on this machine (network and mount namespaces,
# fencing), tests/cluster/: two nodes, one guest (kill the primary, a node
# dies, cut the link, move), then three nodes and six guests (a node dies:
# every guest runs on and is protected again on the spare node; a node is
# drained). Without /dev/kvm it all runs in the nested VM of check-nested
# (about 75 minutes; its times are the emulator's). CLUSTER="run" or
# "fleet" runs one of the two.
CLUSTER ?= run fleet
CLUSTER_DEB := corosync pacemaker pacemaker-cli-utils resource-agents iproute2 util-linux
check-cluster:
	@$(MAKE) --no-print-directory deps DEB="$(DEB) $(CLUSTER_DEB)"
ifneq ($(wildcard /dev/kvm),)
	@$(MAKE) --no-print-directory all
	@for t in $(CLUSTER); do BUILD=$(BUILD) bash tests/cluster/$$t.sh || exit $$?; done
else
	@$(MAKE) --no-print-directory deps-nested
	@BUILD=build/nested NESTED_MEM=$${NESTED_MEM:-8G} NESTED_VM=build/nested/cluster-vm \
	  NESTED_CMD="for t in $(CLUSTER); do BUILD=build/nested bash tests/cluster/\$$t.sh || exit \$$?; done" \
	  tests/nested/run.sh
endif
