#!/usr/bin/env bash
# Builds and runs Tandem from a checkout, installing the Debian packages it
# needs when they are missing (apt-get; through sudo when not root).
#
#   tools/dev.sh demo    build, then run the demo sample
#   tools/dev.sh test    build, then run the test suite (warnings are errors)
#   tools/dev.sh asan    the test suite under AddressSanitizer + UBSan
#   tools/dev.sh tsan    the test suite under ThreadSanitizer
#   tools/dev.sh bench   build, then run the benchmarks in test/bench
#   tools/dev.sh info    build, then run tandem-info (arguments follow: --json)
#
# Build folders: build/ (demo, test, bench), build-asan/, build-tsan/.
set -euo pipefail
cd "$(dirname "$0")/.."

# To build: a C compiler, meson, hwloc, cmocka, the OpenCL headers and ICD
# loader (opened at run time). To test and for the demo: also PoCL, an
# OpenCL implementation on the CPU that stands in for a GPU.
packages="gcc g++ libc6-dev meson ninja-build pkg-config libhwloc-dev libcmocka-dev ocl-icd-opencl-dev"
test_packages="pocl-opencl-icd"

install_missing() {
  local missing=""
  for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      missing="$missing $p"
  done
  [ -z "$missing" ] && return 0
  echo "dev.sh: installing$missing" >&2
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends $missing >/dev/null
}

# setup DIR [meson options...]: configure DIR once, then build it.
setup() {
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" -Dwerror=true "$@" >/dev/null
  fi
  ninja -C "$dir" >/dev/null
}

run_tests() {
  local dir=$1
  shift
  setup "$dir" "$@"
  meson test -C "$dir" --print-errorlogs
}

case "${1:-}" in
  # PoCL: the demo shows its OpenCL tasks on it where there is no GPU
  demo | test | asan | tsan) packages="$packages $test_packages" ;;
esac
install_missing
case "${1:-}" in
  demo)
    setup build
    build/samples/demo
    ;;
  test)
    run_tests build
    ;;
  asan)
    run_tests build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbenchmarks=disabled
    ;;
  tsan)
    run_tests build-tsan -Db_sanitize=thread -Db_lundef=false -Dbenchmarks=disabled
    ;;
  bench)
    setup build
    build/test/bench/bench-core
    build/test/bench/bench-opencl
    build/test/bench/bench-sched
    build/test/bench/bench-hetero
    ;;
  info)
    setup build
    shift
    build/tools/tandem-info "$@"
    ;;
  *)
    sed -n '2,12p' "$0" >&2
    exit 2
    ;;
esac
