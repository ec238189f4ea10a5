#!/usr/bin/env bash
# A/B against a reference commit in one GPU-host call: "does this change move the
# figures?". Builds the reference tree (a `git archive` tarball, made on the dev machine
# with `git archive -o .deps/ref.tar COMMIT`, carried in .deps) into /tmp/ref/build-gpu,
# then runs the same step_bench command with the reference binary and with this tree's
# (build-gpu), interleaved ROUNDS times so that drift of the machine hits both alike.
#   tests/bench/ab_reference.sh build              # the reference's build (after ours)
#   tests/bench/ab_reference.sh run ARGS...        # step_bench ARGS, ref then new, ROUNDS times
# Prints one "AB ref|new round R (ARGS): <step_bench's mean line>" line per run.
set -euo pipefail
cd "$(dirname "$0")/../.."
REF_TAR=${REF_TAR:-.deps/ref.tar}
REF=/tmp/ref
case "${1:-}" in
  build)
    [[ -f $REF_TAR ]] || { echo "ab_reference: no $REF_TAR (git archive -o $REF_TAR COMMIT)" >&2; exit 1; }
    rm -rf "$REF" && mkdir -p "$REF" && tar -xf "$REF_TAR" -C "$REF"
    # The reference uses the packages this tree's build unpacked (no .deps of its own).
    (cd "$REF" && SLIDEDP_BUILD_TARGETS="${REF_TARGETS:-step_bench adamw_bench}" \
       deploy/gpu-host-build.sh --runtime-only build-gpu)
    ;;
  run)
    shift
    for ((r = 1; r <= ${ROUNDS:-2}; r++)); do
      for side in ref new; do
        bin=build-gpu/tests/bench/step_bench
        [[ $side == ref ]] && bin=$REF/build-gpu/tests/bench/step_bench
        out=$("$bin" "$@" 2>&1) || { echo "$out" | tail -20; echo "AB $side FAILED"; exit 1; }
        echo "AB $side round $r ($*): $(echo "$out" | grep 'mean of' | tail -1)"
        echo "   plan: $(echo "$out" | grep -o '[0-9]* blocks kept, [0-9]* units resident' | tail -1)"
      done
    done
    ;;
  *) echo "usage: $0 build | run STEP_BENCH_ARGS..." >&2; exit 2 ;;
esac
