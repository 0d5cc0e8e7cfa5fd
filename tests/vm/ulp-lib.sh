# Sourced by tests/vm/ulp.sh and tests/vm/ulp-interop.sh (after tests/vm/lib.sh): targets and
# initiators of the kernel's storage ULPs over RDMA, built from kernel interfaces where there are
# some (LIO through configfs, ib_srp's add_target, /proc/fs/nfsd, dmsetup) and the daemons NFSv3
# and open-iscsi cannot do without (rpcbind, rpc.mountd, iscsid), started here, in the guest.
# Callers set T (seconds a step may take) and MIB (MiB per transfer), and define log().
CFS=/sys/kernel/config/target
SRP_PORT=5555
SRP_SERIAL=srp0a1b2c3
ISER_SERIAL=iser0d4e5f6
TIQN=iqn.2026-11.org.rrxe:ulp
INI=iqn.2026-11.org.rrxe:initiator
NFS_EXPORT=/tmp/ulp-nfs-export
DAEMON_LOG=/tmp/ulp-daemons.log

# rw PREFIX DEV MIB [BS]: writes MIB MiB of random data to DEV (a block device or a file) with
# O_DIRECT, reads them back with O_DIRECT and compares (PREFIX.write,
# PREFIX.read_back_<MIB>MiB_identical); prints the rates.
rw() {
  local pre=$1 dev=$2 mib=$3 bs=${4:-1M} data want got t0 t1 t2 cnt
  data=$(mktemp /tmp/ulp.XXXX)
  dd if=/dev/urandom of="$data" bs=1M count="$mib" status=none
  want=$(sha256sum < "$data")
  cnt=$(( mib * 1048576 / $(numfmt --from=iec "$bs") ))
  t0=$(date +%s.%N)
  check "$pre.write" timeout "$T" dd if="$data" of="$dev" bs="$bs" oflag=direct conv=notrunc status=none
  t1=$(date +%s.%N)
  got=$(timeout "$T" dd if="$dev" bs="$bs" count="$cnt" iflag=direct status=none | sha256sum)
  t2=$(date +%s.%N)
  if [ "$got" = "$want" ]; then pass "$pre.read_back_${mib}MiB_identical"
  else fail "$pre.read_back_${mib}MiB_identical" "wrote $want read $got"; fi
  log "$pre: $mib MiB: $(awk -v m="$mib" -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "write %.1f MiB/s, read %.1f MiB/s", m / (b - a), m / (c - b) }') (TCG, debug kernel)"
  rm -f "$data"
}
# scsi_disks_of_host N: the sd disks of SCSI host N.
scsi_disks_of_host() { local d; for d in /sys/class/scsi_host/host"$1"/device/target*/*/block/*; do [ -e "$d" ] && echo "${d##*/}"; done; }
# sd_with_serial SERIAL: the sd disks whose unit serial number (VPD page 0x80) is SERIAL.
sd_with_serial() { local d; for d in /sys/block/sd*; do grep -aqs "$1" "$d"/device/vpd_pg8[03] && echo "${d##*/}"; done; }
scsi_hosts() { local h; for h in /sys/class/scsi_host/host*; do [ -e "$h" ] && echo "${h##*host}"; done; }
# writes_of DISK: completed writes (/sys/block/DISK/stat, field 5).
writes_of() { awk '{print $5}' "/sys/block/$1/stat"; }
# lio_backstore DIR SERIAL PATH: an iblock backstore core/DIR on block device PATH.
lio_backstore() {
  local d=$CFS/core/$1
  mkdir -p "$d" && echo "udev_path=$3" > "$d/control" && echo "$2" > "$d/wwn/vpd_unit_serial" &&
    echo 1 > "$d/enable"
}
# lio_lun TPG BACKSTORE ACL...: LUN 0 of TPG is BACKSTORE (core/...); each ACL sees it as LUN 0.
lio_lun() {
  local tpg=$1 bs=$2 a; shift 2
  mkdir "$tpg/lun/lun_0" && ln -s "$CFS/core/$bs" "$tpg/lun/lun_0/${bs##*/}" || return 1
  for a in "$@"; do
    mkdir "$tpg/acls/$a" && mkdir "$tpg/acls/$a/lun_0" && ln -s "$tpg/lun/lun_0" "$tpg/acls/$a/lun_0/lun_0" || return 1
  done
}
# lio_tpg_down TPG: disables TPG and removes its ACLs, LUNs and portals, then TPG itself.
lio_tpg_down() {
  local tpg=$1 x
  [ -e "$tpg/enable" ] && echo 0 > "$tpg/enable"
  for x in "$tpg"/acls/*/lun_*/*; do [ -L "$x" ] && rm "$x"; done
  for x in "$tpg"/acls/*/lun_*; do [ -d "$x" ] && rmdir "$x"; done
  for x in "$tpg"/acls/*; do [ -d "$x" ] && rmdir "$x"; done
  for x in "$tpg"/lun/lun_*/*; do [ -L "$x" ] && rm "$x"; done
  for x in "$tpg"/lun/lun_*; do [ -d "$x" ] && rmdir "$x"; done
  for x in "$tpg"/np/*; do [ -d "$x" ] && rmdir "$x"; done
  rmdir "$tpg"
}
lio_backstore_down() { echo 0 > "$CFS/core/$1/enable" 2>/dev/null; rmdir "$CFS/core/$1" && rmdir "$CFS/core/${1%%/*}"; }
# wait_disk SERIAL [N]: waits until N (1) sd disks with SERIAL exist.
wait_disk() { wait_for 60 bash -c "[ \$(for d in /sys/block/sd*; do grep -aqs '$1' \$d/device/vpd_pg8[03] && echo; done | wc -l) -ge ${2:-1} ]"; }
# slow_scsi DISK: a TCG guest with KASAN is slow: 120 s per command before the SCSI error handler.
slow_scsi() { echo 120 > "/sys/block/$1/device/timeout" 2>/dev/null; }


# srpt_up PRE BDEV DEV... -- ACL...: ib_srpt (LIO, rdma_cm port SRP_PORT) exports block device
# BDEV as LUN 0 (unit serial SRP_SERIAL) through one target port per RDMA device DEV (port 1),
# named by its GID's interface ID as ib_srpt wants it; ACLs by initiator IP (what ib_srpt names
# an rdma_cm session by: the address the login reached). Sets SRPT_TPORTS and SRPT_GUID.
srpt_up() {
  local pre=$1 bdev=$2 d x t devs=() acls=(); shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do devs+=("$1"); shift; done
  [ $# -gt 0 ] && shift; acls=("$@")
  check "$pre.modules" bash -c "modprobe target_core_mod && modprobe target_core_iblock && modprobe ib_srpt"
  mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
  mkdir -p "$CFS/srpt" 2>/dev/null
  check "$pre.rdma_cm_port" bash -c "echo $SRP_PORT > $CFS/srpt/discovery_auth/rdma_cm_port"
  check "$pre.backstore" lio_backstore iblock_0/srp0 "$SRP_SERIAL" "$bdev"
  SRPT_TPORTS=()
  for d in "${devs[@]}"; do
    x=$(cat /sys/class/infiniband/$d/ports/1/gids/0)
    case "$x" in fe80:0000:0000:0000:*) t=${x#fe80:0000:0000:0000:} ;; *) t=0x${x//:/} ;; esac
    SRPT_TPORTS+=("$t")
    check "$pre.tport_$d" bash -c "mkdir $CFS/srpt/$t && mkdir $CFS/srpt/$t/$t"
    check "$pre.lun_$d" lio_lun "$CFS/srpt/$t/$t" iblock_0/srp0 "${acls[@]}"
    check "$pre.enable_$d" bash -c "echo 1 > $CFS/srpt/$t/$t/enable"
  done
  SRPT_GUID=$(cat /sys/module/ib_srpt/parameters/srpt_service_guid)
  log "srpt: service GUID $SRPT_GUID, target ports ${SRPT_TPORTS[*]}, rdma_cm port $SRP_PORT, ACLs ${acls[*]}"
}
# srpt_down PRE: undoes srpt_up, unloads ib_srpt.
srpt_down() {
  local pre=$1 t ok=1
  for t in "${SRPT_TPORTS[@]}"; do lio_tpg_down "$CFS/srpt/$t/$t" && rmdir "$CFS/srpt/$t" || ok=0; done
  [ $ok = 1 ] && pass "$pre.target_ports_removed" || fail "$pre.target_ports_removed" "$(ls $CFS/srpt 2>&1)"
  check "$pre.backstore_removed" lio_backstore_down iblock_0/srp0
  check "$pre.unloaded" bash -c "rmdir $CFS/srpt && modprobe -r ib_srpt"
}
# srp_login PRE IBDEV SRC DEST [GUID]: ib_srp's host srp-IBDEV-1 logs in to the ib_srpt at
# DEST:SRP_PORT from address SRC (rdma_cm). Sets SRP_HOST (the new SCSI host's number).
srp_login() {
  local pre=$1 dev=$2 src=$3 dest=$4 guid=${5:-$SRPT_GUID} before
  before=$(scsi_hosts)
  check "$pre.login" timeout "$T" bash -c "echo id_ext=$guid,ioc_guid=$guid,dest=$dest:$SRP_PORT,src=$src > /sys/class/infiniband_srp/srp-$dev-1/add_target"
  # (no process substitution: the guest has no /dev/fd)
  SRP_HOST=$(scsi_hosts | grep -vxF -e "${before:-none}" | head -1)
}
# srp_logout_all PRE: deletes every SRP remote port, unloads ib_srp.
srp_logout_all() {
  local pre=$1 x
  for x in /sys/class/srp_remote_ports/port-*; do [ -e "$x/delete" ] && echo 1 > "$x/delete"; done
  check "$pre.logged_out" wait_for 60 bash -c "! ls /sys/class/srp_remote_ports/port-* >/dev/null 2>&1"
  check "$pre.initiator_unloaded" bash -c "modprobe -r ib_srp && modprobe -r scsi_transport_srp"
}

# nfsd_up PRE: rpcbind, rpc.mountd and nfsd (NFSv3, one listener: rdma 20049) export a tmpfs at
# NFS_EXPORT to everyone.
nfsd_up() {
  local pre=$1
  check "$pre.modules" bash -c "modprobe nfsd && modprobe rpcrdma"
  mkdir -p "$NFS_EXPORT" /run/rpcbind /run/lock
  # /var/lib/nfs is on the read-only root: exportfs and rpc.mountd keep their tables here.
  mount -t tmpfs -o size=1m tmpfs /var/lib/nfs && touch /var/lib/nfs/etab /var/lib/nfs/rmtab
  mount -t tmpfs -o size=64m tmpfs "$NFS_EXPORT"
  check "$pre.nfsd_fs" mount -t nfsd nfsd /proc/fs/nfsd
  check "$pre.rpcbind" bash -c "rpcbind -w >>$DAEMON_LOG 2>&1"
  check "$pre.exportfs" exportfs -o rw,no_root_squash,insecure,no_subtree_check,fsid=1 "*:$NFS_EXPORT"
  check "$pre.mountd" bash -c "rpc.mountd >>$DAEMON_LOG 2>&1"
  check "$pre.rdma_listener" bash -c "echo rdma 20049 > /proc/fs/nfsd/portlist"
  check "$pre.threads" bash -c "echo 2 > /proc/fs/nfsd/threads"
  log "nfsd: portlist $(tr '\n' ' ' < /proc/fs/nfsd/portlist), versions $(cat /proc/fs/nfsd/versions)"
}
# nfsd_down PRE: undoes nfsd_up, unloads nfsd.
nfsd_down() {
  local pre=$1
  check "$pre.unexport" exportfs -ua
  check "$pre.threads_stopped" bash -c "echo 0 > /proc/fs/nfsd/threads"
  pkill -x rpc.mountd; pkill -x rpcbind
  wait_for 10 bash -c "! pgrep -x rpc.mountd && ! pgrep -x rpcbind"
  umount /proc/fs/nfsd; umount "$NFS_EXPORT"; umount /var/lib/nfs
  check "$pre.unloaded" wait_for 30 modprobe -r nfsd
}
# nfs_mount PRE SERVER MNT: mounts SERVER:NFS_EXPORT at MNT over RDMA (NFSv3, port 20049).
nfs_mount() {
  mkdir -p "$3"
  check "$1" timeout "$T" mount -t nfs -o vers=3,proto=rdma,port=20049,nolock,mountproto=tcp "$2:$NFS_EXPORT" "$3"
}
# nfs_io PRE SERVER MNT [LOCAL]: mounts, writes MIB MiB with O_DIRECT and reads them back, then a
# file written through the page cache, remounts and reads it again (and, when LOCAL, compares it
# with the server's copy in NFS_EXPORT), unmounts.
nfs_io() {
  local pre=$1 srv=$2 mnt=$3 local=${4:-} data want got
  nfs_mount "$pre.mount" "$srv" "$mnt"
  mountpoint -q "$mnt" || return
  log "$pre: $(grep " $mnt " /proc/mounts)"
  grep " $mnt " /proc/mounts | grep -q 'proto=rdma' && pass "$pre.proto_rdma" || fail "$pre.proto_rdma" "$(grep " $mnt " /proc/mounts)"
  rw "$pre" "$mnt/data" "$MIB"
  data=$(mktemp /tmp/ulp.XXXX); dd if=/dev/urandom of="$data" bs=1M count="$MIB" status=none; want=$(sha256sum < "$data")
  check "$pre.buffered_write" bash -c "cp $data $mnt/data2 && sync"
  if [ -n "$local" ]; then
    got=$(sha256sum < "$NFS_EXPORT/data2")
    [ "$got" = "$want" ] && pass "$pre.server_file_identical" || fail "$pre.server_file_identical" "wrote $want, server has $got"
  fi
  log "$pre: xprtrdma: $(grep -A2 'xprt:' /proc/self/mountstats | tr -s ' \t\n' ' ')"
  check "$pre.umount" umount "$mnt"
  nfs_mount "$pre.remount" "$srv" "$mnt"
  got=$(sha256sum < "$mnt/data2")
  [ "$got" = "$want" ] && pass "$pre.read_after_remount_identical" || fail "$pre.read_after_remount_identical" "wrote $want read $got"
  rm -f "$data"
  check "$pre.umount_final" umount "$mnt"
}

# iser_target_up PRE ADDR BDEV: LIO's iSCSI target TIQN exports BDEV as LUN 0 (unit serial
# ISER_SERIAL) to initiator INI through an iSER portal at ADDR:3260.
iser_target_up() {
  local pre=$1 addr=$2 bdev=$3 tpg=$CFS/iscsi/$TIQN/tpgt_1
  check "$pre.modules" bash -c "modprobe target_core_mod && modprobe target_core_iblock && modprobe iscsi_target_mod && modprobe ib_isert"
  mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
  check "$pre.backstore" lio_backstore iblock_1/iser0 "$ISER_SERIAL" "$bdev"
  check "$pre.tpg" mkdir -p "$tpg"
  check "$pre.lun" lio_lun "$tpg" iblock_1/iser0 "$INI"
  check "$pre.portal" bash -c "mkdir $tpg/np/$addr:3260 && echo 1 > $tpg/np/$addr:3260/iser"
  check "$pre.enable" bash -c "echo 0 > $tpg/attrib/authentication && echo 1 > $tpg/enable"
  log "iSCSI target $TIQN: portal $addr:3260, iser $(cat $tpg/np/$addr:3260/iser 2>&1)"
}
# iser_target_down PRE: undoes iser_target_up, unloads ib_isert and iscsi_target_mod.
iser_target_down() {
  local pre=$1
  iser_tpg_down() { lio_tpg_down "$CFS/iscsi/$TIQN/tpgt_1" && rmdir "$CFS/iscsi/$TIQN"; }
  check "$pre.tpg_removed" iser_tpg_down
  check "$pre.backstore_removed" lio_backstore_down iblock_1/iser0
  check "$pre.unloaded" bash -c "rmdir $CFS/iscsi && modprobe -r ib_isert && modprobe -r iscsi_target_mod"
}
# iser_io PRE ADDR: open-iscsi (iscsid, iscsiadm; its node database under /etc/iscsi on the
# guest's overlay) logs in to TIQN at ADDR:3260 through the built-in "iser" iface (ib_iser),
# moves MIB MiB through the disk, logs out, stops iscsid, unloads ib_iser.
iser_io() {
  local pre=$1 addr=$2 dev
  check "$pre.module" modprobe ib_iser
  mkdir -p /run/lock/iscsi
  echo "InitiatorName=$INI" > /etc/iscsi/initiatorname.iscsi
  check "$pre.iscsid" bash -c "iscsid >>$DAEMON_LOG 2>&1"
  check "$pre.node_record" iscsiadm -m node -o new -T "$TIQN" -p "$addr:3260" -I iser
  check "$pre.login" timeout "$T" iscsiadm -m node -T "$TIQN" -p "$addr:3260" -I iser --login
  log "$pre: sessions: $(iscsiadm -m session 2>&1 | tr '\n' ' ')"
  iscsiadm -m session 2>/dev/null | grep -q '^iser:' && pass "$pre.transport_iser" || fail "$pre.transport_iser" "$(iscsiadm -m session 2>&1)"
  check "$pre.disk" wait_disk "$ISER_SERIAL"
  dev=$(sd_with_serial "$ISER_SERIAL" | head -1)
  if [ -n "$dev" ]; then
    slow_scsi "$dev"
    rw "$pre" "/dev/$dev" "$MIB"
  fi
  check "$pre.logout" timeout "$T" iscsiadm -m node -T "$TIQN" -p "$addr:3260" -I iser --logout
  check "$pre.disk_gone" wait_for 30 bash -c "[ -z \"\$(for d in /sys/block/sd*; do grep -aqs $ISER_SERIAL \$d/device/vpd_pg8[03] && echo \$d; done)\" ]"
  check "$pre.node_deleted" iscsiadm -m node -o delete -T "$TIQN"
  pkill -x iscsid; wait_for 10 bash -c "! pgrep -x iscsid"
  check "$pre.initiator_unloaded" wait_for 30 modprobe -r ib_iser
}
