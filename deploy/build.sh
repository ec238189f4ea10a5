#!/usr/bin/env bash
# Configures and builds slidedp into ./build (or $SLIDEDP_BUILD_DIR) with Ninja.
# Extra arguments go to cmake's configure step, e.g. -DSLIDEDP_SANITIZE=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${SLIDEDP_BUILD_DIR:-build}"
jobs="${SLIDEDP_JOBS:-$(nproc)}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
echo "build: compiling with $jobs jobs into $build (log of configure: $build.configure.log)"
cmake --build "$build" -j "$jobs"
