#!/usr/bin/env bash
# On a Debian 12 (bookworm) machine with network: downloads the packages of
# deploy/offline-debs.txt as .deb files into DIR (default .deps), for a GPU host without
# network where deploy/install-debs.sh unpacks them (deploy/gpu-host-build.sh does).
#   deploy/fetch-debs.sh [DIR]
# The list holds the libraries and tools slidedp builds against, not their own
# dependencies that every host has (libc6, libstdc++6, zlib1g, libssl3, libcurl4...):
# after the download this prints the dependencies the list leaves to the host.
# DIR is replaced as a whole, so no older version of a package stays beside a newer one.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:-.deps}"

# The .deb names and versions are Debian 12's (Ubuntu's differ, e.g. libabsl20220623t64).
# shellcheck disable=SC1091
codename="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")"
if [[ "$codename" != bookworm ]]; then
  echo "fetch-debs: this is '${codename:-unknown}', not Debian 12 (bookworm): the package names in" \
       "deploy/offline-debs.txt are Debian 12's; run it on Debian 12 (a container will do:" \
       "docker run --rm -v \$PWD:/src -w /src debian:12 deploy/fetch-debs.sh)" >&2
  exit 1
fi

mapfile -t pkgs < <(sed 's/#.*//; s/[[:space:]]//g' "$here/offline-debs.txt" | grep -v '^$')
tmp="$(mktemp -d "${dir%/}.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && apt-get download "${pkgs[@]}"); then
  echo "fetch-debs: apt-get download failed; if it could not find a package or a file," \
       "refresh the package lists first: sudo apt-get update" >&2
  exit 1
fi
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
chmod 0755 "$dir"

# What the packages depend on that the list does not bring: the target host must have it.
names="$(printf '%s\n' "${pkgs[@]}" | sort -u)"
left="$(for f in "$dir"/*.deb; do dpkg-deb -f "$f" Depends; done | tr ',|' '\n\n' |
        sed 's/([^)]*)//g; s/:any//; s/[[:space:]]//g' | grep -v '^$' | sort -u | comm -23 - <(echo "$names"))"
echo "fetch-debs: $(ls "$dir"/*.deb | wc -l) packages ($(du -sh "$dir" | cut -f1)) in $(cd "$dir" && pwd)"
echo "fetch-debs: left to the target host: $(echo "$left" | tr '\n' ' ')"
