#!/bin/bash
# One side of the NVMe over Fabrics interop between rdma_rxe and rrxe (tests/vm/interop2 starts
# both): two guests joined by one Ethernet link (eth0, `vm-run --net`), because nvme-rdma and
# nvmet-rdma open their rdma_cm IDs in init_net only and rdma_rxe 6.12 and an rrxe device cannot
# share init_net's UDP port 4791. Each guest exports a memory-backed null_blk namespace on its
# device's address and, as host, connects to the other's (retrying until it listens), writes
# RRXE_NVME_INTEROP_MIB (16) MiB of random data with O_DIRECT, reads them back and compares,
# and disconnects: first rdma_rxe's host to rrxe's target, then rrxe's host to rdma_rxe's target
# (the guests take turns, telling each other over TCP 9999 on the link). Then each tears its
# target down and unloads its driver.
#
#   nvmeof-interop.sh ROLE ADDR PEER_ADDR      ROLE: rxe or rrxe
. "$(dirname "$0")/lib.sh"
role=$1 me=$2 peer=$3
MIB=${RRXE_NVME_INTEROP_MIB:-16}
T=${RRXE_NVME_TIMEOUT:-300}
case "$role" in rxe) other=rrxe ;; *) other=rxe ;; esac
NQN=interop-$role
PNQN=interop-$other
pre=nvmeof_interop.$role
log() { echo "nvmeof-interop[$role]: $*"; }

ip link set eth0 up && ip addr add "$me/24" dev eth0 || { fail "$pre.eth0" "$(ip link 2>&1 | tail -3)"; summary; }
if [ "$role" = rxe ]; then
  modprobe crc32_generic 2>/dev/null
  modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0 || { fail "$pre.device" "$(dmesg | tail -3)"; summary; }
  dev=rxe0 mod=rdma_rxe
else
  modprobe rrxe && rdma link add rrxe0 type rrxe netdev eth0 || { fail "$pre.device" "$(dmesg | tail -3)"; summary; }
  dev=rrxe0 mod=rrxe
fi
check "$pre.port_active" wait_for 20 bash -c "ibv_devinfo -d $dev | grep -q PORT_ACTIVE"
check "$pre.modules" bash -c "modprobe rdma_ucm && modprobe null_blk nr_devices=1 gb=1 memory_backed=1 && modprobe nvmet && modprobe nvmet-rdma && modprobe nvme-rdma"
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
# Two TCG guests with KASAN on two cores: keep-alive round trips of seconds are normal here, and
# a 1 MiB I/O can take longer than the default 30 s.
echo 180 > /sys/module/nvme_core/parameters/io_timeout 2>/dev/null
echo 180 > /sys/module/nvme_core/parameters/admin_timeout 2>/dev/null
check "$pre.target_up" nvmet_up "$NQN" "$me"


host_io() {
  # The host side: the peer's target may still be coming up (its guest boots beside this one).
  local opts hpre connected d c
  opts=(-t rdma -a "$peer" -s 4420 -n "$PNQN" --keep-alive-tmo 60)
  hpre="nvmeof_interop.${role}_host_to_${other}_target"
  connected=0
  if wait_for 240 nvme connect "${opts[@]}"; then
    pass "$hpre.connect"; connected=1
  else
    fail "$hpre.connect" "no connection (nvme connect ${opts[*]}) in 240 s: $(dmesg | grep -iE 'nvme|rdma' | tail -3 | tr '\n' ' ')"
  fi
  if [ $connected = 1 ] && wait_for 30 nvme_blk "$PNQN"; then
    d=/dev/$(nvme_blk "$PNQN")
    log "$d on $(nvme_ctrl "$PNQN") (nvme connect ${opts[*]})"
    nvme_rw "$hpre" "$d" "$MIB" "$T" "two TCG guests on two cores, debug kernel"
    c=$(nvme_ctrl "$PNQN")
    check "$hpre.disconnect" nvme disconnect -n "$PNQN"
    check "$hpre.controller_gone" wait_for 30 bash -c "! ls /sys/class/nvme/$c >/dev/null 2>&1"
  elif [ $connected = 1 ]; then
    fail "$hpre.namespace_visible" "$(dmesg | grep -iE 'nvme|rdma' | tail -3 | tr '\n' ' ')"
  fi
}

# signal MSG: tells the peer (TCP 9999 on the link, retried until it listens, 600 s at most).
signal() {
  python3 -c '
import socket, sys, time
end = time.time() + 600
while time.time() < end:
    try:
        s = socket.create_connection((sys.argv[1], 9999), timeout=5); s.sendall(sys.argv[2].encode()); s.close(); sys.exit(0)
    except OSError:
        time.sleep(1)
sys.exit("the peer never listened")' "$peer" "$1"
}
# await MSG: waits for the peer's word (600 s at most).
await() {
  python3 -c '
import socket, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("", 9999)); srv.listen(1); srv.settimeout(600)
c, _ = srv.accept(); m = c.recv(64).decode(); c.close()
sys.exit(0 if m == sys.argv[1] else "got " + repr(m))' "$1"
}

# One direction at a time (two TCG guests on two cores are slow enough): first rdma_rxe's host
# to rrxe's target, then rrxe's host to rdma_rxe's target.
if [ "$role" = rxe ]; then
  host_io
  check "$pre.signal_phase1" signal phase1
  check "$pre.await_phase2" await phase2
else
  check "$pre.await_phase1" await phase1
  host_io
  check "$pre.signal_phase2" signal phase2
fi
log "$dev counters: $(rdma statistic show link $dev/1 2>/dev/null | grep -oE '(sent_pkts|rcvd_pkts|retransmits|timeouts|seq_naks_sent|seq_naks_rcvd|rnr_naks_rcvd|duplicate_requests|out_of_seq_requests|retry_exceeded_err|rx_no_buffer|tx_drops|rcvd_seq_err|send_rnr_err|rcvd_rnr_err|retry_exceeded_err|completer_retry_err|send_err|duplicate_request|out_of_sequence) [0-9]+' | tr '\n' ' ')"
check "$pre.target_down" nvmet_down "$NQN"
check "$pre.unload" bash -c "modprobe -r nvme-rdma nvmet-rdma nvmet && rdma link delete $dev && sleep 1 && modprobe -r $mod"
summary
