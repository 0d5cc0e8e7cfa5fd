#!/bin/bash
# Issue 25 (quotas): the rdma cgroup controller limits what one group of processes may hold on
# rrxe0, so that one user cannot take every object the device has. ib_core charges each uverbs
# context (hca_handle) and each object (hca_object) to the creator's cgroup; rrxe registers its
# device with the controller by being an ib_device (CONFIG_CGROUP_RDMA in the test kernel). rrxe's
# own reserve for kernel consumers (limits::user_max) is checked by tests/vm/control.sh.
#
#   scripts/vm-run -- $PWD/tests/vm/cgroup.sh
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
dev=${RRXE_CGROUP_DEV:-rrxe0}
if [ ! -e "/sys/class/infiniband/$dev" ]; then
  modprobe rrxe && rdma link add "$dev" type rrxe netdev veth0
fi
cg=/sys/fs/cgroup
mountpoint -q "$cg" || mount -t cgroup2 none "$cg"
check "cgroup.rdma_controller" grep -qw rdma "$cg/cgroup.controllers"
echo +rdma > "$cg/cgroup.subtree_control"
g=$cg/rrxe-limited
mkdir -p "$g"
# The device is known to the controller: rdma.max lists it (unlimited until set).
check "cgroup.device_listed" grep -q "^$dev hca_handle=max hca_object=max" "$g/rdma.max"

# charge ARGS...: the charging program, run as a member of $g.
charge() { timeout 60 bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$g" "$py" "$here/cgroup-charge.py" --dev "$dev" "$@"; }

echo "$dev hca_handle=1 hca_object=5" > "$g/rdma.max"
out=$(charge --max 64); echo "cgroup: limit 5 objects: $out"
check "cgroup.objects_limited_eagain" test "$out" = "contexts 1 objects 5 errno 11 (EAGAIN)"
out=$(charge --contexts 2 --max 0); echo "cgroup: limit 1 context: $out"
check "cgroup.contexts_limited_eagain" test "$out" = "contexts 1 objects 0 errno 11 (EAGAIN)"

# While the objects are held, rdma.current counts them; when the holder is killed, nothing is left.
sleep 120 | charge --max 3 --hold > /tmp/cgroup.hold &
check "cgroup.holder_ready" wait_for 60 grep -q objects /tmp/cgroup.hold
echo "cgroup: holding: $(cat /tmp/cgroup.hold)"
cur=$(grep "^$dev " "$g/rdma.current" | xargs)
echo "cgroup: rdma.current while held: $cur"
check "cgroup.current_counts_held" test "$cur" = "$dev hca_handle=1 hca_object=3"
pkill -9 -f cgroup-charge.py; pkill sleep; wait 2>/dev/null
check "cgroup.current_released_on_exit" wait_for 30 bash -c "! grep -q '^$dev hca_handle=[1-9]' '$g/rdma.current' && ! grep -q '^$dev .*hca_object=[1-9]' '$g/rdma.current'"

# Another group is not limited by this one, and the device still serves it.
out=$(timeout 60 "$py" "$here/cgroup-charge.py" --dev "$dev" --max 40); echo "cgroup: outside the group: $out"
check "cgroup.others_unaffected" test "$out" = "contexts 1 objects 40 errno 0 (-)"

echo "$dev hca_handle=max hca_object=max" > "$g/rdma.max"
out=$(charge --max 40); echo "cgroup: limit lifted: $out"
check "cgroup.limit_lifted" test "$out" = "contexts 1 objects 40 errno 0 (-)"
rmdir "$g"
summary
