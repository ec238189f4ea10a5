#!/usr/bin/env bash
# ONE command (on the GPU host, which has transformers; after deploy/gpu-host-build.sh):
# trains the tiny preset for 20 steps with the engine, exports it as a Hugging Face
# directory, and checks that transformers' from_pretrained loads it and that its forward
# pass matches our logits (tolerance in check_trained_export.py). The verdict goes to
# tests/reference/trained_export_check.txt (commit it) and the exit code.
#   tests/reference/check_trained_export.sh [BUILD_DIR (default build-gpu)] [MODEL] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build-gpu}"
out="$(mktemp -d /tmp/slidedp_trained_export.XXXXXX)"
cmake --build "$build" --target trained_export
"$build/tests/trained_export" "$out" "${2:-tiny}" "${3:-20}" | tee tests/reference/trained_export_check.txt
python3 tests/reference/check_trained_export.py "$out" | tee -a tests/reference/trained_export_check.txt
