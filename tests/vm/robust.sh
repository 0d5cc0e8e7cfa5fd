#!/bin/bash
# Issue 9 (robustness), in a --bare guest; every step bounded by a timeout:
#   failnth     every create path (context, PD, CQ, QP RC/UC/UD, INIT->RTR, MR, AH, SRQ and
#               `rdma link add`) with its 1st, 2nd, ... fault site failed through
#               /proc/self/task/<tid>/fail-nth until it succeeds: clean errnos, `rdma res` back
#               to its baseline, nothing left behind (kmemleak: vm-run)
#   packets     rrxe-fuzz-packets: RoCEv2 datagrams from a raw socket in the peer namespace
#               while a verified RC transfer runs; drop counters account for the invalid ones
#   verbs       rrxe-fuzz-verbs (hostile verbs, mmap offsets, ring scribbling, raw uverbs ioctl
#               and write commands, modify_qp / ring indices / destroy / exit racing posts)
#               while a second, well-behaved process runs a verified transfer on the same device
#   concurrency threads posting and polling one shared CQ
#   teardown    under traffic: MR deregistration and QP destroy (in-process), process SIGKILL,
#               `rdma link delete`, netdev removal, network namespace deletion, rmmod
#   scale       QPs and MRs created and destroyed: time per create, kernel memory per object
#
#   scripts/vm-run --bare --timeout 900 -- $PWD/tests/vm/robust.sh
#   RRXE_VM_TESTS=robust tests/vm/run-all
#
# Environment: RRXE_ROBUST_ONLY (subset of "failnth packets verbs concurrency teardown scale"),
# RRXE_ROBUST_SEED (default: the clock; printed), RRXE_ROBUST_PACKETS (10000; make fuzz runs 10^6 here and on the host),
# RRXE_ROBUST_LINKADD_FULL=1 (fail every fault site of `rdma link add`, about 30 min; make test
# samples them), RRXE_ROBUST_LINKADD_FIRST=N (start that sweep at site N),
# RRXE_ROBUST_VERBS_OPS (3000), RRXE_ROBUST_SCALE (0, the default and `make test`'s size: 1,000
# QPs and 3,000 MRs; 1, as `make fuzz` runs it: 10,000 and 100,000, about 270 s under TCG+KASAN,
# too much for CI's budget), RRXE_ROBUST_QPS / RRXE_ROBUST_MRS to set them directly.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${RRXE_ROBUST_BIN:-$root/target/release}
only=" ${RRXE_ROBUST_ONLY:-failnth packets verbs concurrency teardown scale} "
seed=${RRXE_ROBUST_SEED:-$(date +%s%N | cut -c1-15)}
# 10,000 datagrams (20,000 until 2026-11-28, 63 s of sending at 316/s under TCG): each of the
# 16 mutation classes of rrxe-fuzz-packets is still drawn about 60 times or more (the rarest,
# ud_forged_source and flush_atomic_write, 122 and 126 times at 20,000), and the checks (the
# verified transfer beside it, drops accounted, rdma res, kmemleak) are the same; make fuzz
# sends 10^6 here.
packets=${RRXE_ROBUST_PACKETS:-10000}
vops=${RRXE_ROBUST_VERBS_OPS:-3000}
if [ "${RRXE_ROBUST_SCALE:-0}" = 1 ]; then qps=10000; mrs=100000; else qps=1000; mrs=3000; fi
qps=${RRXE_ROBUST_QPS:-$qps}; mrs=${RRXE_ROBUST_MRS:-$mrs}
part() { [[ $only == *" $1 "* ]]; }
t0=$(date +%s)
elapsed() { echo "robust: $1 done at +$(( $(date +%s) - t0 )) s"; }
echo "robust: seed $seed packets $packets verbs-ops $vops scale ${qps} QPs ${mrs} MRs"

# --- devices: rrxe0 on veth0 (10.99.0.1), rrxe1 on veth1 (10.99.0.2) in namespace "peer"
net_up() {
  modprobe crc32_generic 2>/dev/null
  modprobe rrxe || return 1
  if ! ip link show veth0 >/dev/null 2>&1; then
    ip -n peer link del veth1 2>/dev/null
    ip link add veth0 type veth peer name veth1 || return 1
    ip addr add 10.99.0.1/24 dev veth0; ip link set veth0 up
  fi
  [ -e /var/run/netns/peer ] || ip netns add peer
  if ip link show veth1 >/dev/null 2>&1; then
    ip link set veth1 netns peer
    ip -n peer addr add 10.99.0.2/24 dev veth1
  fi
  ip -n peer link set veth1 up; ip -n peer link set lo up
  [ -e /sys/class/infiniband/rrxe0 ] || rdma link add rrxe0 type rrxe netdev veth0 || return 1
  [ -e /sys/class/infiniband/rrxe1 ] || ip netns exec peer rdma link add rrxe1 type rrxe netdev veth1 || return 1
  wait_for 30 bash -c '[ "$(port_state rrxe0)" = PORT_ACTIVE ] && [ "$(port_state rrxe1)" = PORT_ACTIVE ] && gid_index rrxe0 && gid_index rrxe1'
}
check "setup.devices" net_up
rdma link show
[ "$FAILED" = 0 ] || summary

# sub NAME CMD...: a program printing PASS/FAIL lines itself, counted here.
sub() {
  local n=$1 t=$2; shift 2; local out rc p f
  out=$(timeout -k 5 "$t" "$@" 2>&1); rc=$?
  out=$(echo "$out" | grep -vE '^[0-9]+ passed, [0-9]+ failed$')
  echo "$out"
  program_took "$n"
  p=$(grep -c '^PASS ' <<<"$out"); f=$(grep -c '^FAIL ' <<<"$out")
  PASSED=$((PASSED + p)); FAILED=$((FAILED + f))
  if [ $rc != 0 ] && [ "$f" = 0 ]; then fail "$n" "exit $rc$([ $rc = 124 ] && echo ' (timeout)'): $(echo "$out" | tail -3)"; fi
  if [ $rc = 0 ] && [ "$p" = 0 ]; then fail "$n" "no check ran"; fi
}
res_now() { rdma res show 2>&1; }
res_is() { [ "$(res_now)" = "$1" ]; }
check_res() {  # check_res NAME BASELINE
  if wait_for 30 res_is "$2"; then pass "$1"; else fail "$1" "baseline: $2 / now: $(res_now)"; fi
}
# bg_transfer TAG DEV DEV2: a verified transfer in the background until /tmp/stop.TAG exists;
# sets BGPID. Returns non-zero if it never printed RUNNING.
bg_transfer() {
  rm -f "/tmp/stop.$1"
  "$bin/rrxe-robust" transfer --dev "$2" --dev2 "$3" --seed "$seed" --until "/tmp/stop.$1" > "/tmp/$1.log" 2>&1 &
  BGPID=$!
  wait_for 60 grep -q RUNNING "/tmp/$1.log"
}
# exits_within SECS PID: whether PID is gone within SECS
exits_within() { wait_for "$1" bash -c "! kill -0 $2 2>/dev/null"; }

base=$(res_now)
echo "robust: rdma res baseline:"; echo "$base" | sed 's/^/    /'

# --- 1. fault injection
if part failnth; then
  dbg=/sys/kernel/debug
  mountpoint -q $dbg || mount -t debugfs none $dbg
  for f in failslab fail_page_alloc; do
    [ -d $dbg/$f ] || continue
    echo N > $dbg/$f/ignore-gfp-wait; echo 0 > $dbg/$f/verbose
  done
  [ -e $dbg/fail_page_alloc/min-order ] && echo 0 > $dbg/fail_page_alloc/min-order
  [ -e $dbg/failslab/ignore-gfp-wait ] || fail "failnth.setup" "no $dbg/failslab (CONFIG_FAILSLAB)"
  for p in ctx pd cq qp-rc qp-uc qp-ud qp-rtr mr ah srq; do
    sub "failnth.$p" 300 "$bin/rrxe-robust" failnth --dev rrxe0 --path "$p"
  done
  check_res "failnth.rdma_res_back_to_baseline" "$base"
  # rdma link add on a netdev of its own
  ip link add vethf0 type veth peer name vethf1 && ip link set vethf0 up && ip link set vethf1 up
  ip addr add 10.98.0.1/24 dev vethf0
  # (3,283 fault sites, 0.5 s each under TCG+KASAN, 29 min in all on 2026-11-26: make test
  # fails the sites in order (every 13th past the first 100) for at most
  # RRXE_ROBUST_LINKADD_SECS, 40 s: about 45 sites at the last CI's pace of 0.86 s a site (60 s
  # and 70 sites until 2026-11-28). RRXE_ROBUST_LINKADD_FULL=1, as make fuzz runs it, fails
  # every one. Near the end, failing netlink_ack()'s allocation loses the answer to a NEWLINK that
  # succeeded: recv gets ENOBUFS and the device exists, which the sweep accepts and deletes)
  if [ "${RRXE_ROBUST_LINKADD_FULL:-0}" = 1 ]; then la=(); lat=3000; else la=(--stride-after 100 --stride 13 --max-secs "${RRXE_ROBUST_LINKADD_SECS:-40}"); lat=200; fi
  [ -n "${RRXE_ROBUST_LINKADD_FIRST:-}" ] && la+=(--first "$RRXE_ROBUST_LINKADD_FIRST")
  sub "failnth.link_add" $lat "$bin/rrxe-robust" linkadd-failnth --name rrxef0 --netdev vethf0 "${la[@]}"
  check "failnth.link_add.netdev_deletable" timeout 20 ip link del vethf0
  check "failnth.link_add.no_device_left" bash -c '! ls /sys/class/infiniband | grep -q rrxef'
  for f in failslab fail_page_alloc; do [ -d $dbg/$f ] && echo Y > $dbg/$f/ignore-gfp-wait; done
  elapsed failnth
fi

# --- 2. packet fuzzer
# udp_counter NAME: a module-wide RoCEv2 socket counter (/sys/class/infiniband/*/udp_counters).
udp_counter() { awk -v k="$1" '$1 == k { print $2; exit }' /sys/class/infiniband/rrxe0/udp_counters; }
udp_drops() { awk '$1 ~ /^rx_drop_/ { s += $2 } END { print s + 0 }' /sys/class/infiniband/rrxe0/udp_counters; }
if part packets; then
  udp_rx0=$(udp_counter rx_packets); udp_drop0=$(udp_drops)
  sub "fuzz_packets" $(( 240 + packets / 200 )) "$bin/rrxe-fuzz-packets" --dev rrxe0 --dev2 rrxe1 \
    --netns peer --packets "$packets" --seed "$seed"
  # The malformed datagrams that no device could take (too short, bad ICRC, ...) are counted
  # by the socket layer, and the file reads as `name value` lines.
  check "fuzz_packets.udp_counters_count_socket_drops" bash -c "
    [ \$(awk 'NF != 2 || \$2 !~ /^[0-9]+\$/' /sys/class/infiniband/rrxe0/udp_counters | wc -l) = 0 ] &&
    [ \$(grep -c . /sys/class/infiniband/rrxe0/udp_counters) = 12 ] &&
    [ $(udp_counter rx_packets) -gt $udp_rx0 ] && [ $(udp_drops) -gt $udp_drop0 ]"
  sed 's/^/    udp_counters: /' /sys/class/infiniband/rrxe0/udp_counters | grep -v ' 0$'
  check_res "fuzz_packets.rdma_res_back_to_baseline" "$base"
  elapsed packets
fi

# --- 3. verbs/rings fuzzer next to a well-behaved process
if part verbs; then
  if bg_transfer vf rrxe0 rrxe1; then
    sub "fuzz_verbs" $(( 240 + vops / 20 )) "$bin/rrxe-fuzz-verbs" --dev rrxe0 --ops "$vops" --seed "$seed"
    touch /tmp/stop.vf
    if exits_within 60 $BGPID; then
      wait $BGPID; rc=$?
      if [ $rc = 0 ]; then pass "fuzz_verbs.other_process_transfer_ok"; grep RESULT /tmp/vf.log | sed 's/^/    /'
      else fail "fuzz_verbs.other_process_transfer_ok" "$(tail -3 /tmp/vf.log)"; fi
    else
      kill -9 $BGPID; fail "fuzz_verbs.other_process_transfer_ok" "did not stop: $(tail -3 /tmp/vf.log)"
    fi
  else
    kill -9 $BGPID 2>/dev/null; fail "fuzz_verbs.other_process_started" "$(tail -3 /tmp/vf.log)"
  fi
  check_res "fuzz_verbs.rdma_res_back_to_baseline" "$base"
  elapsed verbs
fi

# --- 4. concurrency
if part concurrency; then
  sub "shared_cq" 180 "$bin/rrxe-robust" shared-cq --dev rrxe0 --threads 4 --ops 300
  check_res "shared_cq.rdma_res_back_to_baseline" "$base"
  elapsed concurrency
fi

# --- 6. scale (before the destructive teardown steps)
if part scale; then
  sub "scale" $(( 300 + qps / 20 + mrs / 200 )) "$bin/rrxe-robust" scale --dev rrxe0 --qps "$qps" --mrs "$mrs"
  check_res "scale.rdma_res_back_to_baseline" "$base"
  elapsed scale
fi

# --- 5. teardown under traffic
if part teardown; then
  sub "teardown" 180 "$bin/rrxe-robust" teardown --dev rrxe0 --dev2 rrxe1
  check_res "teardown.rdma_res_back_to_baseline" "$base"

  # process SIGKILL
  if bg_transfer kill rrxe0 rrxe1; then
    sleep 1; kill -9 $BGPID; wait $BGPID 2>/dev/null
    check_res "teardown.sigkill.rdma_res_back_to_baseline" "$base"
  else kill -9 $BGPID 2>/dev/null; fail "teardown.sigkill.traffic" "$(tail -3 /tmp/kill.log)"; fi

  # teardown_step NAME CMD...: traffic rrxe0<->rrxe1, then CMD in the background. CMD must
  # finish within 60 s (if it waits for the traffic process to close its context, that one is
  # told to stop after 30 s, which must be enough); the traffic process must exit within 60 s.
  teardown_step() {
    local n=$1; shift
    if ! bg_transfer "$n" rrxe0 rrxe1; then
      kill -9 $BGPID 2>/dev/null; fail "teardown.$n.traffic" "$(tail -3 "/tmp/$n.log")"; return
    fi
    local tp=$BGPID s=$(date +%s)
    sleep 1
    "$@" > "/tmp/$n.cmd" 2>&1 &
    local cp=$!
    local how="while the traffic ran"
    if ! exits_within 30 $cp; then
      how="after the traffic process was told to stop"; touch "/tmp/stop.$n"
      if ! exits_within 30 $cp; then
        fail "teardown.$n.completes" "'$*' blocked for 60 s ($(cat /proc/$cp/stack 2>/dev/null | head -5 | tr '\n' ' '))"
        kill -9 $tp 2>/dev/null; exits_within 60 $cp; return
      fi
    fi
    wait $cp; local crc=$?
    echo "robust: '$*' returned $crc $how, after $(( $(date +%s) - s )) s: $(head -c 300 "/tmp/$n.cmd")"
    pass "teardown.$n.completes"
    touch "/tmp/stop.$n"
    if exits_within 60 $tp; then pass "teardown.$n.traffic_process_exits"
    else fail "teardown.$n.traffic_process_exits" "$(tail -3 "/tmp/$n.log")"; kill -9 $tp; fi
    wait $tp 2>/dev/null
    echo "    traffic: $(grep RESULT "/tmp/$n.log")"
    TD_RC=$crc
  }
  teardown_step link_delete ip netns exec peer rdma link delete rrxe1
  check "teardown.link_delete.device_gone" wait_for 30 bash -c '! test -e /sys/class/infiniband/rrxe1'
  check "teardown.link_delete.readd_works" net_up

  teardown_step netdev_removal ip -n peer link del veth1
  check "teardown.netdev_removal.devices_gone" wait_for 30 bash -c '! test -e /sys/class/infiniband/rrxe0 && ! test -e /sys/class/infiniband/rrxe1'
  check "teardown.netdev_removal.recreate_works" net_up

  teardown_step netns_deletion ip netns del peer
  check "teardown.netns_deletion.device_gone" wait_for 30 bash -c '! test -e /sys/class/infiniband/rrxe1'
  check "teardown.netns_deletion.recreate_works" net_up
  check "teardown.netns_deletion.transfer_after" timeout 60 "$bin/rrxe-robust" transfer --dev rrxe0 --dev2 rrxe1 --secs 3

  teardown_step rmmod rmmod rrxe
  if [ "${TD_RC:-1}" != 0 ]; then
    # refused while in use: it must succeed now that the traffic is gone
    check "teardown.rmmod.unloads_once_idle" timeout 60 rmmod rrxe
  fi
  check "teardown.rmmod.module_gone" bash -c '! grep -q "^rrxe " /proc/modules'
  check "teardown.rmmod.no_device_left" bash -c '! ls /sys/class/infiniband 2>/dev/null | grep -q rrxe'
  check "teardown.netdev_deletable_at_once" timeout 10 ip link del veth0
  elapsed teardown
fi
summary
