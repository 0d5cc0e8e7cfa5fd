#!/usr/bin/env bash
# Installs everything rrxe needs on a fresh Debian 12 machine, at the versions pinned in
# scripts/versions.env. Idempotent: when all is there it only checks (well under a second).
# Runs without standard input (CI).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/versions.env"
export DEBIAN_FRONTEND=noninteractive

apt_pkgs=(
  # kernel build (clang: the kernel is built with LLVM=1 so Rust and C share one toolchain)
  "linux-source-6.12=${LINUX_SOURCE_DEB}" clang llvm lld libclang-dev bc flex bison
  libelf-dev libssl-dev cpio xz-utils kmod dwarves rsync
  # guest
  qemu-system-x86 busybox-static
  # RDMA userspace, pinned to the rdma-core whose private ABI the provider declares
  "rdma-core=${RDMA_CORE_DEB}" "ibverbs-utils=${RDMA_CORE_DEB}" "ibverbs-providers=${RDMA_CORE_DEB}"
  "libibverbs-dev=${RDMA_CORE_DEB}" "librdmacm-dev=${RDMA_CORE_DEB}" "rdmacm-utils=${RDMA_CORE_DEB}"
  "python3-pyverbs=${RDMA_CORE_DEB}" perftest iproute2
  # NVMe over Fabrics host tool (tests/vm/nvmeof.sh: `nvme connect -t rdma`)
  "nvme-cli=${NVME_CLI_DEB}"
  # the other kernel storage ULPs over RDMA (tests/vm/ulp.sh): the iSER initiator's iscsid and
  # iscsiadm, the NFSv3 server's exportfs/rpc.mountd/rpc.nfsd and client's mount.nfs, rpcbind
  # (the guest starts the daemons it needs; none may run on the host, see below), dmsetup
  # (dm-multipath tables over SRP paths)
  "open-iscsi=${OPEN_ISCSI_DEB}" "nfs-kernel-server=${NFS_UTILS_DEB}" "nfs-common=${NFS_UTILS_DEB}"
  "rpcbind=${RPCBIND_DEB}" "dmsetup=${DMSETUP_DEB}"
  # debugging tools that must also work inside the guest (it shares the host root)
  strace tcpdump gdb procps pkg-config
  # make bench profiling (perf record in the guest; Debian 12's perf reads 6.12 fine)
  linux-perf
  # `make install` builds the module through DKMS; `make test` checks that path (scripts/install-test)
  dkms
)

# Install what is missing or at another version than pinned.
need=()
for p in "${apt_pkgs[@]}"; do
  name=${p%%=*}
  have=$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null || true)
  case "$have" in
    "install ok installed "*) [ "$p" = "$name" ] || [ "${have##* }" = "${p#*=}" ] || need+=("$p") ;;
    *) need+=("$p") ;;
  esac
done
# The daemons among them (rpcbind, iscsid, nfsd, mountd) are for the test guests only: nothing
# starts them at install (a policy-rc.d that refuses, unless one is there already), and where
# systemd runs, their units are stopped and disabled afterwards.
daemon_units=(rpcbind.socket rpcbind.service nfs-server.service nfs-mountd.service
  nfs-idmapd.service rpc-statd.service iscsid.socket iscsid.service open-iscsi.service)
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}" >&2
  prc=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    prc=/usr/sbin/policy-rc.d; printf '#!/bin/sh\nexit 101\n' > "$prc"; chmod 755 "$prc"
    trap 'rm -f "$prc"' EXIT
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
  [ -n "$prc" ] && rm -f "$prc"
  if [ -d /run/systemd/system ]; then
    for u in "${daemon_units[@]}"; do
      systemctl list-unit-files "$u" >/dev/null 2>&1 && systemctl disable --now "$u" >/dev/null 2>&1 || true
    done
  fi
fi

# Rust: the kernel needs the source of the exact rustc it is built with.
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v rustup >/dev/null; then
  echo "deps: rustup is required to install rustc $RUST_TOOLCHAIN with rust-src" >&2
  exit 1
fi
if ! rustup toolchain list | grep -q "^${RUST_TOOLCHAIN}-"; then
  rustup toolchain install --profile minimal "$RUST_TOOLCHAIN"
fi
for c in rust-src rustfmt; do
  if ! rustup component list --toolchain "$RUST_TOOLCHAIN" --installed 2>/dev/null | grep -q "^$c"; then
    rustup component add --toolchain "$RUST_TOOLCHAIN" "$c"
  fi
done

if ! bindgen --version 2>/dev/null | grep -q " ${BINDGEN_VERSION}\$"; then
  cargo "+${RUST_TOOLCHAIN}" install --locked bindgen-cli --version "$BINDGEN_VERSION"
fi

echo "deps: ok (rustc $(rustc "+${RUST_TOOLCHAIN}" --version | cut -d' ' -f2), $(bindgen --version), linux-source $LINUX_SOURCE_DEB, rdma-core $RDMA_CORE_DEB)" >&2
