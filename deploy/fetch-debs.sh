#!/usr/bin/env bash
# On a Debian 12 machine with network: downloads the packages of deploy/offline-debs.txt
# as .deb files into DIR (default .deps), for a machine without network.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:-.deps}"
mkdir -p "$dir"
cd "$dir"
mapfile -t pkgs < <(grep -v '^#' "$here/offline-debs.txt" | grep -v '^$')
apt-get download "${pkgs[@]}"
echo "fetch-debs: $(ls *.deb | wc -l) packages in $(pwd)"
