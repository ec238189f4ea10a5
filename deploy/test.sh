#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test with ctest.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/setup-deps.sh --test
deploy/build.sh
build="${SLIDEDP_BUILD_DIR:-build}"
cd "$build"
ctest --output-on-failure --timeout 900 -j "${SLIDEDP_TEST_JOBS:-2}"
