#!/usr/bin/env bash
# Builds Tandem, installs it into build-consumers/prefix, then builds and
# runs test/consumer/consumer.c out of the tree against it in each way a
# project may take it, checking what each way promises:
#  - pkg-config, shared: the flags of tandem.pc; no OpenCL among its
#    requirements;
#  - pkg-config, static: libtandem.a with `pkg-config --static`, which
#    links without -lOpenCL (the loader is opened at run time);
#  - the installed tandem-info runs from the prefix (install rpath);
#  - CMake: find_package(tandem) and tandem::tandem;
#  - a meson subproject: dependency('tandem'), the library alone built and
#    installed.
# Called by tools/dev.sh consumers (which installs cmake and libudev-dev
# where missing).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$PWD/build-consumers
prefix=$out/prefix
rm -rf "$out"
mkdir -p "$out"
say() { echo "consumers: $*"; }
fail() {
  echo "consumers: FAILED: $*" >&2
  exit 1
}

# where PoCL is installed, the program sees its device (static link too)
expect=""
if dpkg-query -W -f='${Status}' pocl-opencl-icd 2>/dev/null | grep -q "install ok installed"; then
  expect="1 device worker"
fi
run() { # run NAME: runs $out/NAME, with OpenCL CPU devices admitted
  local log
  log=$(TANDEM_OPENCL_CPU=1 "$out/$1" 2>"$out/$1.err") || fail "$1: $(cat "$out/$1.err")"
  echo "$log" | grep -q "result right" || fail "$1 printed: $log"
  [ -z "$expect" ] || echo "$log" | grep -q "$expect" || fail "$1: no OpenCL device: $log"
  say "$1: $log"
}

meson setup "$out/tandem" --prefix="$prefix" --libdir=lib -Dwerror=true -Dtests=false \
  -Dbenchmarks=disabled -Dfuzz=disabled -Dglib=disabled >/dev/null
ninja -C "$out/tandem" install >/dev/null
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig

# pkg-config, shared
if pkg-config --print-requires --print-requires-private tandem | grep -qi opencl; then
  fail "tandem.pc requires OpenCL"
fi
[ "$(pkg-config --modversion tandem)" = "$(sed -n 's/^#define TDM_VERSION_\(MAJOR\|MINOR\|PATCH\) //p' include/tandem.h | paste -sd.)" ] ||
  fail "tandem.pc's version is $(pkg-config --modversion tandem)"
# shellcheck disable=SC2046 # the flags are words
cc -std=c11 -Wall -Wextra -Werror test/consumer/consumer.c -o "$out/pkg-config-shared" \
  $(pkg-config --cflags --libs tandem) -Wl,-rpath,"$prefix/lib"
run pkg-config-shared

# pkg-config, static: libtandem.a, its private libraries, no OpenCL
libs=$(pkg-config --static --libs tandem)
case " $libs " in *OpenCL*) fail "pkg-config --static --libs: $libs" ;; esac
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror test/consumer/consumer.c -o "$out/pkg-config-static" \
  $(pkg-config --cflags tandem) ${libs/-ltandem/-l:libtandem.a}
if ldd "$out/pkg-config-static" | grep -Eq "libtandem|libOpenCL"; then
  fail "the static program links $(ldd "$out/pkg-config-static" | grep -E 'libtandem|libOpenCL')"
fi
run pkg-config-static

# the installed tools find the library in the prefix
env -u LD_LIBRARY_PATH "$prefix/bin/tandem-info" >/dev/null || fail "installed tandem-info"
say "installed tandem-info runs from $prefix/bin"

# CMake (with ninja, which building Tandem needs anyway: make may be absent)
cmake -G Ninja -S test/consumer -B "$out/cmake" -DCMAKE_PREFIX_PATH="$prefix" >"$out/cmake.log" 2>&1 ||
  fail "cmake: $(tail -20 "$out/cmake.log")"
cmake --build "$out/cmake" >>"$out/cmake.log" 2>&1 || fail "cmake --build: $(tail -20 "$out/cmake.log")"
cp "$out/cmake/consumer" "$out/cmake-consumer"
LD_LIBRARY_PATH=$prefix/lib run cmake-consumer

# a meson subproject: Tandem's sources under subprojects/tandem
sub=$out/subproject
mkdir -p "$sub/subprojects/tandem"
cp test/consumer/meson.build test/consumer/consumer.c "$sub/"
cp -r meson.build meson_options.txt include runtime backends tools "$sub/subprojects/tandem/"
# the subproject even where an installed Tandem would be found
env -u PKG_CONFIG_PATH meson setup "$sub/build" "$sub" --force-fallback-for=tandem \
  --prefix="$out/subproject-prefix" --libdir=lib >"$out/subproject.log" 2>&1 ||
  fail "meson setup: $(tail -20 "$out/subproject.log")"
ninja -C "$sub/build" >>"$out/subproject.log" 2>&1 || fail "ninja: $(tail -20 "$out/subproject.log")"
built=$(find "$sub/build/subprojects/tandem" -type f -executable \( -name 'tandem-*' -o -name demo -o -name 'test-*' -o -name 'bench-*' \))
[ -z "$built" ] || fail "the subproject built more than the library: $built"
meson install -C "$sub/build" --destdir "$out/subproject-dest" >>"$out/subproject.log" 2>&1 ||
  fail "meson install: $(tail -20 "$out/subproject.log")"
extra=$(cd "$out/subproject-dest" && find . -type f | grep -Ev '/lib/libtandem\.(so|a)|/include/tandem(\.h|/opencl\.h|/glib\.h)$|/lib/pkgconfig/tandem\.pc$|/lib/cmake/tandem/' || true)
[ -z "$extra" ] || fail "the subproject installed more than the library: $extra"
cp "$sub/build/consumer" "$out/subproject-consumer"
LD_LIBRARY_PATH=$sub/build/subprojects/tandem run subproject-consumer

# Over MPI (where MPI is installed): the README's example, built with
# the flags of tandem-mpi.pc alone (MPI's through mpi-c), on 3 ranks
if pkg-config --exists mpi-c && command -v mpirun >/dev/null; then
  awk '/^```c$/ {code = ""; inside = 1; next} /^```$/ {if (inside && code ~ /tandem\/mpi\.h/) printf "%s", code; inside = 0; next} inside {code = code $0 "\n"}' \
    README.md >"$out/mpi-example.c"
  grep -q tdm_mpi_create "$out/mpi-example.c" || fail "no MPI example found in README.md"
  # shellcheck disable=SC2046
  cc -std=c11 -Wall -Wextra -Werror "$out/mpi-example.c" -o "$out/mpi-example" \
    $(pkg-config --cflags --libs tandem-mpi) -Wl,-rpath,"$prefix/lib"
  log=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
    timeout 120 mpirun --oversubscribe -np 3 "$out/mpi-example" 2>&1) || fail "mpi-example: $log"
  [ "$log" = "y[999] = 1000" ] || fail "mpi-example printed: $log"
  say "mpi-example (README's, pkg-config tandem-mpi, 3 ranks): $log"
fi
say "pkg-config (shared, static), CMake and meson subproject: all built and ran"
