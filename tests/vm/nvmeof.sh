#!/bin/bash
# NVMe over Fabrics (RDMA) on rrxe, the blktests way: nvmet + nvmet-rdma export a memory-backed
# null_blk namespace on rrxe0's address, the kernel's nvme-rdma host connects to it with
# nvme-cli (`nvme connect -t rdma`), RRXE_NVME_MIB (64) MiB of random data are written with
# O_DIRECT, read back and compared, the host disconnects (`nvme disconnect`), the target is torn
# down, and rrxe unloads. Uses fast registration (REG_MR), local and remote invalidation (SEND
# with invalidate), kernel QPs, CQs and the GSI QP (rdma_cm).
#
# nvme-rdma and nvmet-rdma open their rdma_cm IDs in init_net only. So the first run has host
# and target share rrxe0 (loopback); the second puts a second device, rrxe1, on veth1 in
# init_net too (accept_local, as two rdma_rxe devices are run in one namespace), the host
# connects from rrxe1's address (host_traddr) to the target on rrxe0's, so every packet crosses
# the veth pair, and netem drops 1% on both veth ends: RRXE_NVME_LOSSY_MIB (8) MiB go through
# and come back identical, and rrxe's retransmit counters move. No rdma_rxe variant: rdma_rxe
# 6.12 and an rrxe device cannot share init_net's UDP port (docs/features.md).
#
#   scripts/vm-run --bare --timeout 900 -- $PWD/tests/vm/nvmeof.sh
. "$(dirname "$0")/lib.sh"
MIB=${RRXE_NVME_MIB:-64}
T=${RRXE_NVME_TIMEOUT:-300}
N=/sys/kernel/config/nvmet
NQN=rrxe-test
log() { echo "nvmeof: $*"; }

# From whatever an earlier script in this guest left (tests/vm/cm.sh: rdma_rxe on veth0, rrxe1
# in a namespace): only rrxe0 on veth0.
for l in $(rdma link show 2>/dev/null | awk '{print $2}' | cut -d/ -f1 | sort -u); do
  [ "$l" = rrxe0 ] || rdma link delete "$l" 2>/dev/null || ip netns exec peer rdma link delete "$l" 2>/dev/null
done
grep -q '^rdma_rxe ' /proc/modules && rmmod rdma_rxe
ip link set veth0 up
modprobe rrxe && { [ -e /sys/class/infiniband/rrxe0 ] || rdma link add rrxe0 type rrxe netdev veth0; }
check nvmeof.rrxe0_active wait_for 20 bash -c "ibv_devinfo -d rrxe0 | grep -q PORT_ACTIVE"
check nvmeof.modules bash -c "modprobe rdma_ucm && modprobe null_blk nr_devices=1 gb=1 memory_backed=1 && modprobe nvmet && modprobe nvmet-rdma && modprobe nvme-rdma"
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config


# run_io PREFIX MIB [host_traddr]: connect, write MIB MiB of random data (O_DIRECT), read back,
# compare, disconnect.
run_io() {
  local pre=$1 mib=$2 src=${3:-} opts c dev
  opts=(-t rdma -a 10.99.0.1 -s 4420 -n "$NQN" ${src:+-w "$src"})
  check "$pre.connect" timeout "$T" nvme connect "${opts[@]}"
  if ! wait_for 30 nvme_blk "$NQN"; then
    fail "$pre.namespace_visible" "no namespace for $NQN: $(dmesg | grep -i nvme | tail -3)"
    return
  fi
  dev=/dev/$(nvme_blk "$NQN"); pass "$pre.namespace_visible"; log "$dev on $(nvme_ctrl "$NQN"), $(cat /sys/class/nvme/"$(nvme_ctrl "$NQN")"/transport 2>/dev/null) (nvme connect ${opts[*]}): $(nvme list 2>/dev/null | grep "$dev" | tr -s ' ')"
  nvme_rw "$pre" "$dev" "$mib" "$T" "TCG, debug kernel"
  c=$(nvme_ctrl "$NQN")
  check "$pre.disconnect" nvme disconnect -n "$NQN"
  check "$pre.controller_gone" wait_for 30 bash -c "! ls /sys/class/nvme/$c >/dev/null 2>&1"
}
retrans() { rdma statistic show link "$1/1" 2>/dev/null | tr -s ' \n' '\n\n' | awk '$0 == "retransmits" { getline; n = $0 } END { print n + 0 }'; }

check nvmeof.target_configured nvmet_up "$NQN" 10.99.0.1
run_io nvmeof "$MIB"

# Two devices in init_net, across the veth pair, under 1% loss.
if ip -n peer link show veth1 >/dev/null 2>&1; then
  ip -n peer link set veth1 netns 1
  ip addr add 10.99.0.2/24 dev veth1
fi
ip link set veth1 up
for k in all default veth0 veth1; do sysctl -qw "net.ipv4.conf.$k.accept_local=1"; done
for k in all default veth0 veth1; do sysctl -qw "net.ipv4.conf.$k.rp_filter=0"; done
check nvmeof.two_dev.rrxe1_added bash -c "[ -e /sys/class/infiniband/rrxe1 ] || rdma link add rrxe1 type rrxe netdev veth1"
check nvmeof.two_dev.rrxe1_active wait_for 20 bash -c "ibv_devinfo -d rrxe1 | grep -q PORT_ACTIVE"
check nvmeof.two_dev.netem bash -c "tc qdisc replace dev veth0 root netem loss 1% && tc qdisc replace dev veth1 root netem loss 1%"
r0=$(( $(retrans rrxe0) + $(retrans rrxe1) ))
run_io nvmeof.two_dev.loss1 "${RRXE_NVME_LOSSY_MIB:-8}" 10.99.0.2
r1=$(( $(retrans rrxe0) + $(retrans rrxe1) ))
log "two devices, netem loss 1%: $(tc -s qdisc show dev veth0 | grep -o 'dropped [0-9]*') on veth0, $(tc -s qdisc show dev veth1 | grep -o 'dropped [0-9]*') on veth1; rrxe retransmits +$((r1 - r0))"
if [ $((r1 - r0)) -gt 0 ]; then pass nvmeof.two_dev.loss1.retransmits; else fail nvmeof.two_dev.loss1.retransmits "retransmits +$((r1 - r0))"; fi
tc qdisc del dev veth0 root 2>/dev/null; tc qdisc del dev veth1 root 2>/dev/null
check nvmeof.two_dev.rrxe1_deleted rdma link delete rrxe1
check nvmeof.target_torn_down nvmet_down "$NQN"
check nvmeof.modules_unloaded bash -c "rmmod nvme_rdma && rmmod nvmet_rdma && rmmod nvmet"
check nvmeof.rrxe_unloads bash -c "rdma link delete rrxe0; rmmod rrxe"
summary
