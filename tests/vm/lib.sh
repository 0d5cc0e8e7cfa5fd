# Sourced by guest-side test scripts. Each check prints "PASS name" or "FAIL name: why";
# the summary line "N passed, N failed" closes the script, whose exit status is the failure count.
# A check that took a second or more since the previous one carries its time, "(12 s)": where a
# suite's time goes (tests/vm/run-all lists the slowest).
PASSED=0; FAILED=0; LAST_CHECK_T=${EPOCHSECONDS:-0}; TOOK=
took() { local now=${EPOCHSECONDS:-0}; TOOK=
  [ $((now - LAST_CHECK_T)) -ge 1 ] && TOOK=" ($((now - LAST_CHECK_T)) s)"; LAST_CHECK_T=$now; }
pass() { PASSED=$((PASSED + 1)); took; echo "PASS $1$TOOK"; }
# program_took NAME: after a test program that printed its own PASS/FAIL lines (which carry no
# time): "TIME NAME: N s" since the check before it (tests/vm/run-all lists it among the
# slowest), and the next check's time starts here.
program_took() { local now=${EPOCHSECONDS:-0}; echo "TIME $1: $((now - LAST_CHECK_T)) s"; LAST_CHECK_T=$now; }
fail() { FAILED=$((FAILED + 1)); took; echo "FAIL $1$TOOK: ${2:-}"; }
# check NAME CMD...: passes when CMD succeeds.
check() { local n=$1; shift; local out; if out=$("$@" 2>&1); then pass "$n"; else fail "$n" "$(echo "$out" | tail -5)"; fi; }
# check_fails NAME PATTERN CMD...: passes when CMD fails and its output matches PATTERN.
check_fails() {
  local n=$1 pat=$2; shift 2; local out
  if out=$("$@" 2>&1); then fail "$n" "unexpectedly succeeded: $out"
  elif echo "$out" | grep -qiE "$pat"; then pass "$n"
  else fail "$n" "failed without /$pat/: $out"; fi
}
# nap SECONDS: sleeps without starting a process: read times out on a FIFO this shell holds open
# at both ends (under TCG with KASAN a `date` or `sleep` costs about 0.3 s each, more than the
# nap itself). The guest's /dev has no /dev/fd, so no process substitution; `sleep` if the FIFO
# could not be made.
NAP_FD=
nap_fifo=/tmp/.nap.$$.$RANDOM
mkfifo "$nap_fifo" 2>/dev/null && exec {NAP_FD}<>"$nap_fifo"; rm -f "$nap_fifo"; unset nap_fifo
nap() { if [ -n "$NAP_FD" ]; then local _; read -rt "$1" -u "$NAP_FD" _; else sleep "$1"; fi; return 0; }
# wait_for SECONDS CMD...: polls CMD every 0.2 s (hard timeout).
wait_for() { local t=$1; shift; local end=$(( EPOCHSECONDS + t )); until "$@" >/dev/null 2>&1; do
  [ "$EPOCHSECONDS" -ge "$end" ] && return 1; nap 0.2; done; }
# tcp_listening PORT [PID]: whether a TCP socket listens on PORT in the network namespace of
# process PID (default: this shell's), read from /proc/PID/net/tcp and tcp6 by bash itself (an
# `ss | grep` per poll costs about 1 s under TCG with KASAN).
tcp_listening() {
  local hex f sl loc rem st rest
  printf -v hex ':%04X' "$1"
  for f in /proc/"${2:-self}"/net/tcp /proc/"${2:-self}"/net/tcp6; do
    [ -r "$f" ] || continue
    while read -r sl loc rem st rest; do
      [[ $loc == *"$hex" && $st == 0A ]] && return 0
    done < "$f"
  done
  return 1
}
# match_lines PATTERN FILE [MAX [PREFIX]]: prints up to MAX (default: all) lines of FILE that
# match the extended regex PATTERN, each after PREFIX; fails when none does (grep -E's answer,
# from bash's own match: no process).
match_lines() {
  local pat=$1 f=$2 max=${3:-0} pre=${4:-} l k=0
  [ -r "$f" ] || return 1
  while IFS= read -r l || [ -n "$l" ]; do
    [[ $l =~ $pat ]] || continue
    printf '%s%s\n' "$pre" "$l"; k=$((k + 1))
    [ "$max" -gt 0 ] && [ "$k" -ge "$max" ] && break
  done < "$f"
  [ "$k" -gt 0 ]
}
summary() { echo "$PASSED passed, $FAILED failed"; exit "$FAILED"; }
port_state() { ibv_devinfo -d "$1" 2>/dev/null | awk '/state:/ && !/phys/ {print $2; exit}'; }
active_mtu() { ibv_devinfo -d "$1" 2>/dev/null | awk '/active_mtu:/ {print $2; exit}'; }
export -f port_state active_mtu
# gid_index DEV: the index of DEV's RoCE v2 GID that carries an IPv4 address (port 1); fails
# while there is none yet.
gid_index() {
  local dev=$1 t i g ty
  for t in /sys/class/infiniband/"$dev"/ports/1/gid_attrs/types/*; do
    i=${t##*/}
    # (read, not $(cat): no process per entry)
    ty=; read -r ty 2>/dev/null < "$t"
    [ "$ty" = "RoCE v2" ] || continue
    g=; read -r g 2>/dev/null < "/sys/class/infiniband/$dev/ports/1/gids/$i"
    case "$g" in 0000:0000:0000:0000:0000:ffff:*) echo "$i"; return 0 ;; esac
  done
  return 1
}
export -f gid_index
# rdma_rxe binds UDP 4791 in init_net when it loads, and an rrxe device binds it when its GSI QP
# (QP1, for rdma_cm) is created: whichever comes first owns the port there. For rdma_rxe beside
# rrxe devices in init_net, load rdma_rxe first: re-add the rrxe devices around it (they then
# work on loopback only in init_net, which is all these suites use).
rxe_first() {
  grep -q '^rdma_rxe ' /proc/modules && return 0
  modprobe crc32_generic 2>/dev/null
  local links; links=$(rdma link show 2>/dev/null | awk '/netdev/ {split($2, a, "/"); for (i = 1; i <= NF; i++) if ($i == "netdev") print a[1], $(i + 1)}' | grep '^rrxe')
  local l
  while read -r l; do [ -n "$l" ] && rdma link delete "${l%% *}"; done <<< "$links"
  modprobe rdma_rxe || return 1
  while read -r l; do [ -n "$l" ] && rdma link add "${l%% *}" type rrxe netdev "${l##* }"; done <<< "$links"
  return 0
}

# NVMe over Fabrics helpers (tests/vm/nvmeof.sh, tests/vm/nvmeof-interop.sh).
# nvmet_up NQN ADDR: exports /dev/nullb0 as namespace 1 of subsystem NQN on RDMA port 1, ADDR:4420.
nvmet_up() {
  local s=/sys/kernel/config/nvmet/subsystems/$1 p=/sys/kernel/config/nvmet/ports/1
  mkdir "$s" && echo 1 > "$s/attr_allow_any_host" &&
    mkdir "$s/namespaces/1" && echo -n /dev/nullb0 > "$s/namespaces/1/device_path" &&
    echo 1 > "$s/namespaces/1/enable" && mkdir "$p" &&
    echo rdma > "$p/addr_trtype" && echo ipv4 > "$p/addr_adrfam" &&
    echo "$2" > "$p/addr_traddr" && echo 4420 > "$p/addr_trsvcid" &&
    ln -s "$s" "$p/subsystems/$1"
}
# nvmet_down NQN: undoes nvmet_up.
nvmet_down() {
  local s=/sys/kernel/config/nvmet/subsystems/$1 p=/sys/kernel/config/nvmet/ports/1
  rm -f "$p/subsystems/$1" && rmdir "$p" && echo 0 > "$s/namespaces/1/enable" &&
    rmdir "$s/namespaces/1" && rmdir "$s"
}
# nvme_rw PREFIX DEV MIB TIMEOUT NOTE: writes MIB MiB of random data to DEV with O_DIRECT, reads
# them back and compares (checks PREFIX.write and PREFIX.read_back_<MIB>MiB_identical), prints the
# rates with NOTE.
nvme_rw() {
  local pre=$1 dev=$2 mib=$3 t=$4 note=$5 data want got t0 t1 t2
  data=$(mktemp /tmp/nvme.XXXX)
  dd if=/dev/urandom of="$data" bs=1M count="$mib" status=none
  want=$(sha256sum < "$data")
  t0=$(date +%s.%N)
  check "$pre.write" timeout "$t" dd if="$data" of="$dev" bs=1M oflag=direct status=none
  t1=$(date +%s.%N)
  got=$(timeout "$t" dd if="$dev" bs=1M count="$mib" iflag=direct status=none | sha256sum)
  t2=$(date +%s.%N)
  if [ "$got" = "$want" ]; then pass "$pre.read_back_${mib}MiB_identical"
  else fail "$pre.read_back_${mib}MiB_identical" "wrote $want read $got"; fi
  echo "nvme: $pre: $mib MiB: $(awk -v m="$mib" -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "write %.1f MiB/s, read %.1f MiB/s", m / (b - a), m / (c - b) }') ($note)"
  rm -f "$data"
}
# nvme_ctrl NQN: the host's controller connected to subsystem NQN (nvme0, ...); nvme_blk NQN: its
# namespace block device (nvme0n1).
nvme_ctrl() { local c; for c in /sys/class/nvme/nvme*; do [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] && { echo "${c##*/}"; return 0; }; done; return 1; }
nvme_blk() { local c; c=$(nvme_ctrl "$1") || return 1; ls -d /sys/class/nvme/"$c"/nvme*n1 2>/dev/null | head -1 | xargs -r basename; }

# rrxe hw counters (rdma statistic show link DEV/1): "name value" lines
# (parsed by bash itself: the suites call it around every step, and a tr and an awk cost about
# 0.3 s each under TCG with KASAN)
counters() {  # counters DEV
  local out t on=0 name=
  out=$(rdma statistic show link "$1/1" 2>/dev/null)
  for t in ${out//$'\n'/ }; do
    if [ $on = 0 ]; then [ "$t" = "$1/1" ] && on=1; continue; fi
    if [ -z "$name" ]; then name=$t; continue; fi
    [[ $t =~ ^[0-9]+$ ]] && echo "$name $t"
    name=
  done
}
