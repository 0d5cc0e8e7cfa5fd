# Sourced by tests/vm/reliability.sh and tests/vm/soak.sh (after lib.sh), in a --bare guest
# (scripts/vm-run: veth0 10.99.0.1/24 <-> veth1 10.99.0.2/24 in init_net, ib_uverbs loaded).
#
# Topologies (each function tears down what the other built):
#   topo_a        rrxe<->rrxe: rrxe0 on veth0 in init_net, rrxe1 on veth1 in netns "peer"
#   topo_b        interop: rxe0 (rdma_rxe) on veth0 in init_net, rrxe1 on veth1 in netns
#                 "peer". rdma_rxe 6.12 binds UDP 4791 in init_net only (at module load), so
#                 the rrxe side must live in another namespace, and no rrxe device in init_net
#                 may hold the port when rdma_rxe loads.
#   topo_b rxe    rxe<->rxe (harness validation): rxe0 on veth0 and rxe1 on veth1, both in
#                 init_net with accept_local (as tests/vm/datapath.sh does for rxe)
# They set DEV0/DEV1 (the devices), G0/G1 (their RoCE v2 IPv4 GID indexes), IP0/IP1, and the
# command prefixes X0/X1 (arrays: `ip netns exec peer` for the side in "peer", else empty),
# NS0/NS1 (tc/ip prefixes for the side's veth) and TOPO (A, B or Brxe).

both_active() {
  [ "$(port_state "$1")" = PORT_ACTIVE ] && [ "$(port_state "$2")" = PORT_ACTIVE ] &&
    gid_index "$1" >/dev/null && gid_index "$2" >/dev/null
}
export -f both_active
# wait_active SECS DEV DEV: waits for both_active, polling the ports' state in sysfs first (read
# by bash: an ibv_devinfo and an awk per port and poll cost about 2 s under TCG), then confirms
# through verbs (both_active).
port_up() { local st=; read -r st 2>/dev/null < "/sys/class/infiniband/$1/ports/1/state"; [ "$st" = "4: ACTIVE" ]; }
wait_active() {
  local end=$(( EPOCHSECONDS + $1 ))
  until port_up "$2" && port_up "$3" && gid_index "$2" > /dev/null && gid_index "$3" > /dev/null; do
    [ "$EPOCHSECONDS" -ge "$end" ] && break; nap 0.2
  done
  wait_for $(( end - EPOCHSECONDS > 5 ? end - EPOCHSECONDS : 5 )) both_active "$2" "$3"
}

rel_log() { echo "reliability: $*"; }

# Removes every RDMA link of a type ("rrxe" or "rxe"), in init_net and in "peer".
del_links() {
  local ty=$1 l t
  for l in $(rdma link show 2>/dev/null | awk '{print $2}' | cut -d/ -f1 | sort -u); do
    if is_rrxe "$l"; then t=rrxe; else t=rxe; fi
    [ "$t" = "$ty" ] || continue
    rdma link delete "$l" 2>/dev/null || ip netns exec peer rdma link delete "$l" 2>/dev/null
  done
}
is_rrxe() { [ -e "/sys/class/infiniband/$1/rrxe_uabi" ]; }

veth1_to_peer() {
  ip netns list 2>/dev/null | grep -qw peer || { ip netns add peer; ip -n peer link set lo up; }
  if ip link show veth1 >/dev/null 2>&1; then
    ip link set veth1 netns peer
    ip -n peer addr add 10.99.0.2/24 dev veth1
  fi
  ip -n peer link set veth1 up
  ip link set veth0 up
}

# pin_neighbours: topology A's two addresses as permanent neighbour entries on both ends, for
# tests whose bottleneck is red with `ecn`. red marks an ECN-capable packet where it would drop
# it but drops the others early, ARP among them; under tbf its average queue (moved only by
# enqueues) stays above `max` long after the congestion ended, so an entry that went stale
# during the run (every 15-45 s; UDP confirms nothing) fails to resolve again, its packets die
# unseen in the neighbour queue, and an RC sender ends in RETRY_EXC_ERR (issue 29's incast
# flake, docs/tests.md). A switch keeps ARP out of the queue it marks; so does this.
pin_neighbours() {
  local m0 m1
  m0=$(cat /sys/class/net/veth0/address) && m1=$(ip netns exec peer cat /sys/class/net/veth1/address) &&
    ip neigh replace 10.99.0.2 lladdr "$m1" dev veth0 nud permanent &&
    ip -n peer neigh replace 10.99.0.1 lladdr "$m0" dev veth1 nud permanent
}

veth1_to_init() {
  if ip -n peer link show veth1 >/dev/null 2>&1; then
    ip -n peer link set veth1 netns 1
    ip addr add 10.99.0.2/24 dev veth1
  fi
  ip link set veth1 up
  ip link set veth0 up
}

# peer_sleeper: makes PEER_SLEEPER the pid of a process that lives in netns "peer" (a `sleep`
# started there once, killed when the script exits), so that /proc/PEER_SLEEPER/net shows the
# namespace's sockets without a process per look (tcp_listening in tests/vm/lib.sh).
PEER_SLEEPER=
peer_sleeper() {
  [ -e /var/run/netns/peer ] || return 1
  [ -n "$PEER_SLEEPER" ] && [ /proc/$PEER_SLEEPER/ns/net -ef /var/run/netns/peer ] && return 0
  [ -n "$PEER_SLEEPER" ] && kill "$PEER_SLEEPER" 2>/dev/null
  ip netns exec peer sleep 1000000 < /dev/null > /dev/null 2>&1 &
  PEER_SLEEPER=$!
  trap '[ -n "$PEER_SLEEPER" ] && kill "$PEER_SLEEPER" 2>/dev/null' EXIT
  local i
  for i in {1..100}; do [ /proc/$PEER_SLEEPER/ns/net -ef /var/run/netns/peer ] && return 0; nap 0.1; done
  return 1
}

topo_wait() {
  if ! wait_active 30 "$DEV0" "$DEV1"; then
    fail "setup.$TOPO.ports_active" "$DEV0 $(port_state "$DEV0") / $DEV1 $(port_state "$DEV1"); $(rdma link show 2>&1 | tr '\n' ' ')"
    return 1
  fi
  G0=$(gid_index "$DEV0"); G1=$(gid_index "$DEV1")
  pass "setup.$TOPO.ports_active"
  rel_log "topology $TOPO: $DEV0 GID[$G0] $IP0 ${X0[*]:-(init_net)} <-> $DEV1 GID[$G1] $IP1 ${X1[*]:-(init_net)}, mtu $(active_mtu "$DEV0")"
}

topo_a() {
  TOPO=A
  del_links rxe
  grep -q '^rdma_rxe ' /proc/modules && rmmod rdma_rxe
  modprobe rrxe || { fail "setup.A.modprobe_rrxe"; return 1; }
  veth1_to_peer
  [ -e /sys/class/infiniband/rrxe0 ] || rdma link add rrxe0 type rrxe netdev veth0 || { fail "setup.A.rrxe0"; return 1; }
  [ -e /sys/class/infiniband/rrxe1 ] || ip netns exec peer rdma link add rrxe1 type rrxe netdev veth1 \
    || { fail "setup.A.rrxe1"; return 1; }
  DEV0=rrxe0; DEV1=rrxe1; IP0=10.99.0.1; IP1=10.99.0.2
  X0=(); X1=(ip netns exec peer); NS0=(); NS1=(ip netns exec peer)
  topo_wait
}

# topo_b [rxe]: the interop topology, or with "rxe" rdma_rxe on both ends.
topo_b() {
  local peer=${1:-rrxe}
  modprobe crc32_generic 2>/dev/null
  # rdma_rxe must find UDP 4791 free in init_net: no rrxe device there (and none of its
  # sockets); if rrxe still holds it, reload rrxe.
  [ -e /sys/class/infiniband/rrxe0 ] && rdma link delete rrxe0
  if ! grep -q '^rdma_rxe ' /proc/modules && ! modprobe rdma_rxe 2>/dev/null; then
    rel_log "rdma_rxe did not load with rrxe loaded: reloading rrxe"
    del_links rrxe; rmmod rrxe 2>/dev/null
    modprobe rdma_rxe || { fail "setup.B.modprobe_rdma_rxe" "$(dmesg | tail -3)"; return 1; }
  fi
  if [ "$peer" = rxe ]; then
    TOPO=Brxe
    del_links rrxe
    veth1_to_init
    for k in all default veth0 veth1; do sysctl -qw "net.ipv4.conf.$k.accept_local=1"; done
    for k in all veth0 veth1; do sysctl -qw "net.ipv4.conf.$k.rp_filter=0"; done
    [ -e /sys/class/infiniband/rxe0 ] || rdma link add rxe0 type rxe netdev veth0 || { fail "setup.$TOPO.rxe0"; return 1; }
    [ -e /sys/class/infiniband/rxe1 ] || rdma link add rxe1 type rxe netdev veth1 || { fail "setup.$TOPO.rxe1"; return 1; }
    DEV0=rxe0; DEV1=rxe1; X1=(); NS1=()
  else
    TOPO=B
    modprobe rrxe || { fail "setup.B.modprobe_rrxe"; return 1; }
    veth1_to_peer
    [ -e /sys/class/infiniband/rxe0 ] || rdma link add rxe0 type rxe netdev veth0 || { fail "setup.B.rxe0"; return 1; }
    [ -e /sys/class/infiniband/rrxe1 ] || ip netns exec peer rdma link add rrxe1 type rrxe netdev veth1 \
      || { fail "setup.B.rrxe1"; return 1; }
    DEV0=rxe0; DEV1=rrxe1; X1=(ip netns exec peer); NS1=(ip netns exec peer)
  fi
  IP0=10.99.0.1; IP1=10.99.0.2; X0=(); NS0=()
  topo_wait
}

# --- netem on both veth ends (each in its namespace)
netem_on() {  # netem_on SPEC...
  "${NS0[@]}" tc qdisc replace dev veth0 root netem "$@" &&
    "${NS1[@]}" tc qdisc replace dev veth1 root netem "$@"
}
netem_off() {
  "${NS0[@]}" tc qdisc del dev veth0 root 2>/dev/null
  "${NS1[@]}" tc qdisc del dev veth1 root 2>/dev/null
  return 0
}
# netem_stats: "sent P pkts, dropped D" summed over both ends (netem counts its losses as drops)
netem_stats() {
  { "${NS0[@]}" tc -s qdisc show dev veth0; "${NS1[@]}" tc -s qdisc show dev veth1; } 2>/dev/null |
    awk '/Sent/ {for (i = 1; i <= NF; i++) { if ($i == "pkt") p += $(i-1); if ($i == "(dropped") { d += $(i+1) } } }
         END { printf "netem sent %d pkts, dropped %d\n", p, d }'
}

# --- rrxe hw counters: `counters DEV` (tests/vm/lib.sh)
# ctr FILE NAME...: the first of the NAMEs present in a `counters` dump (empty: none is)
ctr() {
  local f=$1; shift; local n k v
  for n in "$@"; do
    while read -r k v; do [ "$k" = "$n" ] && { echo "$v"; return 0; }; done < "$f"
  done
  return 1
}
# Names looked up (the first present wins).
RETRANS_NAMES="retransmits retransmitted_pkts retrans_pkts"
ICRC_NAMES="rx_icrc_errors icrc_errors rcvd_icrc_err icrc_err bad_icrc"
snap() {  # snap TAG: counters of both devices into /tmp/ctr.TAG.DEV, UDP errors into /tmp/udp.TAG
  local d
  for d in "$DEV0" "$DEV1"; do counters "$d" > "/tmp/ctr.$1.$d"; done
  udp_snap "$1"
}
# delta NAMES TAG0 TAG1: sum over the topology's rrxe devices of NAME(after) - NAME(before);
# prints nothing and fails when no rrxe device has any of the NAMES
delta() {
  local names=$1 a=$2 b=$3 d sum=0 found=0 x y
  for d in "$DEV0" "$DEV1"; do
    is_rrxe "$d" || continue
    # shellcheck disable=SC2086
    x=$(ctr "/tmp/ctr.$a.$d" $names) || continue
    # shellcheck disable=SC2086
    y=$(ctr "/tmp/ctr.$b.$d" $names) || continue
    found=1; sum=$((sum + y - x))
  done
  [ $found = 1 ] && echo "$sum"
}
# show_deltas TAG0 TAG1: every counter that moved, per device (and the UDP receive errors of
# both namespaces: a datagram the socket dropped is a loss the transport must recover too)
# (The counter and UDP dumps are read by bash itself, in the counters' own order: snap and
# show_deltas run around every step, and each sort, join, awk or cat costs about 0.3 s under
# TCG with KASAN.)
show_deltas() {
  local d k v line a1 a2 a3 b1 b2 b3
  local -A was
  for d in "$DEV0" "$DEV1"; do
    [ -s "/tmp/ctr.$2.$d" ] || { echo "    $d: no hw counters (rdma statistic show link $d/1 is empty)"; continue; }
    was=(); line=
    while read -r k v; do was[$k]=$v; done < "/tmp/ctr.$1.$d"
    while read -r k v; do
      [ -n "${was[$k]+set}" ] && [ "${was[$k]}" != "$v" ] && line+="$k +$((v - was[$k])) "
    done < "/tmp/ctr.$2.$d"
    echo "    $d: $line"
  done
  [ -e "/tmp/udp.$1" ] && [ -e "/tmp/udp.$2" ] || return 0
  while read -r a1 a2 a3 <&3 && read -r b1 b2 b3 <&4; do
    if [ "$a1" = backlog ]; then echo "    input backlog drops (softnet_stat): +$((b2 - a2))"
    else echo "    udp $a1: InErrors +$((b2 - a2)) RcvbufErrors +$((b3 - a3))"; fi
  done 3< "/tmp/udp.$1" 4< "/tmp/udp.$2"
}
# udp_cols NS: "NS InErrors RcvbufErrors" from /proc/net/snmp's text on stdin
udp_cols() {
  local l h=() i ie= rb=
  while read -ra l; do
    [ "${l[0]}" = Udp: ] || continue
    if [ ${#h[@]} = 0 ]; then h=("${l[@]}"); continue; fi
    for i in "${!h[@]}"; do
      case ${h[i]} in InErrors) ie=${l[i]} ;; RcvbufErrors) rb=${l[i]} ;; esac
    done
    echo "$1 $ie $rb"
  done
}
# udp_snap TAG: UDP InErrors and RcvbufErrors of init_net and of "peer" (/proc/net/snmp)
udp_snap() {
  {
    udp_cols init < /proc/net/snmp
    [ -e /var/run/netns/peer ] && ip netns exec peer cat /proc/net/snmp 2>/dev/null | udp_cols peer
  } > "/tmp/udp.$1"
  # per-CPU input queue (netdev_max_backlog) drops, all namespaces: column 2, hex
  local a b r d=0
  while read -r a b r; do d=$((d + 16#$b)); done < /proc/net/softnet_stat
  echo "backlog $d 0" >> "/tmp/udp.$1"
}

# The netem settings of the suite and the soak: NAME|SPEC
SETTINGS=(
  "loss1|loss 1%"
  "loss10|loss 10%"
  "reorder|delay 1ms reorder 25% 50%"
  "dup5|duplicate 5%"
  "corrupt2|corrupt 2%"
)
