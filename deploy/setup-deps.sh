#!/usr/bin/env bash
# Installs what slidedp needs to build and test, by package name, on Debian 12 or
# Ubuntu 24.04. Idempotent: packages already present are not reinstalled, and the
# package lists are refreshed only when something is missing.
#   deploy/setup-deps.sh           build dependencies
#   deploy/setup-deps.sh --test    also what the tests use (Python gRPC, Prometheus tools)
#   deploy/setup-deps.sh --fuzz    also clang and libFuzzer for deploy/fuzz.sh
set -euo pipefail

BUILD_PKGS=(
  build-essential cmake ninja-build pkg-config git
  libtorch-dev
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libcivetweb-dev nlohmann-json3-dev libyaml-cpp-dev
  libsqlite3-dev libcpp-httplib-dev libssl-dev googletest libgtest-dev libgmock-dev libbenchmark-dev
  libre2-dev libutf8proc-dev
  libgloo-dev
)
# prometheus brings promtool and a server that the metrics test scrapes with; systemd
# brings systemd-analyze, which checks deploy/systemd (in a container too); libsimde-dev
# lets the AVX-512 update kernels be tested on any CPU (tests/CMakeLists.txt).
TEST_PKGS=(python3 python3-grpcio python3-protobuf prometheus systemd libsimde-dev)

FUZZ_PKGS=(clang-14 libclang-rt-14-dev)

pkgs=("${BUILD_PKGS[@]}")
for a in "$@"; do
  case "$a" in
    --test) pkgs+=("${TEST_PKGS[@]}") ;;
    --fuzz) pkgs+=("${FUZZ_PKGS[@]}") ;;
    *) echo "usage: $0 [--test] [--fuzz]" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup-deps: all ${#pkgs[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "setup-deps: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
