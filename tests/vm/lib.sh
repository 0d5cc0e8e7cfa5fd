# Sourced by guest-side test scripts. Each check prints "PASS name" or "FAIL name: why";
# the summary line "N passed, N failed" closes the script, whose exit status is the failure count.
PASSED=0; FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "PASS $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL $1: ${2:-}"; }
# check NAME CMD...: passes when CMD succeeds.
check() { local n=$1; shift; local out; if out=$("$@" 2>&1); then pass "$n"; else fail "$n" "$(echo "$out" | tail -5)"; fi; }
# check_fails NAME PATTERN CMD...: passes when CMD fails and its output matches PATTERN.
check_fails() {
  local n=$1 pat=$2; shift 2; local out
  if out=$("$@" 2>&1); then fail "$n" "unexpectedly succeeded: $out"
  elif echo "$out" | grep -qiE "$pat"; then pass "$n"
  else fail "$n" "failed without /$pat/: $out"; fi
}
# wait_for SECONDS CMD...: polls CMD every 0.2 s (hard timeout).
wait_for() { local t=$1; shift; local end=$(( $(date +%s) + t )); until "$@" >/dev/null 2>&1; do
  [ "$(date +%s)" -ge "$end" ] && return 1; sleep 0.2; done; }
summary() { echo "$PASSED passed, $FAILED failed"; exit "$FAILED"; }
port_state() { ibv_devinfo -d "$1" 2>/dev/null | awk '/state:/ && !/phys/ {print $2; exit}'; }
active_mtu() { ibv_devinfo -d "$1" 2>/dev/null | awk '/active_mtu:/ {print $2; exit}'; }
export -f port_state active_mtu
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
