#!/bin/bash
# Network namespaces and the per-namespace RoCEv2 sockets, in a --bare guest:
#   1. two namespaces joined by a veth pair, an rrxe device in each; RC pingpong across them
#      (so each namespace opens its UDP socket); devices deleted, then the namespaces;
#   2. the same, but the namespaces are deleted with the devices still there (the netdevs go,
#      and the devices with them);
#   3. a netdev moved out of its namespace and the namespace deleted at once, while the device
#      (bound to the moved netdev) is still being torn down: the namespace's exit closes the
#      socket even though the device still holds it;
#   4. the module unloads afterwards.
# scripts/vm-run fails the run on any WARNING, KASAN, lockdep or kmemleak report, which is what
# a socket outliving its namespace (or a leak) produces.
#
#   scripts/vm-run --bare --timeout 600 -- $PWD/tests/vm/netns.sh
. "$(dirname "$0")/lib.sh"
T=${RRXE_NETNS_STEP_TIMEOUT:-60}
modprobe crc32_generic 2>/dev/null
modprobe rrxe || { fail setup.modprobe; summary; }


# setup N: namespaces nsaN/nsbN, veth vaN (10.98.N.1, in nsaN) <-> vbN (10.98.N.2, in nsbN),
# devices rxaN and rxbN on them.
setup() {
  local n=$1
  ip netns add "nsa$n" && ip netns add "nsb$n" &&
  ip link add "va$n" type veth peer name "vb$n" &&
  ip link set "va$n" netns "nsa$n" && ip link set "vb$n" netns "nsb$n" &&
  ip -n "nsa$n" addr add "10.98.$n.1/24" dev "va$n" && ip -n "nsb$n" addr add "10.98.$n.2/24" dev "vb$n" &&
  ip -n "nsa$n" link set "va$n" up && ip -n "nsb$n" link set "vb$n" up &&
  ip -n "nsa$n" link set lo up && ip -n "nsb$n" link set lo up &&
  ip netns exec "nsa$n" rdma link add "rxa$n" type rrxe netdev "va$n" &&
  ip netns exec "nsb$n" rdma link add "rxb$n" type rrxe netdev "vb$n" &&
  wait_for 20 gid_index "rxa$n" && wait_for 20 gid_index "rxb$n"
}

# pingpong N: RC pingpong from nsbN (rxbN) to nsaN (rxaN), over the wire.
pingpong() {
  local n=$1 ga gb port=$((18700 + $1))
  ga=$(gid_index "rxa$n") && gb=$(gid_index "rxb$n") || return 1
  timeout -k 5 "$T" ip netns exec "nsa$n" ibv_rc_pingpong -d "rxa$n" -g "$ga" -n 20 -p "$port" \
    > "/tmp/pp$n.server" 2>&1 &
  local sp=$!
  wait_for 30 ip netns exec "nsa$n" bash -c "ss -ltn | grep -q ':$port '" || { kill $sp; return 1; }
  timeout -k 5 "$T" ip netns exec "nsb$n" ibv_rc_pingpong -d "rxb$n" -g "$gb" -n 20 -p "$port" 10.98.$n.1 \
    > "/tmp/pp$n.client" 2>&1
  local crc=$?
  wait $sp; local src=$?
  tail -2 "/tmp/pp$n.client" | sed 's/^/    /'
  [ $crc = 0 ] && [ $src = 0 ] && grep -q "iters in" "/tmp/pp$n.client"
}
gone() { ! test -e "/sys/class/infiniband/$1"; }
no_netns() { ! ip netns list | grep -qw "$1"; }

# --- 1. devices deleted, then the namespaces
check "devices_then_netns.setup" setup 1
check "devices_then_netns.pingpong_across_namespaces" pingpong 1
check "devices_then_netns.delete_devices" bash -c "rdma link delete rxa1 && rdma link delete rxb1"
check "devices_then_netns.delete_netns" bash -c "ip netns del nsa1 && ip netns del nsb1"
check "devices_then_netns.devices_gone" wait_for 20 bash -c "$(declare -f gone); gone rxa1 && gone rxb1"

# --- 2. namespaces deleted under live devices
check "netns_under_devices.setup" setup 2
check "netns_under_devices.pingpong_across_namespaces" pingpong 2
check "netns_under_devices.delete_netns" bash -c "ip netns del nsa2 && ip netns del nsb2"
check "netns_under_devices.devices_follow" wait_for 30 bash -c "$(declare -f gone); gone rxa2 && gone rxb2"

# --- 3. the netdev leaves its namespace, which is deleted at once
check "moved_netdev.setup" setup 3
check "moved_netdev.pingpong_across_namespaces" pingpong 3
check "moved_netdev.move_out_and_delete_netns" bash -c \
  "ip -n nsa3 link set va3 netns 1 && ip netns del nsa3 && ip -n nsb3 link set vb3 netns 1 && ip netns del nsb3"
check "moved_netdev.devices_gone" wait_for 30 bash -c "$(declare -f gone); gone rxa3 && gone rxb3"
ip link del va3 2>/dev/null

# --- 4. nothing left behind
check "namespaces_gone" wait_for 30 bash -c "$(declare -f no_netns); no_netns nsa1 && no_netns nsb2 && no_netns nsa3"
check "module_unloads" timeout 60 modprobe -r rrxe
summary
