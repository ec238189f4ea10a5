#!/usr/bin/env bash
# On a machine without network: unpacks the .deb files of DIR (default .deps) into
# PREFIX (default /opt/slidedp-deps) without touching the system, and prints the
# environment to build against them.
set -euo pipefail
dir="${1:-.deps}"
prefix="${2:-/opt/slidedp-deps}"
shopt -s nullglob
debs=("$dir"/*.deb)
if [[ ${#debs[@]} -eq 0 ]]; then
  echo "install-debs: no .deb files in $dir (run deploy/fetch-debs.sh on a networked Debian 12 machine)" >&2
  exit 1
fi
mkdir -p "$prefix"
for f in "${debs[@]}"; do dpkg -x "$f" "$prefix"; done
echo "install-debs: unpacked ${#debs[@]} packages into $prefix"
echo "export SLIDEDP_DEPS_PREFIX=$prefix"
