#!/usr/bin/env bash
# On a machine without network: unpacks the .deb files of DIR (default .deps, made by
# deploy/fetch-debs.sh) into PREFIX (default /opt/slidedp-deps) with `dpkg -x`: no
# maintainer scripts, nothing outside PREFIX is touched, no root needed when PREFIX is
# writable. Prints the environment that builds against the prefix
# (deploy/gpu-host-build.sh sets it itself).
#   deploy/install-debs.sh [DIR] [PREFIX]
# PREFIX/.slidedp-debs lists what was unpacked; when DIR's packages differ from that list
# (a newer fetch), the prefix is emptied and unpacked again. After unpacking, a library
# link that points at nothing (a runtime package missing from deploy/offline-debs.txt)
# is an error.
set -euo pipefail
dir="${1:-.deps}"
prefix="${2:-/opt/slidedp-deps}"
shopt -s nullglob
debs=("$dir"/*.deb)
if [[ ${#debs[@]} -eq 0 ]]; then
  echo "install-debs: no .deb files in $dir (run deploy/fetch-debs.sh on a networked Debian 12 machine)" >&2
  exit 1
fi
stamp="$prefix/.slidedp-debs"
wanted="$(for f in "${debs[@]}"; do basename "$f"; done | sort)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]]; then
  echo "install-debs: $prefix is up to date (${#debs[@]} packages)"
else
  if [[ -f "$stamp" ]]; then
    # Ours (the stamp says so): start afresh so that no file of an older package stays.
    rm -rf "${prefix:?}/usr" "${prefix:?}/etc" "${prefix:?}/lib" "$stamp"
  elif [[ -d "$prefix/usr" ]]; then
    echo "install-debs: $prefix/usr exists but was not made by install-debs; choose an empty PREFIX" >&2
    exit 1
  fi
  mkdir -p "$prefix"
  for f in "${debs[@]}"; do dpkg -x "$f" "$prefix"; done
  echo "$wanted" > "$stamp"
  echo "install-debs: unpacked ${#debs[@]} packages into $prefix"
fi

lib="$prefix/usr/lib/x86_64-linux-gnu"
broken="$(find "$lib" -xtype l 2>/dev/null || true)"
if [[ -n "$broken" ]]; then
  echo "install-debs: these links in $prefix point at nothing; add the packages that own their" \
       "targets to deploy/offline-debs.txt and fetch again:" >&2
  for l in $broken; do echo "  $l -> $(readlink "$l")" >&2; done
  exit 1
fi
for tool in protoc grpc_cpp_plugin; do
  [[ -x "$prefix/usr/bin/$tool" ]] || { echo "install-debs: $prefix/usr/bin/$tool missing" >&2; exit 1; }
done
echo "export SLIDEDP_DEPS_PREFIX=$prefix"
echo "export PATH=$prefix/usr/bin:\$PATH"
echo "export LD_LIBRARY_PATH=$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
echo "export LIBRARY_PATH=$lib\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
echo "# cmake -DCMAKE_PREFIX_PATH=\"$prefix/usr;<torch prefix>\" ..."
