# rrxe: Soft-RoCE rebuilt in Rust.  See README.md.
#   make demo   build everything, boot the test VM, show rrxe0 working
#   make test   all tests: host (cargo) and VM
#   make soak   RC under netem faults, >= 100 MiB per setting (long; not part of make test)
#   make fuzz   longer fuzz runs than make test's
.PHONY: all build demo test test-host test-vm bench soak fuzz deps kernel clean

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

bench: build
	scripts/vm-run --bare --timeout 900 -- $(CURDIR)/scripts/bench

# Longer fuzz runs than `make test` does: 10^6 packets through the pure receive path.
fuzz: deps
	RRXE_FUZZ_PACKETS=$${RRXE_FUZZ_PACKETS:-1000000} scripts/fuzz

soak: build
	scripts/soak

test: build
	scripts/test-host
	tests/vm/run-all

clean:
	-[ -f build/kdir ] && $(MAKE) -C "$$(cat build/kdir)" LLVM=1 M=$(CURDIR) clean
	rm -rf build target
