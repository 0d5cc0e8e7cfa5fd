#!/bin/bash
# NVMe over Fabrics (RDMA) on rrxe, the blktests way: nvmet + nvmet-rdma export a memory-backed
# null_blk namespace on rrxe0's address, the kernel's nvme-rdma host connects to it through
# /dev/nvme-fabrics (what `nvme connect -t rdma` writes), RRXE_NVME_MIB (256) MiB of random data
# are written with O_DIRECT, read back and compared, the host disconnects, the target is torn
# down, and rrxe unloads. Uses fast registration (REG_MR), local and remote invalidation (SEND
# with invalidate), kernel QPs, CQs and the GSI QP (rdma_cm).
#
# nvme-rdma and nvmet-rdma open their rdma_cm IDs in init_net only, so host and target share
# rrxe0 in init_net (loopback); see the README for why no two-device or rdma_rxe variant runs.
#
#   scripts/vm-run --bare --timeout 900 -- $PWD/tests/vm/nvmeof.sh
. "$(dirname "$0")/lib.sh"
MIB=${RRXE_NVME_MIB:-256}
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

target_up() {
  mkdir "$N/subsystems/$NQN" &&
    echo 1 > "$N/subsystems/$NQN/attr_allow_any_host" &&
    mkdir "$N/subsystems/$NQN/namespaces/1" &&
    echo -n /dev/nullb0 > "$N/subsystems/$NQN/namespaces/1/device_path" &&
    echo 1 > "$N/subsystems/$NQN/namespaces/1/enable" &&
    mkdir "$N/ports/1" &&
    echo rdma > "$N/ports/1/addr_trtype" && echo ipv4 > "$N/ports/1/addr_adrfam" &&
    echo 10.99.0.1 > "$N/ports/1/addr_traddr" && echo 4420 > "$N/ports/1/addr_trsvcid" &&
    ln -s "$N/subsystems/$NQN" "$N/ports/1/subsystems/$NQN"
}
target_down() {
  rm -f "$N/ports/1/subsystems/$NQN" && rmdir "$N/ports/1" &&
    echo 0 > "$N/subsystems/$NQN/namespaces/1/enable" &&
    rmdir "$N/subsystems/$NQN/namespaces/1" && rmdir "$N/subsystems/$NQN"
}
ctrl() { for c in /sys/class/nvme/nvme*; do [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN" ] && { echo "${c##*/}"; return 0; }; done; return 1; }
blk() { local c; c=$(ctrl) || return 1; ls -d /sys/class/nvme/"$c"/nvme*n1 2>/dev/null | head -1 | xargs -r basename; }

check nvmeof.target_configured target_up
check nvmeof.connect timeout "$T" bash -c "echo 'nqn=$NQN,transport=rdma,traddr=10.99.0.1,trsvcid=4420' > /dev/nvme-fabrics"
if wait_for 30 blk; then
  dev=/dev/$(blk); pass nvmeof.namespace_visible; log "$dev on $(ctrl), $(cat /sys/class/nvme/"$(ctrl)"/transport 2>/dev/null)"
  data=$(mktemp /tmp/nvme.XXXX)
  dd if=/dev/urandom of="$data" bs=1M count="$MIB" status=none
  want=$(sha256sum < "$data")
  start=$(date +%s.%N)
  check nvmeof.write timeout "$T" dd if="$data" of="$dev" bs=1M oflag=direct status=none
  mid=$(date +%s.%N)
  got=$(timeout "$T" dd if="$dev" bs=1M count="$MIB" iflag=direct status=none | sha256sum)
  end=$(date +%s.%N)
  if [ "$got" = "$want" ]; then pass "nvmeof.read_back_${MIB}MiB_identical"; else fail "nvmeof.read_back_${MIB}MiB_identical" "wrote $want read $got"; fi
  log "$MIB MiB: $(awk -v m="$MIB" -v a="$start" -v b="$mid" -v c="$end" 'BEGIN { printf "write %.1f MiB/s, read %.1f MiB/s", m / (b - a), m / (c - b) }') (TCG, debug kernel)"
  rm -f "$data"
  c=$(ctrl)
  check nvmeof.disconnect bash -c "echo 1 > /sys/class/nvme/$c/delete_controller"
  check nvmeof.controller_gone wait_for 30 bash -c "! ls /sys/class/nvme/$c >/dev/null 2>&1"
else
  fail nvmeof.namespace_visible "no namespace for $NQN: $(dmesg | grep -i nvme | tail -3)"
fi
check nvmeof.target_torn_down target_down
check nvmeof.modules_unloaded bash -c "rmmod nvme_rdma && rmmod nvmet_rdma && rmmod nvmet"
check nvmeof.rrxe_unloads bash -c "rdma link delete rrxe0; rmmod rrxe"
summary
