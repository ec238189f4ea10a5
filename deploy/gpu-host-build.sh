#!/usr/bin/env bash
# Builds (and with --test, tests) slidedp on a GPU host that has PyTorch with CUDA but no
# network and no system gRPC/abseil: the Debian packages come as .deb files in .deps
# (deploy/fetch-debs.sh), unpacked into a private prefix.
#   deploy/gpu-host-build.sh [--test] [--runtime-only] [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
test=0; server=ON; build=build-gpu
for a in "$@"; do
  case "$a" in
    --test) test=1 ;;
    --runtime-only) server=OFF ;;
    -*) echo "usage: $0 [--test] [--runtime-only] [BUILD_DIR]" >&2; exit 2 ;;
    *) build="$a" ;;
  esac
done
prefix="${SLIDEDP_DEPS_PREFIX:-/opt/slidedp-deps}"
[[ -d "$prefix/usr" ]] || deploy/install-debs.sh .deps "$prefix" >/dev/null
lib="$prefix/usr/lib/x86_64-linux-gnu"
torch_prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')"
export PATH="$prefix/usr/bin:$PATH"
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LIBRARY_PATH="$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
# NCCL comes with PyTorch (the nvidia-nccl wheel) when the toolkit has none.
if [[ -z "${NCCL_HOME:-}" ]]; then
  NCCL_HOME="$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)"
  export NCCL_HOME
fi
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH="$prefix/usr;$torch_prefix" -DSLIDEDP_BUILD_SERVER="$server" \
  -DCMAKE_CUDA_ARCHITECTURES=90
cmake --build "$build" -j "$(nproc)"
if [[ $test -eq 1 ]]; then
  (cd "$build" && ctest --output-on-failure --timeout 900 -j 4)
fi
