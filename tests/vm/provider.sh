#!/bin/bash
# Issue 12 (provider): the extended verbs of librrxe on rrxe0 — ibv_cq_ex polling,
# ibv_qp_ex builders (RC and UD), full-queue ENOMEM, resize_cq against concurrent polling —
# with tests/vm/verbs' rrxe-extended, plus the provider's refusal of a libibverbs from another
# rdma-core release (one stderr line, provider not registered).
#
#   scripts/vm-run -- /work/main/tests/vm/provider.sh
#
# Knobs: RRXE_TEST_DEV (rrxe0), RRXE_EXT_WRITES (RDMA WRITEs in the resize stress, 2000).
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
dev=${RRXE_TEST_DEV:-rrxe0}
bin=$root/target/release/rrxe-extended
for n in veth0 veth1; do sysctl -qw "net.ipv4.conf.$n.accept_local=1" 2>/dev/null; done
if [ ! -e "/sys/class/infiniband/$dev" ]; then
  modprobe rrxe 2>/dev/null
  rdma link add "$dev" type rrxe netdev "${RRXE_TEST_NETDEV:-veth0}"
fi
port_active() { [ "$(port_state "$dev")" = PORT_ACTIVE ]; }
check "provider.port_active" wait_for 10 port_active
check "provider.program_built" test -x "$bin"

out=$(timeout 300 "$bin" --dev "$dev" --writes "${RRXE_EXT_WRITES:-2000}" 2>&1)
rc=$?
echo "$out" | grep -E '^(PASS|FAIL|SKIP|INFO) ' | sed 's/^\(PASS\|FAIL\|SKIP\) /\1 extended./'
program_took extended
p=$(echo "$out" | grep -c '^PASS '); f=$(echo "$out" | grep -c '^FAIL ')
PASSED=$((PASSED + p)); FAILED=$((FAILED + f))
if [ "$rc" != 0 ] && [ "$f" = 0 ]; then fail "extended.exit" "rc $rc: $(echo "$out" | tail -5)"; fi

# A libibverbs of another release: the installed one, renamed libibverbs.so.1.14.45.0 and found
# first through LD_LIBRARY_PATH. The provider must print exactly one line and stay unregistered.
fake=$(mktemp -d)
real=$(readlink -f /usr/lib/x86_64-linux-gnu/libibverbs.so.1)
cp "$real" "$fake/libibverbs.so.1.14.45.0"
ln -s libibverbs.so.1.14.45.0 "$fake/libibverbs.so.1"
mismatch() {
  local o; o=$(LD_LIBRARY_PATH=$fake ibv_devices 2>&1)
  local n; n=$(echo "$o" | grep -c '^librrxe:')
  [ "$n" = 1 ] || { echo "$n librrxe lines: $o"; return 1; }
  echo "$o" | grep -q 'is rdma-core 45.0.*not registered' || { echo "$o"; return 1; }
  ! echo "$o" | grep -qw "$dev" || { echo "$dev still listed: $o"; return 1; }
}
check "provider.other_libibverbs_release_refused" mismatch
check "provider.same_release_registered" bash -c "ibv_devices | grep -qw $dev"
rm -rf "$fake"
summary
