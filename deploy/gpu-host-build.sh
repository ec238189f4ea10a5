#!/usr/bin/env bash
# Builds (and with --test, tests) slidedp on a GPU host that has PyTorch with CUDA but no
# network and no system gRPC/abseil: the Debian packages come as .deb files in .deps
# (deploy/fetch-debs.sh), unpacked into a private prefix (deploy/install-debs.sh;
# $SLIDEDP_DEPS_PREFIX, default /opt/slidedp-deps), and LibTorch is the one of the
# python3 on PATH.
#   deploy/gpu-host-build.sh [--test] [--runtime-only] [BUILD_DIR]
# SLIDEDP_BUILD_TARGETS="slidedpd slidedp": build only these targets.
# The binaries find the prefix's libraries through their build RPATH; run them from the
# build tree, or set LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu elsewhere.
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
if [[ -d .deps ]]; then
  deploy/install-debs.sh .deps "$prefix" >/dev/null  # unpacks again when .deps changed
elif [[ ! -f "$prefix/.slidedp-debs" ]]; then
  echo "gpu-host-build: no .deps here and no $prefix: run deploy/fetch-debs.sh .deps on a" \
       "networked Debian 12 machine and copy .deps here" >&2
  exit 1
fi
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
# shellcheck disable=SC2086
cmake --build "$build" -j "$(nproc)" ${SLIDEDP_BUILD_TARGETS:+--target $SLIDEDP_BUILD_TARGETS}
if [[ $test -eq 1 ]]; then
  (cd "$build" && ctest --output-on-failure --timeout 900 -j 4)
fi
