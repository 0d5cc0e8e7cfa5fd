#!/bin/bash
# Issue 3: rrxe's QP transition rules agree with ib_core's ib_modify_qp_is_ok() on every
# (current, next, type) triple and every single-bit variation of the required and optional
# masks. The comparison runs inside the test-only module rrxe_selftest at load time.
. "$(dirname "$0")/lib.sh"
check "selftest_module_loads" modprobe rrxe_selftest
dmesg | grep "rrxe_selftest" | tail -12
check "ib_modify_qp_is_ok_zero_mismatches" bash -c "dmesg | grep -qE 'cross-check: [0-9]+ cases, 0 mismatches'"
modprobe -r rrxe_selftest 2>/dev/null
summary
