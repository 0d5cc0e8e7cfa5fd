# rrxe: Soft-RoCE rebuilt in Rust.  See README.md.
#   make demo   build everything, boot the test VM, show rrxe0 working
#   make test   all tests: host (cargo), install (DKMS into a staging root) and VM
#   make soak   RC under netem faults, >= 100 MiB per setting (long; not part of make test)
#   make bench-loss   goodput under netem loss/reordering/duplication, rrxe and siw (issue 28)
#   make bench-wire   rdma_rxe, rrxe and siw between two guests on one Ethernet link (issue 30)
#   make bench-incast N senders into one receiver through a marking bottleneck, DCQCN on/off (issue 29)
#   make fuzz   longer fuzz runs than make test's
#   make scale  the control path at scale, rdma_rxe beside rrxe (not part of make test)
#   make install / make uninstall   rrxe.ko through DKMS + the provider, on a 6.12 Rust kernel
#                                   (KDIR=kernel tree, default the running kernel's; DESTDIR=)
.PHONY: all build demo test test-host test-vm test-install bench bench-loss bench-incast bench-wire scale soak fuzz deps kernel clean install uninstall

all: build

deps:
	scripts/deps.sh

kernel: deps
	scripts/build-kernel

build:
	scripts/build

demo: build
	scripts/vm-run -- $(CURDIR)/scripts/demo

test-host:
	scripts/deps.sh
	scripts/test-host

test-vm: build
	tests/vm/run-all

bench:
	scripts/bench

# rdma_rxe, rrxe and siw on one wire: two bench guests joined by an Ethernet link (issue 30).
bench-wire: build
	scripts/bench-wire

# The control path at scale, rdma_rxe beside rrxe: create/destroy rates, process exit holding
# 10,000 QPs and 65,000 MRs, a 1 GiB MR (scripts/scale; not part of make test).
scale:
	scripts/scale

bench-loss: build
	scripts/bench-loss

# Incast (issue 29): 1, 2, 4, 8 senders into one receiver through tbf + red (ecn), DCQCN on and
# off: goodput, drops, queueing delay, Jain's index, the table and plots into docs/bench/.
bench-incast: build
	scripts/bench-incast

# Longer fuzz runs than `make test` does: 10^6 packets through the pure receive path, the
# coverage-guided host targets (RRXE_FUZZ_SECONDS each, default 300; cargo-fuzz, stable), the guest.
fuzz: deps
	RRXE_FUZZ_PACKETS=$${RRXE_FUZZ_PACKETS:-1000000} scripts/fuzz

soak: build
	scripts/soak

# DKMS install/uninstall into a staging root against the test kernel tree, and the refusals.
test-install: build
	scripts/install-test

install:
	KDIR="$(KDIR)" DESTDIR="$(DESTDIR)" scripts/install-rrxe install

uninstall:
	KDIR="$(KDIR)" DESTDIR="$(DESTDIR)" scripts/install-rrxe uninstall

test: build
	scripts/test-host
	scripts/install-test
	tests/vm/run-all

clean:
	-[ -f build/kdir ] && $(MAKE) -C "$$(cat build/kdir)" LLVM=1 M=$(CURDIR) clean
	rm -rf build target
