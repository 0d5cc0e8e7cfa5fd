#!/usr/bin/env bash
# Installs everything rrxe needs on a fresh Debian 12 machine, at pinned versions.
# Idempotent: a second run only checks.  Runs without standard input (CI).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/versions.env"

export DEBIAN_FRONTEND=noninteractive
stamp=/var/cache/rrxe/deps-${RRXE_DEPS_REV}.stamp

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
  # debugging tools that must also work inside the guest (it shares the host root)
  strace tcpdump gdb procps pkg-config
)

if [ ! -f "$stamp" ]; then
  if ! dpkg-query -W -f='${Status}\n' "${apt_pkgs[@]%%=*}" 2>/dev/null | grep -qv 'install ok installed' \
     && [ "$(dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null)" = "$LINUX_SOURCE_DEB" ]; then
    :
  else
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}"
  fi
fi

# Rust: the kernel needs the source of the exact rustc it is built with.
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v rustup >/dev/null; then
  echo "rustup is required (it ships with the machine image); install it from Debian's 'rustup' package" >&2
  apt-get install -y -qq rustup
fi
if ! rustup toolchain list | grep -q "^${RUST_TOOLCHAIN}-"; then
  rustup toolchain install --profile minimal "$RUST_TOOLCHAIN"
fi
rustup component add --toolchain "$RUST_TOOLCHAIN" rust-src clippy rustfmt >/dev/null 2>&1 \
  || rustup component add --toolchain "$RUST_TOOLCHAIN" rust-src

if ! bindgen --version 2>/dev/null | grep -q " ${BINDGEN_VERSION}\$"; then
  cargo "+${RUST_TOOLCHAIN}" install --locked bindgen-cli --version "$BINDGEN_VERSION"
fi

mkdir -p "$(dirname "$stamp")"
touch "$stamp"
echo "deps: ok (rustc $(rustc "+${RUST_TOOLCHAIN}" --version | cut -d' ' -f2), $(bindgen --version), linux-source $LINUX_SOURCE_DEB, rdma-core $RDMA_CORE_DEB)"
