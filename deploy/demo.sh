#!/usr/bin/env bash
# The main job: installs what is needed, builds, starts the daemon on loopback, submits
# client/examples/tiny.yaml with the CLI (the built-in tiny model on the built-in
# synthetic corpus), follows it to the end, prints the job and stops the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/setup-deps.sh
deploy/build.sh
build="${SLIDEDP_BUILD_DIR:-build}"
state="$(mktemp -d /tmp/slidedp-demo.XXXXXX)"
port="${SLIDEDP_DEMO_PORT:-50051}"
metrics_port="${SLIDEDP_DEMO_METRICS_PORT:-9464}"
server="127.0.0.1:$port"

"$build/server/slidedpd" --listen="$server" --metrics_listen="127.0.0.1:$metrics_port" \
  --state_dir="$state" --ready_file="$state/ready.json" >"$state/slidedpd.log" 2>&1 &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  [[ -s "$state/ready.json" ]] && break
  kill -0 $daemon 2>/dev/null || { cat "$state/slidedpd.log"; echo "demo: slidedpd did not start" >&2; exit 1; }
  sleep 0.1
done
echo "demo: slidedpd listening on $server (metrics on 127.0.0.1:$metrics_port/metrics, state in $state)"

id="$("$build/client/slidedp" --server="$server" submit client/examples/tiny.yaml)"
echo "demo: submitted job $id"
"$build/client/slidedp" --server="$server" watch "$id"
"$build/client/slidedp" --server="$server" get "$id"
echo "demo: metrics sample:"
curl -s "http://127.0.0.1:$metrics_port/metrics" 2>/dev/null | grep -E '^slidedp_(tokens_per_second|loss|jobs)' | head -8 || true
