#!/usr/bin/env bash
# Host smoke test of the provider against a *fake* uverbs device (no kernel module needed).
#
# Builds a fake sysfs tree (SYSFS_PATH) with two uverbs devices, "zz0" (has rrxe_uabi) and
# "other0" (does not), whose character devices are /dev/null look-alikes, inside a private
# mount namespace (unshare -m; nothing outside it changes). Then it checks that:
#   1. libibverbs lists zz0 through librrxe (match_device), and other0 is not claimed;
#   2. opening zz0 with rrxe_uabi=<other> prints the one-line uABI mismatch message;
#   3. opening zz0 with the right rrxe_uabi gets as far as GET_CONTEXT, which /dev/null
#      "answers" without the rrxe magic: the bad-magic message, and a clean failure.
# Needs root (mknod, mount namespace). Usage: provider/tools/fake-sysfs-smoke.sh [librrxe.so]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
so=${1:-$root/target/release/librrxe.so}
[ -f "$so" ] || { echo "no $so; run cargo build --release -p rrxe-provider" >&2; exit 2; }
uabi=$(sed -n 's/^pub const UABI_VERSION: u32 = \([0-9]*\);/\1/p' "$root/uapi/src/rrxe_abi.rs")
abi=$(sed -n 's/^pub const UVERBS_ABI_VERSION: u32 = \([0-9]*\);/\1/p' "$root/uapi/src/rrxe_abi.rs")

work=$(mktemp -d /tmp/rrxe-fake.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp "$so" "$work/librrxe-rdmav34.so"
sys=$work/sys
mkdir -p "$sys/class/infiniband_verbs" "$work/dev/infiniband"
echo 6 > "$sys/class/infiniband_verbs/abi_version"
n=0
for dev in zz0 other0; do
    u=$sys/class/infiniband_verbs/uverbs$n
    mkdir -p "$u" "$sys/class/infiniband/$dev"
    echo "$dev" > "$u/ibdev"; echo 1:3 > "$u/dev"; echo "$abi" > "$u/abi_version"
    echo "1: CA" > "$sys/class/infiniband/$dev/node_type"
    mknod "$work/dev/infiniband/uverbs$n" c 1 3
    n=$((n + 1))
done
mknod "$work/dev/null" c 1 3

export WORK=$work UABI=$uabi
unshare -m --propagation private bash -euo pipefail -c '
    mount --bind "$WORK/dev" /dev
    export SYSFS_PATH=$WORK/sys RDMAV_DRIVERS=$WORK/librrxe RRXE_DEBUG=1
    ok() { echo "ok   $*"; }
    bad() { echo "FAIL $*"; exit 1; }

    echo "$UABI" > "$SYSFS_PATH/class/infiniband/zz0/rrxe_uabi"
    out=$(ibv_devices 2>&1) || true
    echo "$out" | sed "s/^/     | /"
    echo "$out" | grep -q "zz0" && ok "zz0 listed" || bad "zz0 not listed"
    echo "$out" | grep -q "match_device(other0.*not ours" && ok "other0 not claimed" || bad "other0"
    echo "$out" | grep -qE "^ +other0" && bad "other0 listed" || true

    echo $((UABI + 1)) > "$SYSFS_PATH/class/infiniband/zz0/rrxe_uabi"
    out=$(ibv_devinfo -d zz0 2>&1) && bad "open succeeded" || true
    echo "$out" | sed "s/^/     | /"
    echo "$out" | grep -q "librrxe: device zz0 speaks rrxe uABI $((UABI + 1)) but this provider was built for uABI $UABI; rebuild the provider and the module from the same tree" \
        && ok "mismatch message" || bad "no mismatch message"

    echo "$UABI" > "$SYSFS_PATH/class/infiniband/zz0/rrxe_uabi"
    out=$(ibv_devinfo -d zz0 2>&1) && bad "open succeeded" || true
    echo "$out" | sed "s/^/     | /"
    echo "$out" | grep -q "librrxe: device zz0 answered GET_CONTEXT without the rrxe magic" \
        && ok "bad-magic message" || bad "no bad-magic message"
'
echo "fake-sysfs smoke: all ok"
