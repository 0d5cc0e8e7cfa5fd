#!/bin/bash
# Data-path groundwork: the CQ ring is mapped through rdma_user_mmap_entry and poll_cq reads it
# with no syscall (strace between two marker writes around 1,000 polls).
. "$(dirname "$0")/lib.sh"
py="$(dirname "$0")/cqpoll.py"
out=$(python3 "$py" 2>&1)
echo "$out" | grep -v MARK
check "cq_ring_poll_returns_no_completion" grep -q "^first poll: 0" <<<"$out"
check "max_cqe_ring_resized_and_remapped" grep -q "^resized poll: 0" <<<"$out"
strace -f -o /tmp/cqpoll.strace python3 "$py" >/dev/null 2>&1
n=$(awk '/MARK-BEGIN/{on=1;next} /MARK-END/{on=0} on' /tmp/cqpoll.strace | grep -vc '^$')
echo "syscalls during 1000 poll_cq calls: $n"
check "poll_cq_makes_no_syscall" test "$n" = 0
summary
