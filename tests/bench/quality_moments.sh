#!/usr/bin/env bash
# Issue 22's quality proof on the GPU host: the same job trained with fp32, bf16 and int8
# AdamW moments (optimizer.state_dtype), 300 steps of text by default, and the loss
# curves side by side: the mean loss per 50 steps, the mean of the last 50, and bf16's
# and int8's difference from fp32 there (the issue asks within 1%).
#   tests/bench/quality_moments.sh [BUILD_DIR (build-gpu)] [OUT (/tmp/quality_moments)]
# Environment: MODEL (qwen2.5-3b), TRAIN_STEPS (300), SEQ (512), MBS (4), LR (3e-4), DEVICE
# (cuda), DTYPES ("fp32 bf16 int8"), PARALLEL (1: the runs at once, each with
# UPDATE_THREADS (5) update threads and GPU_BUDGET (40e9) bytes of the GPU; 0: one after
# the other), TOKENIZER (the repository's
# Qwen2-style tokenizer fixture). The corpus is the repository's own text (Markdown and
# C++ headers) as JSON lines. Progress: each run's log in OUT/DTYPE.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build-gpu}"
out="${2:-/tmp/quality_moments}"
model="${MODEL:-qwen2.5-3b}" steps="${TRAIN_STEPS:-300}" seq="${SEQ:-512}" mbs="${MBS:-4}" lr="${LR:-3e-4}"
device="${DEVICE:-cuda}" dtypes="${DTYPES:-fp32 bf16 int8}" parallel="${PARALLEL:-1}"
tokenizer="${TOKENIZER:-tests/reference/fixtures/tokenizer/qwen2/tokenizer.json}"
# Runs at once share the GPU: each plans its kept blocks and resident units within a
# third of an H200 (GPU_BUDGET bytes; 0: the whole GPU, for one run at a time).
budget="${GPU_BUDGET:-$([[ "$parallel" == 1 ]] && echo 40000000000 || echo 0)}"
train="$build/runtime/slidedp-train"
[[ -x "$train" ]] || { echo "quality_moments: $train is not built" >&2; exit 2; }
mkdir -p "$out"

# The corpus: one JSON line per file of the repository's own prose and headers.
python3 - "$out/corpus.jsonl" <<'EOF'
import glob, json, sys
files = sorted(glob.glob("**/*.md", recursive=True) + glob.glob("runtime/**/*.h", recursive=True))
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for p in files:
        if p.startswith("build"):
            continue
        text = open(p, encoding="utf-8", errors="replace").read()
        f.write(json.dumps({"text": text}) + "\n")
print(f"quality_moments: corpus of {len(files)} files")
EOF

pids=()
for d in $dtypes; do
  cat > "$out/$d.yaml" <<EOF
model: $model
data:
  format: text
  path: $out/corpus.jsonl
  tokenizer: $PWD/$tokenizer
  cache_dir: $out/cache-$d
seq_len: $seq
micro_batch_size: $mbs
grad_accum: 1
device: $device
steps: $steps
log_every: 1
optimizer:
  lr: $lr
  warmup_steps: 30
  schedule: cosine
  max_grad_norm: 1.0
  state_dtype: $d
policy:
  update_threads: ${UPDATE_THREADS:-5}
  gpu_memory_budget_bytes: $budget
seed: 1234
EOF
  echo "quality_moments: $d: $train $out/$d.yaml > $out/$d.log"
  if [[ "$parallel" == 1 ]]; then
    "$train" "$out/$d.yaml" > "$out/$d.log" 2>&1 &
    pids+=("$!")
  elif ! "$train" "$out/$d.yaml" > "$out/$d.log" 2>&1; then
    echo "quality_moments: the $d run failed:" >&2; tail -n 5 "$out/$d.log" >&2; exit 1
  fi
done
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "quality_moments: a run failed:" >&2; tail -n 3 "$out"/*.log >&2; exit 1
  fi
done

python3 - "$out" "$steps" $dtypes <<'EOF'
import re, sys
out, steps, dtypes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
curves = {}
for d in dtypes:
    losses = {}
    for line in open(f"{out}/{d}.log", encoding="utf-8", errors="replace"):
        m = re.match(r"step (\d+)/\d+ \| loss ([0-9.eE+-]+|nan|inf)", line)
        if m:
            losses[int(m.group(1))] = float(m.group(2))
    curves[d] = losses
    if len(losses) != steps:
        print(f"{d}: {len(losses)} of {steps} steps logged (see {out}/{d}.log)")
edges = list(range(0, steps, 50))
head = "| state_dtype | " + " | ".join(f"{a + 1}-{min(a + 50, steps)}" for a in edges) + " | last 50 |"
print(head)
print("|" + "---|" * (len(edges) + 2))
def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")
last = {}
for d in dtypes:
    c = curves[d]
    cells = [mean([c[s] for s in range(a + 1, min(a + 50, steps) + 1) if s in c]) for a in edges]
    last[d] = mean([c[s] for s in range(steps - 49, steps + 1) if s in c])
    rel = ""
    if d != "fp32" and "fp32" in last and last["fp32"] == last["fp32"]:
        rel = f" ({100 * (last[d] - last['fp32']) / last['fp32']:+.2f}%)"
    print(f"| {d} | " + " | ".join(f"{x:.4f}" for x in cells) + f" | {last[d]:.4f}{rel} |")
EOF
