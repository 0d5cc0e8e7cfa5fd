#!/bin/bash
# Issue 12: rdma-core's own test suite (pyverbs, python3-pyverbs 44, tests shipped by Debian in
# /usr/share/doc/rdma-core/tests) against rrxe0 (veth0) and, in the same guest, rdma_rxe's rxe0
# (veth1). Prints a per-file table (pass/fail/skip on each device), every skip rrxe0 has and
# rxe0 has not (FINDING), rxe0's own failures (INFO), then one check per test file:
# "PASS pyverbs.<file>" when rrxe0 has no failure, error or timeout in it (XFAILs excepted,
# each with its reason, from tests/vm/pyverbs.xfail).
#
#   scripts/vm-run --timeout 600 -- /work/main/tests/vm/pyverbs.sh
#
# The reference is rdma_rxe's result on the pinned test kernel, stored in
# tests/vm/pyverbs.rxe0.tsv (the same on every run: the kernel and rdma-core are pinned), so
# that `make test` spends its time on rrxe0 only; `pyverbs.parity_with_rxe0` checks that every
# test rdma_rxe passes passes on rrxe0 too, except the gaps listed in tests/vm/pyverbs.gaps.
# To run rdma_rxe live beside rrxe0 (and refresh the stored file from the job directory's
# rxe0.tsv after a kernel or rdma-core change):
#   scripts/vm-run --timeout 1800 -- env RRXE_PYVERBS_DEVS="rrxe0 rxe0" $PWD/tests/vm/pyverbs.sh
#
# Knobs: RRXE_PYVERBS_MODULES (space-separated test files without .py; default below),
# RRXE_PYVERBS_DEVS ("rrxe0"; the first is checked, a second is run live as the reference),
# RRXE_PYVERBS_DEV_TIMEOUT (whole suite per device, seconds, 600: a file left unrun counts as
# a failure), RRXE_PYVERBS_PER_TEST (per-test watchdog, seconds, 60), RRXE_PYVERBS_NETDEV_SHIM (1: a
# software device's IP address is found through its GID's netdev, so that the rdmacm tests
# run instead of skipping for want of /sys/class/infiniband/DEV/device/net; 0: stock suite).
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3   # Debian's python3-pyverbs is built for the system interpreter
src=/usr/share/doc/rdma-core/tests
# The device-independent test files, the same set on both devices. Left out: the vendor files
# (test_mlx5_*, test_efa*: they skip on any other device) and test_cuda_dmabuf (needs CUDA).
# test_rdmacm runs over rdma_cm (rrxe's GSI QP carries ib_cm's MADs).
modules=${RRXE_PYVERBS_MODULES:-test_addr test_atomic test_cq test_cq_events test_cqex
  test_device test_flow test_fork test_mr test_odp test_parent_domain test_pd test_qp
  test_qpex test_rdmacm test_relaxed_ordering test_rss_traffic test_shared_pd
  test_tag_matching}
read -r -a devs <<< "${RRXE_PYVERBS_DEVS:-rrxe0}"
dut=${devs[0]}; ref=${devs[1]:-}

# Debian compresses the larger files of the doc directory: copy and uncompress. The
# directory must be called `tests` (the files import each other as tests.*).
work=$(mktemp -d /tmp/pyverbs.XXXX)
if [ -n "$ref" ]; then reftsv=$ref=$work/$ref.tsv; else reftsv=rxe0=$here/pyverbs.rxe0.tsv; fi
cp -r "$src" "$work/tests" && gunzip -f "$work"/tests/*.gz
check "pyverbs.suite_present" test -f "$work/tests/base.py" -a -f "$work/tests/args_parser.py"

for n in veth0 veth1; do sysctl -qw "net.ipv4.conf.$n.accept_local=1" 2>/dev/null; done
# rdma_rxe first (lib.sh rxe_first): it binds UDP 4791 at load; every pyverbs test here talks
# from a device to itself, which needs no socket.
if [ -n "$ref" ] && [ ! -e "/sys/class/infiniband/$ref" ]; then
  rxe_first && rdma link add "$ref" type rxe netdev veth1
fi
if [ ! -e "/sys/class/infiniband/$dut" ]; then
  modprobe rrxe && rdma link add "$dut" type rrxe netdev veth0
fi
for d in "${devs[@]}"; do
  active() { [ "$(port_state "$d")" = PORT_ACTIVE ]; }
  check "pyverbs.$d.port_active" wait_for 10 active
done

shim=; [ "${RRXE_PYVERBS_NETDEV_SHIM:-1}" = 1 ] && shim=--netdev-shim
for d in "${devs[@]}"; do
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout -k 5 "${RRXE_PYVERBS_DEV_TIMEOUT:-600}" "$py" "$here/pyverbs-run.py" run \
    --tests "$work/tests" --dev "$d" --out "$work/$d.tsv" \
    --per-test "${RRXE_PYVERBS_PER_TEST:-60}" $shim $modules 2>&1 | grep -v '^  pass ' \
    | sed "s/^/[$d] /"
  echo "pyverbs: $d: $(( $(date +%s) - t0 )) s"
done

# On-demand paging under invalidation (issue 27, docs/odp.md): RDMA WRITE/READ/SEND through ODP
# MRs whose pages are dropped (MADV_DONTNEED) and replaced (munmap + mmap), every byte checked.
# Only where the device offers ODP (test_odp in the set).
if [[ " $modules " == *" test_odp "* ]]; then
  odp_out=$(timeout -k 5 120 "$py" "$here/odp-invalidate.py" --dev "$dut" 2>&1); odp_rc=$?
  echo "$odp_out"
  if [ "$odp_rc" = 0 ]; then pass "pyverbs.$dut.odp_invalidate"
  else fail "pyverbs.$dut.odp_invalidate" "$(echo "$odp_out" | tail -5)"; fi
fi

# Responder resources (issue 30 §5): none until a modify sets max_dest_rd_atomic, then sized as
# rdma_rxe sizes them and kept; READs outstanding at once before and after a RESET.
rr_out=$(timeout -k 5 120 "$py" "$here/resp-resources.py" --dev "$dut" 2>&1); rr_rc=$?
echo "$rr_out"
if [ "$rr_rc" = 0 ]; then pass "pyverbs.$dut.resp_resources"
else fail "pyverbs.$dut.resp_resources" "$(echo "$rr_out" | tail -3)"; fi
# The scratch packet sized by the MTU: QPs moved to path MTU 4096 on a 9000-byte netdev.
if [ "$dut" = rrxe0 ]; then
  rr_out=$(timeout -k 5 120 "$py" "$here/resp-resources.py" --dev "$dut" --mtu4096 veth0 2>&1); rr_rc=$?
  echo "$rr_out"
  if [ "$rr_rc" = 0 ]; then pass "pyverbs.$dut.mtu4096_packets"
  else fail "pyverbs.$dut.mtu4096_packets" "$(echo "$rr_out" | tail -3)"; fi
fi

# shellcheck disable=SC2086
out=$("$py" "$here/pyverbs-run.py" compare --ref "$reftsv" --dut "$dut=$work/$dut.tsv" \
  --xfail "$here/pyverbs.xfail" --gaps "$here/pyverbs.gaps" $modules)
echo "$out" | grep -vE '^(PASS|FAIL) '
while IFS= read -r line; do
  case "$line" in
    "PASS "*) pass "${line#PASS }" ;;
    "FAIL "*) n=${line#FAIL }; fail "${n%%:*}" "${n#*: }" ;;
  esac
done <<< "$(echo "$out" | grep -E '^(PASS|FAIL) ')"
cp "$work"/*.tsv . 2>/dev/null   # kept in the vm-run job directory
rm -rf "$work"
summary
