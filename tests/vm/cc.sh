#!/bin/bash
# Congestion control (issue 29): DCQCN between two rrxe devices through a bottleneck that
# marks. In a --bare guest: topology A of tests/vm/rel-lib.sh (rrxe0 on veth0 in init_net,
# rrxe1 on veth1 in netns "peer"); veth0's egress is the bottleneck: netem at RRXE_CC_RATE
# (20mbit) with RRXE_CC_MARK (2%) of packets "lost" and `ecn`, which marks an ECN-capable
# packet Congestion Experienced instead of dropping it (and drops the others). The incast step
# uses tbf and red (in the kernel config since issue 29's benchmark).
#   settings   /sys/class/infiniband/DEV/dcqcn shows every setting, takes `name value`, and
#              refuses an unknown name or a value out of range with EINVAL, changing nothing
#   marked     RC traffic rrxe0 -> rrxe1 through the bottleneck: rrxe1 counts CE arrivals (so
#              rrxe0's packets left ECN-capable: netem marks no other) and sends CNPs (no more
#              than the marks), rrxe0 counts the CNPs and cuts its rate (`rate_cuts`), and the
#              data arrives intact (rrxe-integrity, RC)
#   ecn_off    with `ecn 0` on rrxe0 its packets leave not ECN-capable: netem drops them instead
#              of marking (RC recovers, the data arrives intact), no CE, no CNP
#   incast     RRXE_CC_INCAST_N (4) senders on rrxe0 write into rrxe1 at once (rrxe-incast, one
#              QP each, 2 x 64 KiB outstanding, RRXE_CC_INCAST_SECS 20 s) through a bottleneck
#              that marks: tbf at RRXE_CC_INCAST_RATE (8mbit) with red `ecn` under it, veth MTU
#              9000 (RoCE MTU 4096), the DCQCN settings scaled for TCG (docs/congestion-
#              control.md; scripts/bench-incast-guest uses the same). The senders keep more in
#              flight (512 KiB) than red holds (400 KB), so their rates and windows (cut by CNPs)
#              must keep the queue short: red marked
#              (the bottleneck was congested), the senders cut their rates, every byte of every
#              WRITE arrived in place (--verify), and red dropped none of their packets (no
#              full-queue drop; it drops early only packets that are not ECN-capable, and
#              rrxe's are; a drop is an XFAIL until issue 29's goal is met, a failure with
#              RRXE_CC_INCAST_STRICT=1). With
#              RRXE_CC_SAMPLES=1 it samples red's backlog and the senders' windows through the
#              run, prints the peaks, and on a drop every sample
#
#   scripts/vm-run --bare --timeout 900 -- $PWD/tests/vm/cc.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/rel-lib.sh"
T=${RRXE_CC_STEP_TIMEOUT:-240}
RATE=${RRXE_CC_RATE:-20mbit}
MARK=${RRXE_CC_MARK:-2%}
bin=${RRXE_CC_BIN:-$(cd "$(dirname "$0")/../.." && pwd)/target/release}
log() { echo "cc: $*"; }

topo_a || summary
f=/sys/class/infiniband/rrxe0/dcqcn
# The bottlenecks below drop what is not ECN-capable, ARP included: see pin_neighbours.
check cc.neighbours_pinned pin_neighbours

# --- settings
check cc.settings.listed bash -c "grep -q '^ecn 1$' $f && grep -q '^cc 1$' $f && grep -q '^rp_gd 11$' $f && grep -q '^np_min_time_between_cnps 50$' $f && [ \$(wc -l < $f) = 15 ]"
bad() { ! echo "$1" > "$f" 2>/dev/null; }
check cc.settings.refused bash -c "$(declare -f bad); f=$f; bad 'nonsense 1' && bad 'rp_time_reset 0' && bad 'ecn 2' && bad 'rp_gd 99' && bad 'rp_ai_rate' && grep -q '^rp_time_reset 300$' $f"
check cc.settings.applied bash -c "echo 'rp_ai_rate 10' > $f && grep -q '^rp_ai_rate 10$' $f && echo 'rp_ai_rate 5' > $f"
check cc.settings.per_device bash -c "echo 'rp_hai_rate 70' > $f && ip netns exec peer grep -q '^rp_hai_rate 50$' /sys/class/infiniband/rrxe1/dcqcn && echo 'rp_hai_rate 50' > $f"

# --- the bottleneck
bottleneck() { tc qdisc replace dev veth0 root netem rate "$RATE" loss "$MARK" ecn; }
# netem counts a mark as a drop: "dropped" is marks with ecn, losses without.
marks() { tc -s qdisc show dev veth0 | awk '/dropped/ { for (i = 1; i <= NF; i++) if ($i == "(dropped") { v = $(i+1); sub(",", "", v); s += v } } END { print s + 0 }'; }
c() { ctr "$1" "$2" || echo 0; }
traffic() {  # traffic NAME OPS: RC integrity run rrxe0 -> rrxe1 through the bottleneck
  timeout -k 5 "$T" "$bin/rrxe-integrity" --dev "$DEV0" --dev2 "$DEV1" --types rc --ops "$2" \
    --max-size 262144 > "/tmp/cc.$1.out" 2>&1
}
check cc.bottleneck bottleneck

snap m0
m0=$(marks)
if traffic marked 60; then pass cc.marked.integrity; else fail cc.marked.integrity "$(tail -5 /tmp/cc.marked.out)"; fi
grep -E '^INFO .*moved' /tmp/cc.marked.out | sed 's/^/    /'
snap m1
m1=$(marks)
d() { echo $(( $(c "/tmp/ctr.$2.$1" "$3") - $(c "/tmp/ctr.$4.$1" "$3") )); }
ce=$(d rrxe1 m1 rx_ecn_ce m0); cnps=$(d rrxe1 m1 tx_cnps m0)
rcnp=$(d rrxe0 m1 rx_cnps m0); cuts=$(d rrxe0 m1 rate_cuts m0); paced=$(d rrxe0 m1 rate_paced m0)
log "bottleneck $RATE, $MARK marked: netem marked $((m1 - m0)); rrxe1 rx_ecn_ce $ce tx_cnps $cnps; rrxe0 rx_cnps $rcnp rate_cuts $cuts rate_paced $paced"
tc -s qdisc show dev veth0 | sed 's/^/    /'
check cc.marked.ce_arrived_so_ect_left test "$ce" -gt 0
check cc.marked.cnps_sent_and_spaced test "$cnps" -gt 0 -a "$cnps" -le "$ce"
check cc.marked.cnps_received test "$rcnp" -gt 0
check cc.marked.rate_cut test "$cuts" -gt 0

# --- marking off: the sender's packets are not ECN-capable, so netem drops instead of marking
echo 'ecn 0' > "$f"
snap o0; o0=$(marks)
if traffic ecn_off 20; then pass cc.ecn_off.integrity; else fail cc.ecn_off.integrity "$(tail -5 /tmp/cc.ecn_off.out)"; fi
snap o1; o1=$(marks)
log "ecn 0: netem dropped $((o1 - o0)); rrxe1 rx_ecn_ce +$(d rrxe1 o1 rx_ecn_ce o0) tx_cnps +$(d rrxe1 o1 tx_cnps o0)"
check cc.ecn_off.no_ce test "$(d rrxe1 o1 rx_ecn_ce o0)" = 0
check cc.ecn_off.no_cnps test "$(d rrxe1 o1 tx_cnps o0)" = 0
echo 'ecn 1' > "$f"

tc qdisc del dev veth0 root 2>/dev/null

# --- incast: N senders, one receiver, DCQCN on, nothing dropped
IN=${RRXE_CC_INCAST_N:-4}
IRATE=${RRXE_CC_INCAST_RATE:-8mbit}
ISECS=${RRXE_CC_INCAST_SECS:-20}
ILIMIT=400000
tcg_dcqcn="np_min_time_between_cnps=5000 rp_rate_reduce_monitor_period=5000 rp_dce_tcp_rtt=5000 rp_time_reset=50000 rp_byte_reset=131072 rp_ai_rate=1 rp_hai_rate=2 rp_threshold=5"
set_dcqcn() {  # set_dcqcn NAME=VALUE...: on both devices
  local kv
  for kv in "$@"; do
    echo "${kv%%=*} ${kv#*=}" > "$f" && ip netns exec peer sh -c "echo '${kv%%=*} ${kv#*=}' > /sys/class/infiniband/rrxe1/dcqcn" || return 1
  done
}
# shellcheck disable=SC2086
check cc.incast.settings set_dcqcn $tcg_dcqcn
ip link set veth0 mtu 9000; ip -n peer link set veth1 mtu 9000
incast_bottleneck() {
  tc qdisc replace dev veth0 root handle 1: tbf rate "$IRATE" burst 20000 limit $ILIMIT &&
    tc qdisc add dev veth0 parent 1:1 handle 10: red limit $ILIMIT min 20000 max 60000 avpkt 4200 \
      burst 15 probability 0.2 bandwidth "$IRATE" ecn
}
check cc.incast.bottleneck incast_bottleneck
wait_for 20 bash -c '[ "$(active_mtu rrxe0)" = 4096 ] && [ "$(active_mtu rrxe1)" = 4096 ]' ||
  log "RoCE MTU still $(active_mtu rrxe0) after the veth MTU change"
# Samples through the incast: red's backlog (bytes, packets) as often as `tc` runs (under TCG
# about twice a second), and the RC windows of rrxe0's QPs (`drv_cwnd`, the GSI QP's included)
# every fifth time (an `rdma res` dump takes seconds here; the last one is repeated between),
# so that a drop shows whether the windows or a burst filled the queue.
incast_samples() {
  local q w i=0
  while :; do
    q=$(tc -s qdisc show dev veth0 | awk '/qdisc red/ { r = 1 } r && /backlog/ { print $2, $3; exit }')
    if [ $((i % 5)) = 0 ]; then
      w=$(rdma res show qp link rrxe0 -dd 2>/dev/null | grep -o 'drv_cwnd [0-9]*' | awk '{ print $2 }' | paste -sd+)
    fi
    echo "$(date +%s.%N | cut -c1-14) backlog ${q:-? ?} cwnd $(( ${w:-0} )) ${w:-?}"
    i=$((i + 1))
    sleep 0.2
  done
}
snap i0
# Off by default: the samples' process starts take guest CPU from the senders and the receiver
# (under TCG each `tc` and `rdma` takes a second or more), which delays the CNPs the check
# depends on. RRXE_CC_SAMPLES=1 turns them on, to study a drop.
sampler=
: > /tmp/cc.incast.samples
if [ "${RRXE_CC_SAMPLES:-0}" = 1 ]; then
  incast_samples > /tmp/cc.incast.samples 2>&1 &
  sampler=$!
fi
if timeout -k 5 $((ISECS + 150)) "$bin/rrxe-incast" --dev "$DEV0" --dev2 "$DEV1" --qps "$IN" --depth 2 \
    --secs "$ISECS" --interval-ms 1000 --verify > /tmp/cc.incast.out 2>&1; then
  pass cc.incast.every_byte_arrived
else
  fail cc.incast.every_byte_arrived "$(grep -E '^(FAIL|DONE)' /tmp/cc.incast.out | tail -3)"
fi
[ -n "$sampler" ] && { kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null; }
snap i1
# The peaks: red's backlog in packets, and the sum of the windows.
[ -n "$sampler" ] && log "incast samples: $(wc -l < /tmp/cc.incast.samples); red backlog peak $(awk '{ v = $4; sub("p", "", v); if (v + 0 > m) m = v + 0 } END { print m + 0 }' /tmp/cc.incast.samples) packets; windows peak sum $(awk '$6 + 0 > m { m = $6 + 0; l = $7 } END { print m + 0 " (" l ")" }' /tmp/cc.incast.samples) packets"

grep -E '^(DONE|START)' /tmp/cc.incast.out | sed 's/^/    /'
qs=$(tc -s qdisc show dev veth0)
echo "$qs" | sed 's/^/    /'
# red's counters: "marked M early E pdrop P other O". With `ecn` red marks an ECN-capable
# packet where it would drop it (rrxe's are all ECT): "early" counts the packets it dropped
# because they were not ECN-capable (IPv6 neighbour discovery; no ARP: the neighbours are
# pinned), "pdrop" the ones the full queue dropped, ECN-capable or not: rrxe's packets are lost
# only there (or in "other").
redc() { echo "$qs" | awk -v k="$1" '/marked/ { for (i = 1; i < NF; i++) if ($i == k) s += $(i+1) } END { print s + 0 }'; }
imarks=$(redc marked)
idrops=$(( $(redc pdrop) + $(redc other) ))
icuts=$(d rrxe0 i1 rate_cuts i0)
log "incast: $IN senders through tbf $IRATE + red ecn: red marked $imarks, dropped $idrops full-queue + other, $(redc early) not ECN-capable; rrxe0 rx_cnps $(d rrxe0 i1 rx_cnps i0) rate_cuts $icuts cnp_window_cuts $(d rrxe0 i1 cnp_window_cuts i0) retransmits $(d rrxe0 i1 retransmits i0) spurious_timeouts $(d rrxe0 i1 spurious_timeouts i0)"
check cc.incast.congested_marked test "$imarks" -gt 0
check cc.incast.rates_cut test "$icuts" -gt 0
# Issue 29's goal: nothing of theirs dropped. Not met: on 2026-11-30 5 of 10 runs dropped 2-25
# packets at the full queue, with the module of that day and with the one before it
# (docs/tests.md: the windows reach 32-47 packets each where red holds 96 for four, and the
# DCQCN rate under TCG reacts too late in some runs). Until it is, a drop is an XFAIL, printed
# with its count; RRXE_CC_INCAST_STRICT=1 makes it a failure again.
if [ "$idrops" = 0 ]; then pass cc.incast.nothing_dropped
elif [ "${RRXE_CC_INCAST_STRICT:-0}" = 1 ]; then
  sed 's/^/    sample /' /tmp/cc.incast.samples
  fail cc.incast.nothing_dropped "$idrops dropped at the full queue"
else echo "XFAIL cc.incast.nothing_dropped: $idrops dropped at the full queue (issue 29, open; RRXE_CC_INCAST_STRICT=1 fails it)"; fi
tc qdisc del dev veth0 root 2>/dev/null
ip link set veth0 mtu 1500; ip -n peer link set veth1 mtu 1500
ip neigh del 10.99.0.2 dev veth0 2>/dev/null; ip -n peer neigh del 10.99.0.1 dev veth1 2>/dev/null
del_links rrxe
check cc.module_unloads bash -c 'wait_for() { local e=$(( $(date +%s) + 20 )); until rmmod rrxe 2>/dev/null; do [ $(date +%s) -ge $e ] && return 1; sleep 0.5; done; }; wait_for'
summary
