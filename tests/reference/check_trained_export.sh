#!/usr/bin/env bash
# ONE command (on the GPU host, which has transformers; after deploy/gpu-host-build.sh):
# trains the tiny preset for 20 steps with the engine, exports it as a Hugging Face
# directory, and checks that transformers' from_pretrained loads it and that its forward
# pass matches our logits (tolerance in check_trained_export.py). The verdict goes to
# tests/reference/trained_export_check.txt (commit it) and the exit code.
#   tests/reference/check_trained_export.sh [BUILD_DIR (default build-gpu)] [MODEL] [STEPS] [VERDICT_FILE]
# e.g. the fine-tuned stories260K (issue 23), with its tokenizer and generate():
#   tests/reference/check_trained_export.sh build-gpu tests/reference/fixtures/stories260k/model 20 \
#     tests/reference/trained_export_stories260k_check.txt
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build-gpu}"
out="$(mktemp -d /tmp/slidedp_trained_export.XXXXXX)"
cmake --build "$build" --target trained_export
verdict="${4:-tests/reference/trained_export_check.txt}"
"$build/tests/trained_export" "$out" "${2:-tiny}" "${3:-20}" | tee "$verdict"
python3 tests/reference/check_trained_export.py "$out" | tee -a "$verdict"
