#!/usr/bin/env bash
# The layers of runtime/ (runtime/CMakeLists.txt): a file includes files of its own
# layer and of the layers below it, never one above. Static libraries link whatever
# order the symbols come in, so this check is what keeps the direction.
#   tests/runtime/layers_check.sh SOURCE_DIR LAYER... [-- LAYER=LIBRARY...]
# LAYER...: runtime/'s layers from the lowest up, as runtime/CMakeLists.txt lists them
# (SLIDEDP_RUNTIME_LAYERS). A layer is a folder of runtime/ (data/tokenizer/ is data),
# "config" the files at runtime/'s top; runtime/*_main.cc are programs, above them all.
# After "--", LAYER=LIBRARY pairs name each layer's static library: then no library may
# leave a symbol undefined that a higher layer's library defines (a call upward that no
# include shows: a function declared below and defined above).
# Prints each offending file and line, or symbol, and exits 1; 0 when all keep the order.
set -euo pipefail
root="$1"
shift
declare -A rank
layers=()
while [[ $# -gt 0 && "$1" != "--" ]]; do
  rank[$1]=${#layers[@]}
  layers+=("$1")
  shift
done
[[ $# -gt 0 ]] && shift  # the "--"
declare -A library=()
for pair in "$@"; do library[${pair%%=*}]=$(realpath "${pair#*=}"); done
cd "$root/runtime"

# runtime/ path -> its layer
layer_of() {
  case "$1" in
    */*) echo "${1%%/*}" ;;
    *) echo config ;;
  esac
}

bad=0
while IFS= read -r file; do
  case "$file" in *_main.cc) continue ;; esac
  from=$(layer_of "$file")
  if [[ -z "${rank[$from]+set}" ]]; then
    echo "runtime/$file: runtime/$from/ is on no layer (add it to SLIDEDP_RUNTIME_LAYERS)"
    bad=1
    continue
  fi
  while IFS=: read -r line include; do
    if [[ "$include" == *..* ]]; then
      echo "runtime/$file:$line: includes \"$include\": name runtime/ files from the root"
      bad=1
      continue
    fi
    [[ "$include" == runtime/* ]] || continue
    to=$(layer_of "${include#runtime/}")
    if [[ -z "${rank[$to]+set}" ]]; then
      echo "runtime/$file:$line: includes $include, on no layer"
      bad=1
    elif ((rank[$to] > rank[$from])); then
      echo "runtime/$file:$line: $from includes $include ($to is above $from)"
      bad=1
    fi
  done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" |
             sed -E 's/^([0-9]+):[^"]*"([^"]+)".*/\1:\2/')
done < <(find . -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' \) | sed 's|^\./||' | LC_ALL=C sort)

# Symbols: what each library leaves undefined against what the layers above define.
if [[ ${#library[@]} -gt 0 ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  for layer in "${layers[@]}"; do
    lib="${library[$layer]:-}"
    [[ -n "$lib" ]] || continue
    # Strong definitions only: an inline function or template that a lower layer uses
    # it emits itself (weak), so an undefined symbol below names real code above.
    nm -g --defined-only "$lib" 2>/dev/null | awk 'NF >= 3 && $2 ~ /^[TDBRG]$/ {print $3}' |
      LC_ALL=C sort -u >"$tmp/$layer.defined"
    nm -g --undefined-only "$lib" 2>/dev/null | awk '{print $NF}' | LC_ALL=C sort -u >"$tmp/$layer.undefined"
  done
  for ((i = 0; i < ${#layers[@]}; ++i)); do
    low=${layers[$i]}
    [[ -f "$tmp/$low.undefined" ]] || continue
    for ((j = i + 1; j < ${#layers[@]}; ++j)); do
      high=${layers[$j]}
      [[ -f "$tmp/$high.defined" ]] || continue
      while IFS= read -r symbol; do
        echo "$low's library uses $(c++filt "$symbol"), which $high defines"
        bad=1
      done < <(LC_ALL=C comm -12 "$tmp/$low.undefined" "$tmp/$high.defined")
    done
  done
fi
exit $bad
