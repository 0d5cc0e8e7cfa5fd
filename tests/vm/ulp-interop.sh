#!/bin/bash
# One side of the storage ULP interop between rdma_rxe and rrxe (tests/vm/ulp-interop2 starts
# both): two guests joined by one Ethernet link (eth0, `vm-run --net`), because SRP, NFS over
# RDMA and iSER open their rdma_cm IDs in init_net only, where rdma_rxe 6.12 and an rrxe device
# cannot share UDP port 4791. Each guest brings up all three targets on its device's address
# (tests/vm/ulp-lib.sh: ib_srpt, nfsd's rdma listener, LIO's iSCSI target with an iSER portal),
# then, one guest at a time, the initiators of one connect to the targets of the other: first
# rdma_rxe's ib_srp, xprtrdma and ib_iser to rrxe's targets, then rrxe's to rdma_rxe's. Each
# moves RRXE_ULP_MIB (4) MiB of random data with O_DIRECT and compares what it reads back. The
# guests take turns, telling each other over TCP 9999 on the link (and ib_srpt's service GUID,
# which an SRP login names). Then each tears down and unloads its driver.
#
#   ulp-interop.sh ROLE ADDR PEER_ADDR      ROLE: rxe or rrxe
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ulp-lib.sh"
role=$1 me=$2 peer=$3
MIB=${RRXE_ULP_MIB:-4}
T=${RRXE_ULP_TIMEOUT:-600}
case "$role" in rxe) other=rrxe ;; *) other=rxe ;; esac
pre=ulp_interop.$role
log() { echo "ulp-interop[$role]: $*"; }

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
check "$pre.modules" bash -c "modprobe rdma_cm && modprobe null_blk nr_devices=2 gb=1 memory_backed=1 && modprobe sd_mod"

# The targets, on this guest's address.
srpt_up "$pre.srpt" /dev/nullb0 "$dev" -- "$me" "$peer"
nfsd_up "$pre.nfsd"
iser_target_up "$pre.isert" "$me" /dev/nullb1

# signal MSG: tells the peer (TCP 9999 on the link, retried until it listens, 900 s at most).
signal() {
  python3 -c '
import socket, sys, time
end = time.time() + 900
while time.time() < end:
    try:
        s = socket.create_connection((sys.argv[1], 9999), timeout=5); s.sendall(sys.argv[2].encode()); s.close(); sys.exit(0)
    except OSError:
        time.sleep(1)
sys.exit("the peer never listened")' "$peer" "$1"
}
# await WORD: waits for the peer's message (900 s at most), which must start with WORD; prints
# the rest.
await() {
  python3 -c '
import socket, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("", 9999)); srv.listen(1); srv.settimeout(900)
c, _ = srv.accept(); m = c.recv(256).decode(); c.close()
w, _, rest = m.partition(" ")
print(rest)
sys.exit(0 if w == sys.argv[1] else "got " + repr(m))' "$1"
}

# initiators PEER_GUID: this guest's ib_srp, xprtrdma and ib_iser against the peer's targets.
initiators() {
  local ipre="ulp_interop.${role}_initiator_to_${other}_target" d
  check "$ipre.srp.module" modprobe ib_srp
  srp_login "$ipre.srp" "$dev" "$me" "$peer" "$1"
  check "$ipre.srp.disk" wait_disk "$SRP_SERIAL"
  d=$(scsi_disks_of_host "$SRP_HOST" | head -1)
  if [ -n "$d" ]; then slow_scsi "$d"; rw "$ipre.srp" "/dev/$d" "$MIB"; fi
  srp_logout_all "$ipre.srp"
  check "$ipre.nfs.module" modprobe rpcrdma
  nfs_io "$ipre.nfs" "$peer" /tmp/ulp-nfs-mnt
  check "$ipre.nfs.client_unloaded" wait_for 30 bash -c "modprobe -r nfsv3 && modprobe -r nfs"
  iser_io "$ipre.iser" "$peer"
}

guid=$(cat /sys/module/ib_srpt/parameters/srpt_service_guid)
if [ "$role" = rxe ]; then
  if pguid=$(await ready); then pass "$pre.await_ready"; initiators "$pguid"; else fail "$pre.await_ready" "$pguid"; fi
  check "$pre.signal_phase1" signal "phase1 $guid"
  x=$(await phase2) && pass "$pre.await_phase2" || fail "$pre.await_phase2" "$x"
else
  check "$pre.signal_ready" signal "ready $guid"
  if pguid=$(await phase1); then pass "$pre.await_phase1"; initiators "$pguid"; else fail "$pre.await_phase1" "$pguid"; fi
  check "$pre.signal_phase2" signal "phase2 -"
fi
log "$dev counters: $(rdma statistic show link $dev/1 2>/dev/null | grep -oE '(sent_pkts|rcvd_pkts|retransmits|timeouts|seq_naks_sent|seq_naks_rcvd|rnr_naks_rcvd|duplicate_requests|out_of_seq_requests|rcvd_seq_err|send_rnr_err|rcvd_rnr_err|retry_exceeded_err|completer_retry_err|send_err|duplicate_request|out_of_sequence) [0-9]+' | tr '\n' ' ')"

iser_target_down "$pre.isert"
nfsd_down "$pre.nfsd"
check "$pre.rpcrdma_unloaded" wait_for 30 modprobe -r rpcrdma
srpt_down "$pre.srpt"
check "$pre.unload" bash -c "modprobe -r target_core_iblock && modprobe -r target_core_mod && modprobe -r null_blk && rdma link delete $dev && sleep 1 && modprobe -r $mod"
summary
