#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang (ASan + UBSan) into build-fuzz/
# and runs each for a bounded time, starting from its seed corpus in
# tests/fuzz/corpus/NAME (new inputs go to build-fuzz/corpus/NAME, not the repository).
# Prints the executions of each run; exits non-zero if any target crashes (the input is
# kept as build-fuzz/NAME-crash-*; reproduce with build-fuzz/NAME_fuzz FILE).
#   deploy/fuzz.sh [SECONDS_EACH (default 20)] [NAME...]
# Needs clang-14 and libclang-rt-14-dev (deploy/setup-deps.sh --fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
shift || true
all=(safetensors config token_file jsonl text_records train_config spec_file checkpoint job_record
     spec_translation)
# Every target: jsonl and spec_file, which once crashed (tests/fuzz/crashes holds the
# inputs, fixed since), are back in the set.
default=("${all[@]}")
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=("${default[@]}")
out=build-fuzz
mkdir -p "$out/gen"
CXX="${SLIDEDP_FUZZ_CXX:-clang++-14}"
flags=(-std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I. -I"$out/gen")
absl=$(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format absl_synchronization)

protoc -I proto --cpp_out="$out/gen" proto/slidedp/v1/job.proto

# runtime/io/ (file access, nesting checks, user text) is used by every reader.
io="runtime/io/file_access.cc runtime/io/json_nesting.cc runtime/io/user_text.cc"
sources() {
  echo "$io"
  case "$1" in
    safetensors) echo runtime/model/safetensors.cc runtime/model/atomic_file.cc ;;
    config) echo runtime/model/model_config.cc runtime/model/param_layout.cc ;;
    token_file) echo runtime/data/token_file.cc runtime/data/data_file_mapping.cc runtime/data/token_source.cc ;;
    jsonl) echo runtime/data/jsonl_tokens.cc runtime/data/data_file_mapping.cc runtime/data/token_source.cc ;;
    text_records) echo runtime/data/text_records.cc runtime/data/document_encoder.cc \
      runtime/data/corpus_tokenizer.cc runtime/data/token_source.cc runtime/data/tokenizer/*.cc \
      runtime/model/model_config.cc runtime/model/param_layout.cc \
      runtime/state/thread_pool.cc ;;
    train_config) echo runtime/train_config.cc runtime/train_config_validate.cc ;;
    spec_file) echo client/spec_file.cc server/spec_fields.cc runtime/train_config.cc \
      runtime/train_config_validate.cc "$out/gen/slidedp/v1/job.pb.cc" ;;
    checkpoint) echo runtime/state/checkpoint.cc runtime/state/moment_codec.cc runtime/state/int8_moments.cc ;;
    job_record) echo server/job_record.cc "$out/gen/slidedp/v1/job.pb.cc" ;;
    spec_translation) echo server/spec_translation.cc server/spec_fields.cc server/path_policy.cc \
      server/peer_policy.cc server/listen_address.cc \
      runtime/train_config.cc runtime/train_config_validate.cc runtime/model/model_config.cc \
      runtime/model/param_layout.cc "$out/gen/slidedp/v1/job.pb.cc" ;;
    *) echo "fuzz: unknown target $1 (known: ${all[*]})" >&2; return 1 ;;
  esac
}
libs() {
  case "$1" in
    train_config) echo -lyaml-cpp ;;
    spec_file) echo -lprotobuf -lyaml-cpp ;;
    job_record) echo -lprotobuf ;;
    spec_translation) echo -lprotobuf -lyaml-cpp ;;
    text_records) pkg-config --libs re2 libutf8proc absl_flat_hash_map absl_hash absl_raw_hash_set ;;
  esac
}

# Build (two at a time: this runs on 2-core machines).
pids=()
for t in "${targets[@]}"; do
  src=$(sources "$t")
  # shellcheck disable=SC2046,SC2086
  "$CXX" "${flags[@]}" "tests/fuzz/${t}_fuzz.cc" $src $(libs "$t") $absl -o "$out/${t}_fuzz" \
    >"$out/${t}_build.log" 2>&1 &
  pids+=("$!:$t")
  if [[ ${#pids[@]} -ge 2 ]]; then
    p="${pids[0]}"; pids=("${pids[@]:1}")
    wait "${p%%:*}" || { cat "$out/${p#*:}_build.log"; exit 1; }
  fi
done
for p in "${pids[@]}"; do wait "${p%%:*}" || { cat "$out/${p#*:}_build.log"; exit 1; }; done

failed=()
for t in "${targets[@]}"; do
  # Inputs that once crashed this target run first, as they are: a regression fails here.
  for crash in tests/fuzz/crashes/"${t}"_*; do
    [[ -e "$crash" ]] || continue
    if ! "$out/${t}_fuzz" "$crash" >"$out/${t}_regression.log" 2>&1; then
      echo "fuzz: $t crashes again on $crash; log $out/${t}_regression.log:"
      tail -n 40 "$out/${t}_regression.log"
      failed+=("$t")
      continue 2
    fi
  done
  mkdir -p "$out/corpus/$t"
  log="$out/${t}_run.log"
  set +e
  "$out/${t}_fuzz" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$out/${t}-" "$out/corpus/$t" "tests/fuzz/corpus/$t" \
    >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  if [[ $rc -ne 0 ]]; then
    echo "fuzz: $t CRASHED after $execs executions (exit $rc); log $log:"
    tail -n 40 "$log"
    failed+=("$t")
  else
    echo "fuzz: $t ok, $execs executions in ${seconds}s, corpus $(ls "$out/corpus/$t" | wc -l) inputs"
  fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: crashes in ${failed[*]}"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets crash-free"
