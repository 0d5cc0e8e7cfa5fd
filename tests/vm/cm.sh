#!/bin/bash
# rdma_cm on rrxe (the kernel-consumers issue): QP1 (GSI) carries ib_cm's MADs, so the
# librdmacm tools, perftest -R and pyverbs' rdmacm tests connect through it. In a --bare guest:
#
#   A  rrxe0 (veth0, init_net, 10.99.0.1 / fd00:99::1) <-> rrxe1 (veth1, netns "peer",
#      10.99.0.2 / fd00:99::2)                                            [tests/vm/rel-lib.sh]
#      qp1        `rdma resource` lists QP1 (type GSI) on both devices
#      loopback   rping -V on each device to itself (rrxe1's inside the namespace)
#      two        rping -V both ways over IPv4, one way over IPv6; ucmatose with 4 connections;
#                 udaddy; rdma_server/rdma_client; ib_{send,write,read}_bw -R; ucmatose and
#                 udaddy on rrxe0 to itself; 127.0.0.1 fails in ib_core's route resolution
#      mckey      rdma_cm multicast: mckey on rrxe0 to itself and both ways between the devices
#                 (20 messages of 512 B each); the groups' MACs are gone afterwards (the
#                 attach/detach rules and limits are rrxe-verbs-test's group `mcast`)
#      refused    a connect to a port nobody listens on is rejected at once
#      peer_gone  a connect to a device that was deleted fails within the CM's timeouts (rrxe2 on
#                 veth2 -> the deleted rrxe3 on veth3 in netns "gone", beside the steps above)
#   B  rxe0 (rdma_rxe, init_net) <-> rrxe1 (netns "peer"): rping -V and mckey both ways
#
#   scripts/vm-run --bare --timeout 1200 -- $PWD/tests/vm/cm.sh
#
# Environment: RRXE_CM_ITERS rping iterations on rrxe0 to itself (1000; the others 200), RRXE_CM_STEP_TIMEOUT seconds (150).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/rel-lib.sh"
ITERS=${RRXE_CM_ITERS:-1000}
T=${RRXE_CM_STEP_TIMEOUT:-150}
modprobe rdma_ucm || { fail setup.rdma_ucm "$(dmesg | tail -3)"; summary; }
log() { echo "cm: $*"; }

# pair NAME "SERVER CMD" "CLIENT CMD": the server in the background, the client once it has had
# a moment to listen; both must exit 0 within the step timeout. A client that fails while the
# server still runs is tried once more, 3 s later: on a loaded machine the server may not have
# listened within the first 2 s (the client then gets a REJECT, and the server still waits).
pair() {
  local name=$1 srv=$2 cli=$3 so co sp src crc
  so=$(mktemp); co=$(mktemp)
  timeout "$T" bash -c "$srv" >"$so" 2>&1 &
  sp=$!
  sleep 2
  timeout "$T" bash -c "$cli" >"$co" 2>&1; crc=$?
  if [ "$crc" != 0 ] && kill -0 "$sp" 2>/dev/null; then
    log "$name: client rc $crc with the server still up: once more ($(tail -1 "$co"))"
    sleep 3
    timeout "$T" bash -c "$cli" >"$co" 2>&1; crc=$?
  fi
  # A failed client leaves nothing for the server to wait for.
  [ "$crc" != 0 ] && kill "$sp" 2>/dev/null
  wait "$sp"; src=$?
  if [ "$src" = 0 ] && [ "$crc" = 0 ]; then
    pass "$name"
  else
    fail "$name" "server rc $src: $(tail -3 "$so" | tr '\n' ' ') | client rc $crc: $(tail -3 "$co" | tr '\n' ' ')"
  fi
  rm -f "$so" "$co"
}

# rping -V: every iteration's data is verified by both sides ($5: iterations, default ITERS).
rping_pair() {  # NAME SERVER_PREFIX SERVER_ADDR CLIENT_PREFIX [ITERATIONS]
  local n=${5:-$ITERS}
  pair "$1" "$2 rping -s -a $3 -V -C $n" "$4 rping -c -a $3 -V -C $n"
}

# --- A: two rrxe devices
topo_a || summary
ip -6 addr add fd00:99::1/64 dev veth0 nodad
ip -n peer -6 addr add fd00:99::2/64 dev veth1 nodad
v6_gid() { grep -qi "fd00:0099:0000:0000:0000:0000:0000:000$2" /sys/class/infiniband/"$1"/ports/1/gids/* 2>/dev/null; }
wait_for 20 v6_gid rrxe0 1 && wait_for 20 v6_gid rrxe1 2 || log "IPv6 GIDs not (yet) in the tables"
P=(ip netns exec peer)

check cm.qp1.rrxe0 bash -c "rdma res show qp link rrxe0/1 | grep -q 'lqpn 1 type GSI'"
check cm.qp1.rrxe1 bash -c "ip netns exec peer rdma res show qp link rrxe1/1 | grep -q 'lqpn 1 type GSI'"
# Driver details in `rdma resource ... -dd` (fill_res_*_entry): QP1's rings (ib_mad keeps its
# receive queue full), its CQ, and a user QP/CQ/MR held by a waiting pingpong server.
check cm.res.qp1_details bash -c "rdma res show qp link rrxe0/1 -dd | grep 'lqpn 1 ' | grep -E 'drv_rq_depth [0-9]+ drv_rq_posted [1-9]' | grep -q 'drv_retry_timer'"
ibv_rc_pingpong -d rrxe0 -g "$G0" >/dev/null 2>&1 &
pp=$!
sleep 2
check cm.res.user_qp_details bash -c "rdma res show qp link rrxe0/1 -dd | grep 'comm ibv_rc_pingpong' | grep -q 'drv_sq_depth'"
check cm.res.user_cq_details bash -c "rdma res show cq dev rrxe0 -dd | grep 'comm ibv_rc_pingpong' | grep -q 'drv_ring_slots'"
check cm.res.user_mr_details bash -c "rdma res show mr dev rrxe0 -dd | grep 'comm ibv_rc_pingpong' | grep -q 'drv_type user drv_pages 1'"
kill "$pp" 2>/dev/null; wait "$pp" 2>/dev/null

rping_pair cm.rping.loopback.rrxe0 "" 10.99.0.1 ""
# The other paths, directions and address families with fewer iterations (1,000 take about a
# minute under TCG).
rping_pair cm.rping.loopback.rrxe1_netns "${P[*]}" 10.99.0.2 "${P[*]}" 200
rping_pair cm.rping.two_devices.rrxe0_to_rrxe1 "${P[*]}" 10.99.0.2 "" 200
rping_pair cm.rping.two_devices.rrxe1_to_rrxe0 "" 10.99.0.1 "${P[*]}" 200
rping_pair cm.rping.ipv6.rrxe0_to_rrxe1 "${P[*]}" fd00:99::2 "" 200

pair cm.ucmatose.4_connections "${P[*]} ucmatose -c 4 -C 100" "ucmatose -s 10.99.0.2 -c 4 -C 100"
pair cm.udaddy "${P[*]} udaddy -c 4" "udaddy -s 10.99.0.2 -c 4"
pair cm.rdma_server_client "${P[*]} rdma_server" "rdma_client -s 10.99.0.2"
# Server and client on one device (rrxe0 to itself, by its own address; issue 27).
pair cm.ucmatose.one_device "ucmatose -b 10.99.0.1 -c 2 -C 20" "ucmatose -s 10.99.0.1 -c 2 -C 20"
pair cm.udaddy.one_device "udaddy -b 10.99.0.1 -c 2" "udaddy -s 10.99.0.1 -c 2"
# By a loopback address (127.0.0.1, ::1) rdma_cm cannot reach any RoCE device, rdma_rxe and
# hardware alike: cma_bind_loopback() leaves the ID without a bound netdev, and route
# resolution for RoCE (cma_iboe_set_path_rec_l2_fields) then fails with ENODEV. The address
# of the device's netdev is the way (the checks above); this one shows the cause stays ib_core's.
check_fails cm.loopback_address.enodev_in_ib_core "rdma_resolve_route: No such device" \
  timeout "$T" rping -c -a 127.0.0.1 -C 1
# A connect to a deleted device waits out ib_cm's whole REQ retry budget (about 80 s), so it
# runs in the background beside the perftest and multicast steps, on a pair of its own: rrxe2 on
# veth2 (init_net, 10.97.0.1) and rrxe3 on veth3 (netns "gone", 10.97.0.2); rrxe3 is deleted
# (veth3 stays up and answers ARP), then rping connects to 10.97.0.2 from rrxe2. Its check
# (cm.connect.peer_gone_fails) follows the multicast steps.
pg=
gid4() { grep -q "0000:0000:0000:0000:0000:ffff:$2" /sys/class/infiniband/"$1"/ports/1/gids/* 2>/dev/null; }
if ip link add veth2 type veth peer name veth3 && ip netns add gone && ip link set veth3 netns gone &&
  ip addr add 10.97.0.1/24 dev veth2 && ip link set veth2 up &&
  ip -n gone addr add 10.97.0.2/24 dev veth3 && ip -n gone link set veth3 up &&
  rdma link add rrxe2 type rrxe netdev veth2 && ip netns exec gone rdma link add rrxe3 type rrxe netdev veth3 &&
  wait_for 30 gid4 rrxe2 0a61:0001 && wait_for 30 gid4 rrxe3 0a61:0002 &&
  ip netns exec gone rdma link delete rrxe3; then
  # (twice the step timeout: in the background it costs nothing unless it hangs, and on a
  # machine running three guests on two cores the REQ retries took 144 s, against 80 s alone)
  ( s=$EPOCHSECONDS; timeout $((2 * T)) rping -c -a 10.97.0.2 -C 1 > /tmp/peer_gone.out 2>&1
    echo "$? $((EPOCHSECONDS - s))" > /tmp/peer_gone.rc ) &
  pg=$!
else
  fail cm.connect.peer_gone_fails "setup of rrxe2 -> deleted rrxe3: $(rdma link show 2>&1 | tr '\n' ' ')"
fi

# -F: perftest's cycle-counter sanity check fails under TCG (it then refuses to report).
port=18600
for t in send write read; do
  port=$((port + 1))
  pair "cm.perftest.${t}_bw_R" "${P[*]} ib_${t}_bw -d rrxe1 -R -F -p $port -n 200 -s 4096" \
    "ib_${t}_bw -d rrxe0 -R -F -p $port -n 200 -s 4096 10.99.0.2"
done

# Multicast (UD, rdma_cm joins an IPv4 group and sends the IGMP report; librdmacm attaches the
# id's QP): a receiving mckey and a sending one; the receiver must get every message (it polls
# until it has -C completions, so a lost one shows as the step timeout). mckey's sender also
# joins, so on one device its own QP gets a copy of each message too.
# With ROUNDS > 1 the sender runs again (a fresh mckey: join, post SENT, leave) while the
# receiver still waits, up to ROUNDS times.
mckey_pair() {  # NAME GROUP "RECEIVER_PREFIX" RECEIVER_ADDR "SENDER_PREFIX" SENDER_ADDR [SENT [RECEIVED [ROUNDS]]]
  local n=$1 g=$2 sent=${7:-20} want=${8:-20} rounds=${9:-1} ro so rc src i
  ro=$(mktemp); so=$(mktemp)
  timeout 90 $3 stdbuf -oL mckey -m "$g" -b "$4" -C "$want" -S 512 >"$ro" 2>&1 &
  rc=$!
  # UD: a message sent before the receiver has joined and attached is lost, so the sender
  # starts once the receiver polls (it has joined, attached and posted its receives).
  wait_for 30 grep -q "receiving data transfers" "$ro"
  for ((i = 1; i <= rounds; i++)); do
    timeout 60 $5 stdbuf -oL mckey -m "$g" -b "$6" -s -C "$sent" -S 512 >"$so" 2>&1; src=$?
    [ "$src" = 0 ] || break
    # (a moment for the receiver to count what arrived before it is asked again)
    wait_for 3 bash -c "! kill -0 $rc 2>/dev/null" || true
    kill -0 "$rc" 2>/dev/null || break
  done
  [ "$rounds" -gt 1 ] && log "$n: $((i > rounds ? rounds : i)) sender round(s) of $sent messages"
  wait "$rc"; rc=$?
  if [ "$rc" = 0 ] && [ "$src" = 0 ] && grep -q "data transfers complete" "$ro" \
    && ! grep -qiE "MULTICAST_ERROR|fail" "$ro" "$so"; then
    pass "$n"
  else
    fail "$n" "receiver rc $rc: $(tail -3 "$ro" | tr '\n' ' ') | sender rc $src: $(tail -3 "$so" | tr '\n' ' ')"
  fi
  rm -f "$ro" "$so"
}
mc0=$(rdma statistic show link rrxe0/1 2>/dev/null | grep -oE 'rcvd_pkts [0-9]+' | cut -d' ' -f2)
mckey_pair cm.mckey.one_device 239.1.2.3 "" 10.99.0.1 "" 10.99.0.1
mckey_pair cm.mckey.two_devices.rrxe0_to_rrxe1 239.1.2.4 "${P[*]}" 10.99.0.2 "" 10.99.0.1
mckey_pair cm.mckey.two_devices.rrxe1_to_rrxe0 239.1.2.5 "" 10.99.0.1 "${P[*]}" 10.99.0.2
# Every join left: no group, no attachment, the netdev filters given back.
check cm.mckey.groups_left bash -c "! ip maddr show dev veth0 | grep -qE '01:00:5e:01:02:0[345]'"
log "rrxe0 received $(( $(rdma statistic show link rrxe0/1 | grep -oE 'rcvd_pkts [0-9]+' | cut -d' ' -f2) - ${mc0:-0} )) packets during the multicast steps"

# Nobody listens on the port: the peer's CM rejects at once.
start=$(date +%s)
out=$(timeout 60 rping -c -a 10.99.0.2 -p 7999 -C 1 2>&1); rc=$?
if [ "$rc" != 0 ] && [ "$rc" != 124 ]; then pass cm.connect.no_listener_rejected; else fail cm.connect.no_listener_rejected "rc $rc after $(( $(date +%s) - start )) s: $(echo "$out" | tail -3)"; fi

# The peer device is gone (its netdev stays up): the REQ goes unanswered and the connect fails
# within the CM's retry budget instead of hanging (started before the perftest steps, above).
if [ -n "$pg" ]; then
  wait "$pg"
  read -r rc took < /tmp/peer_gone.rc || { rc=x; took=?; }
  if [ "$rc" != 0 ] && [ "$rc" != 124 ]; then pass cm.connect.peer_gone_fails
  else fail cm.connect.peer_gone_fails "rc $rc after $took s: $(tail -3 /tmp/peer_gone.out)"; fi
  log "connect to a deleted peer failed after $took s: $(tail -1 /tmp/peer_gone.out)"
fi
rdma link delete rrxe2 2>/dev/null; ip link del veth2 2>/dev/null; ip netns del gone 2>/dev/null

# --- B: interop with rdma_rxe
if topo_b; then
  rping_pair cm.interop.rping.rxe0_to_rrxe1 "${P[*]}" 10.99.0.2 "" 200
  rping_pair cm.interop.rping.rrxe1_to_rxe0 "" 10.99.0.1 "${P[*]}" 200
  # mckey's sender destroys its QP right after posting, without waiting for completions;
  # rdma_rxe sends UD from a work item and flushes what it has not sent by then (17-19 of 20
  # and 24 of 40 messages left in trials, 4 of 40 in a clean-clone run; rrxe sends within
  # post_send). So rxe0 posts 40 per round, up to 8 rounds, until the receiver has 10;
  # rdma_rxe's sent-packet counter is logged.
  s0=$(rdma statistic show link rxe0/1 2>/dev/null | grep -oE 'sent_pkts [0-9]+' | cut -d' ' -f2)
  mckey_pair cm.interop.mckey.rxe0_to_rrxe1 239.1.2.6 "${P[*]}" 10.99.0.2 "" 10.99.0.1 40 10 8
  log "rdma_rxe sent $(( $(rdma statistic show link rxe0/1 2>/dev/null | grep -oE 'sent_pkts [0-9]+' | cut -d' ' -f2) - ${s0:-0} )) of the multicast messages mckey posted"
  mckey_pair cm.interop.mckey.rrxe1_to_rxe0 239.1.2.7 "" 10.99.0.1 "${P[*]}" 10.99.0.2
fi
summary
