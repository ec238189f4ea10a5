#!/usr/bin/env bash
# Builds the runtime tests with AddressSanitizer + UndefinedBehaviorSanitizer into
# build-asan and runs them. Run before every change that touches parsing (safetensors,
# config.json, job files, datasets). The engine tests run too, more slowly.
#   deploy/sanitize.sh [GTEST_FILTER]
set -euo pipefail
cd "$(dirname "$0")/.."
filter="${1:-*}"
SLIDEDP_BUILD_DIR=build-asan deploy/build.sh -DSLIDEDP_SANITIZE=ON -DSLIDEDP_BUILD_SERVER=OFF \
  -DCMAKE_BUILD_TYPE=Debug
# LibTorch itself is not instrumented; its allocator and OpenMP runtime confuse the
# leak checker, so leaks are not reported here. Every other ASan/UBSan finding fails.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
build-asan/tests/slidedp_runtime_tests --gtest_filter="$filter"
