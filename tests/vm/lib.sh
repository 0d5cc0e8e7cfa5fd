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
