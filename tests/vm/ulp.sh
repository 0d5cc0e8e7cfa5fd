#!/bin/bash
# The kernel's other storage ULPs over rrxe, in one --bare guest: SRP (ib_srp + ib_srpt over
# rdma_cm, LIO, two paths under dm-multipath), NFSv3 over RDMA (xprtrdma + svcrdma) and iSER
# (ib_iser + ib_isert, LIO's iSCSI target, open-iscsi). Each: target up, initiator connects over
# rrxe, RRXE_ULP_MIB (4) MiB of random data written with O_DIRECT, read back and compared
# (sha256), torn down, its modules unloaded; rrxe unloads last (so nothing holds a device).
# The building blocks are tests/vm/ulp-lib.sh's (tests/vm/ulp-interop.sh uses them too).
#
# Every ULP opens its rdma_cm IDs in init_net, so both devices live there, as in
# tests/vm/nvmeof.sh: rrxe0 on veth0 (10.99.0.1) and rrxe1 on veth1 (10.99.0.2), with
# accept_local. The targets listen on rrxe0's address.
#   SRP   path A from rrxe0 to itself (loopback), path B from rrxe1 across the veth pair; LIO
#         exports one memory-backed null_blk through srpt's target ports on both devices; the
#         SCSI disks of both paths (one WWID) become one dm-multipath map (`dmsetup create`,
#         round-robin over both); data through path A alone, through the map over both paths
#         (both carry writes), then through the map while path B's remote port is deleted
#         mid-write (dm-multipath fails over to A; every byte read back identical).
#   NFS   rpcbind, rpc.mountd and nfsd (listener `rdma 20049` only) export a tmpfs, the client
#         mounts it with proto=rdma,port=20049 (NFSv3; loopback on rrxe0); O_DIRECT and
#         buffered files, compared on the client after a remount and on the server's side.
#   iSER  LIO's iSCSI target with an iSER portal on 10.99.0.1:3260, iscsid and iscsiadm log in
#         through the built-in "iser" iface (loopback on rrxe0).
# Last, the harness drop-in scripts/rrxe-as-rxe adds an rrxe device the way blktests adds an
# rdma_rxe one. RRXE_ULP_ONLY="srp nfs iser" picks a subset. No rdma_rxe here: rdma_rxe 6.12
# and an rrxe device cannot share init_net's UDP port 4791 (tests/vm/lib.sh rxe_first); the
# interop runs in two guests (tests/vm/ulp-interop2).
#
#   scripts/vm-run --bare --timeout 1800 -- $PWD/tests/vm/ulp.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ulp-lib.sh"
MIB=${RRXE_ULP_MIB:-4}
T=${RRXE_ULP_TIMEOUT:-300}
ONLY=${RRXE_ULP_ONLY:-srp nfs iser}
A=10.99.0.1 B=10.99.0.2
log() { echo "ulp: $*"; }
want() { [[ " $ONLY " == *" $1 "* ]]; }
t_start=$(date +%s)
lap() { log "$1 done at +$(( $(date +%s) - t_start )) s"; }

# --- devices: rrxe0 on veth0, rrxe1 on veth1, both in init_net
for k in all default veth0 veth1; do
  sysctl -qw "net.ipv4.conf.$k.accept_local=1"; sysctl -qw "net.ipv4.conf.$k.rp_filter=0"
done
check ulp.rrxe_loaded modprobe rrxe
check ulp.rrxe0_added rdma link add rrxe0 type rrxe netdev veth0
check ulp.rrxe1_added rdma link add rrxe1 type rrxe netdev veth1
check ulp.rrxe_active wait_for 20 bash -c "ibv_devinfo -d rrxe0 | grep -q PORT_ACTIVE && ibv_devinfo -d rrxe1 | grep -q PORT_ACTIVE"
check ulp.modules bash -c "modprobe rdma_cm && modprobe null_blk nr_devices=2 gb=1 memory_backed=1 && modprobe sd_mod"
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
lap setup

# --- SRP: ib_srpt (LIO) and ib_srp over rdma_cm, two paths, dm-multipath
srp() {
  local hA hB dA dB x sz md mp=ulp-srp pid rc wa wb data want got mib2=$((MIB * 2))
  srpt_up srp.target /dev/nullb0 rrxe0 rrxe1 -- "$A" "$B"
  check srp.initiator_loaded bash -c "modprobe ib_srp && modprobe dm_multipath"
  check srp.hosts bash -c "ls -d /sys/class/infiniband_srp/srp-rrxe0-1 /sys/class/infiniband_srp/srp-rrxe1-1"
  # Path A: rrxe0 to itself. Path B: rrxe1 (10.99.0.2) to rrxe0 (10.99.0.1) across the veth pair.
  srp_login srp.pathA rrxe0 "$A" "$A"; hA=$SRP_HOST
  srp_login srp.pathB rrxe1 "$B" "$A"; hB=$SRP_HOST
  check srp.two_disks wait_disk "$SRP_SERIAL" 2
  dA=$(scsi_disks_of_host "$hA" | head -1); dB=$(scsi_disks_of_host "$hB" | head -1)
  log "path A: host$hA ($(cat /sys/class/scsi_host/host$hA/local_ib_device 2>/dev/null), sgid $(cat /sys/class/scsi_host/host$hA/sgid 2>/dev/null)) $dA; path B: host$hB ($(cat /sys/class/scsi_host/host$hB/local_ib_device 2>/dev/null), sgid $(cat /sys/class/scsi_host/host$hB/sgid 2>/dev/null)) $dB"
  if [ -z "$dA" ] || [ -z "$dB" ]; then
    fail srp.disks "path A host${hA:-?} disk '${dA}', path B host${hB:-?} disk '${dB}': $(dmesg | grep -iE 'srp|scsi' | tail -5)"
  else
    [ "$(cat /sys/class/scsi_host/host$hA/local_ib_device)" = rrxe0 ] && [ "$(cat /sys/class/scsi_host/host$hB/local_ib_device)" = rrxe1 ] &&
      pass srp.paths_on_rrxe0_and_rrxe1 || fail srp.paths_on_rrxe0_and_rrxe1 "host$hA, host$hB"
    x=$(cat /sys/block/$dA/device/wwid); [ -n "$x" ] && [ "$x" = "$(cat /sys/block/$dB/device/wwid)" ] &&
      pass srp.one_wwid || fail srp.one_wwid "$dA $x, $dB $(cat /sys/block/$dB/device/wwid)"
    slow_scsi "$dA"; slow_scsi "$dB"
    rw srp.pathA "/dev/$dA" "$MIB"
    # dm-multipath over both: one priority group, round-robin, a path switch every request.
    sz=$(blockdev --getsz "/dev/$dA")
    check srp.multipath.create dmsetup --noudevsync --verifyudev create "$mp" --table "0 $sz multipath 0 0 1 1 round-robin 0 2 1 /dev/$dA 1 /dev/$dB 1"
    # No udev in the guest: the map's node is devtmpfs's /dev/dm-N.
    md=/dev/dm-$(dmsetup info -c --noheadings -o minor "$mp" 2>/dev/null | tr -d ' ')
    log "multipath $mp ($md): $(dmsetup table $mp); $(dmsetup status $mp)"
    wa=$(writes_of "$dA"); wb=$(writes_of "$dB")
    rw srp.multipath "$md" "$MIB" 256K
    wa=$(( $(writes_of "$dA") - wa )); wb=$(( $(writes_of "$dB") - wb ))
    log "multipath writes: path A +$wa, path B +$wb"
    [ "$wa" -gt 0 ] && [ "$wb" -gt 0 ] && pass srp.multipath.both_paths_carried_writes || fail srp.multipath.both_paths_carried_writes "A +$wa B +$wb"
    # Failover: write 2*MIB MiB through the map, delete path B's remote port once B has carried
    # some of them; every write completes (dm-multipath resubmits on A) and the data read back
    # through what is left are identical.
    data=$(mktemp /tmp/ulp.XXXX); dd if=/dev/urandom of="$data" bs=1M count=$mib2 status=none; want=$(sha256sum < "$data")
    wb=$(writes_of "$dB")
    timeout "$T" dd if="$data" of="$md" bs=64K oflag=direct status=none & pid=$!
    wait_for 60 bash -c "[ \$(awk '{print \$5}' /sys/block/$dB/stat) -ge $((wb + 4)) ]"
    x=$(tr -s ' ' < /sys/block/$dB/inflight 2>/dev/null)
    check srp.failover.pathB_deleted bash -c "echo 1 > /sys/class/srp_remote_ports/port-$hB:1/delete"
    wait "$pid"; rc=$?
    [ "$rc" = 0 ] && pass srp.failover.write_completed || fail srp.failover.write_completed "dd exit $rc"
    check srp.failover.pathB_gone wait_for 60 bash -c "! [ -e /sys/class/scsi_host/host$hB ]"
    got=$(timeout "$T" dd if="$md" bs=256K count=$((mib2 * 4)) iflag=direct status=none | sha256sum)
    [ "$got" = "$want" ] && pass "srp.failover.read_back_${mib2}MiB_identical" || fail "srp.failover.read_back_${mib2}MiB_identical" "wrote $want read $got"
    log "after failover (path B in flight at its deletion: $x): $(dmesg | grep -E 'multipath.*[Ff]ailing path' | tail -2 | tr '\n' ' '); $(dmsetup status $mp)"
    dmsetup status "$mp" | grep -qE " [0-9]+:[0-9]+ F " && pass srp.failover.path_marked_failed || fail srp.failover.path_marked_failed "$(dmsetup status $mp)"
    got=$(timeout "$T" dd if="/dev/$dA" bs=1M count=$mib2 iflag=direct status=none | sha256sum)
    [ "$got" = "$want" ] && pass srp.failover.pathA_reads_same || fail srp.failover.pathA_reads_same "wrote $want read $got"
    rm -f "$data"
    check srp.multipath.removed dmsetup --noudevsync --verifyudev remove "$mp"
  fi
  srp_logout_all srp
  check srp.dm_multipath_unloaded modprobe -r dm_round_robin dm_multipath
  srpt_down srp.target
  lap srp
}

# --- NFSv3 over RDMA: svcrdma (nfsd, listener rdma 20049) and xprtrdma (proto=rdma)
nfs() {
  nfsd_up nfs.server
  nfs_io nfs "$A" /tmp/ulp-nfs-mnt local
  check nfs.client_unloaded wait_for 30 bash -c "modprobe -r nfsv3 && modprobe -r nfs"
  nfsd_down nfs.server
  check nfs.rpcrdma_unloaded wait_for 30 modprobe -r rpcrdma
  lap nfs
}

# --- iSER: LIO's iSCSI target with an iSER portal (ib_isert), open-iscsi's iser iface (ib_iser)
iser() {
  iser_target_up iser.target "$A" /dev/nullb1
  iser_io iser "$A"
  iser_target_down iser.target
  lap iser
}

want srp && srp
want nfs && nfs
want iser && iser

# LIO last: every backstore and fabric module still holding target_core_mod, then the core.
lio_unload() {
  grep -q '^target_core_mod ' /proc/modules || return 0
  local m
  for m in $(awk '$1 == "target_core_mod" { gsub(",", " ", $4); print $4 }' /proc/modules); do
    [ "$m" = - ] || modprobe -r "$m" || return 1
  done
  modprobe -r target_core_mod || { grep '^target_core_mod ' /proc/modules; return 1; }
}
check ulp.lio_unloaded lio_unload
check ulp.null_blk_unloaded modprobe -r null_blk
check ulp.rrxe_devices_deleted bash -c "rdma link delete rrxe1 && rdma link delete rrxe0"
# The harness drop-in (scripts/rrxe-as-rxe): `modprobe rdma_rxe` and `rdma link add NAME type
# rxe netdev DEV`, as blktests' start_soft_rdma runs them, give an rrxe device; rdma_rxe stays out.
check ulp.rrxe_as_rxe "$RRXE_ROOT/scripts/rrxe-as-rxe" bash -c "modprobe rdma_rxe && rdma link add veth0_rxe type rxe netdev veth0 &&
  ! grep -q '^rdma_rxe ' /proc/modules && rdma link show veth0_rxe/1 | grep -q 'netdev veth0' &&
  timeout 20 bash -c 'until ibv_devinfo -d veth0_rxe | grep -q PORT_ACTIVE; do sleep 0.2; done' && rdma link delete veth0_rxe"
check ulp.rrxe_unloads modprobe -r rrxe
lap all
summary
