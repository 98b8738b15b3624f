#!/usr/bin/env bash
# Builds and runs Tandem from a checkout, installing the Debian packages it
# needs when they are missing (apt-get; through sudo when not root).
#
#   tools/dev.sh demo    build, then run the demo sample
#   tools/dev.sh test    build, then run the test suite (warnings are errors)
#   tools/dev.sh asan    the test suite under AddressSanitizer + UBSan
#   tools/dev.sh tsan    the test suite under ThreadSanitizer
#   tools/dev.sh cpuonly the test suite of a build without OpenCL
#                        (-Dopencl=disabled), as on a CPU-only machine
#   tools/dev.sh bench   build, then run the benchmarks in test/bench
#   tools/dev.sh fuzz    build the parsers' libFuzzer harnesses with clang
#                        (ASan+UBSan) and run each for FUZZ_SECONDS (30)
#   tools/dev.sh info    build, then run tandem-info (arguments follow: --json)
#   tools/dev.sh consumers
#                        install Tandem into a prefix, then build and run a
#                        program against it through pkg-config (shared and
#                        static), CMake (find_package) and as a meson
#                        subproject (test/consumer)
#   tools/dev.sh peers   install oneTBB, StarPU and GLib, then run
#                        bench-peers: Tandem beside them (docs/why.md)
#
# Build folders: build/ (demo, test, bench), build-asan/, build-tsan/,
# build-cpuonly/, build-fuzz/, build-consumers/.
set -euo pipefail
cd "$(dirname "$0")/.."

# To build: a C compiler, meson, hwloc, cmocka, the OpenCL headers and ICD
# loader (opened at run time). To test and for the demo: also PoCL, an
# OpenCL implementation on the CPU that stands in for a GPU, GLib (the
# GLib main loop sample and its test), and Open MPI (libtandem-mpi and its
# tests under mpirun).
packages="gcc g++ libc6-dev meson ninja-build pkg-config libhwloc-dev libcmocka-dev ocl-icd-opencl-dev"
test_packages="pocl-opencl-icd libglib2.0-dev libopenmpi-dev openmpi-bin"

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

# setup DIR [meson options...]: configure DIR (again from scratch when it
# was configured with other options or another compiler), then build it.
setup() {
  local dir=$1
  shift
  local want="CC=${CC:-} -Dwerror=true $*"
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" -Dwerror=true "$@" >/dev/null
  elif [ "$(cat "$dir/.dev-options" 2>/dev/null)" != "$want" ]; then
    echo "dev.sh: $dir was configured otherwise: configuring it again" >&2
    meson setup --wipe "$dir" -Dwerror=true "$@" >/dev/null
  fi
  echo "$want" >"$dir/.dev-options"
  # quiet, but what failed is shown
  if ! ninja -C "$dir" >"$dir/.dev-build.log" 2>&1; then
    grep -v '^\[' "$dir/.dev-build.log" >&2
    exit 1
  fi
}

run_tests() {
  local dir=$1
  shift
  setup "$dir" "$@"
  meson test -C "$dir" --print-errorlogs
}

case "${1:-}" in
  # PoCL: the demo shows its OpenCL tasks on it where there is no GPU
  demo | test | asan | tsan | cpuonly) packages="$packages $test_packages" ;;
  # libFuzzer comes with clang's runtime libraries
  fuzz) packages="$packages clang libclang-rt-14-dev" ;;
  # cmake for the CMake consumer; for `pkg-config --static`, exactly the
  # packages docs/using.md tells a user to install (CI checks the docs)
  # the peers bench-peers compares Tandem with
  peers) packages="$packages g++ libtbb-dev libstarpu-dev libglib2.0-dev" ;;
  consumers)
    packages="$packages cmake $(sed -n 's/^apt-get install \(.*\)  *# what a static link needs$/\1/p' docs/using.md)"
    ;;
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
  cpuonly)
    run_tests build-cpuonly -Dopencl=disabled -Dbenchmarks=disabled
    ;;
  bench)
    setup build
    build/test/bench/bench-core
    build/test/bench/bench-opencl
    build/test/bench/bench-sched
    build/test/bench/bench-hetero
    build/test/bench/bench-pending
    build/test/bench/bench-embed
    ;;
  fuzz)
    CC=clang setup build-fuzz -Dfuzz=enabled -Db_sanitize=address,undefined -Db_lundef=false \
      -Dbenchmarks=disabled -Dtests=false
    for t in config files; do
      # the corpus grows in the build folder, from the seeds in the tree
      mkdir -p "build-fuzz/corpus-$t"
      cp test/fuzz/corpus/$t/* "build-fuzz/corpus-$t/"
      echo "fuzz-$t: ${FUZZ_SECONDS:-30} s"
      if ! LSAN_OPTIONS=suppressions=$PWD/test/lsan.supp "build-fuzz/test/fuzz/fuzz-$t" \
        -max_total_time="${FUZZ_SECONDS:-30}" -timeout=10 -rss_limit_mb=2048 -artifact_prefix=build-fuzz/ \
        "build-fuzz/corpus-$t" >"build-fuzz/fuzz-$t.log" 2>&1; then
        tail -40 "build-fuzz/fuzz-$t.log" >&2 # the crash, and the input kept as crash-*
        exit 1
      fi
      grep -E '^Done' "build-fuzz/fuzz-$t.log"
    done
    ;;
  info)
    setup build
    shift
    build/tools/tandem-info "$@"
    ;;
  consumers)
    bash tools/consumers.sh
    ;;
  peers)
    setup build
    meson setup --reconfigure build >/dev/null # finds the peers just installed
    ninja -C build >/dev/null
    build/test/bench/bench-peers
    ;;
  *)
    sed -n '2,20p' "$0" >&2
    exit 2
    ;;
esac
