#!/usr/bin/env bash
# Builds librmsnorm (cpp/: the AOT-compiled kernels, the library, rmsnorm-cpp-bench) and the
# torch ops (rmsnorm/pytorch/csrc), installs both into rmsnorm/_native, and runs librmsnorm's
# GoogleTest suite through CTest, then the example against the installed library, then the
# suite again in a sanitizer build (AddressSanitizer and UndefinedBehaviorSanitizer, any report
# a failure; without the GPU kernels: the CPU reference, validation and the GPU entry points'
# refusals, seconds; RMSNORM_CPP_SANITIZE=0 skips it). The AOT step compiles the kernels
# for $RMSNORM_CUDA_ARCHS (default 90: the CI's arch and the H200's) with the project's Python
# ($PY of scripts/env.sh). Build folders: $RMSNORM_CPP_BUILD (default build/cpp) and, for the
# sanitizers, $RMSNORM_CPP_BUILD-sanitize. GoogleTest comes from Debian's libgtest-dev:
# installed here on first use where apt-get can (CI); where it cannot (a machine without
# network or root), the library is still built, the C++ tests are reported as skipped,
# loudly, and the exit status is 0.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${RMSNORM_CPP_BUILD:-$ROOT/build/cpp}
# shellcheck source=env.sh
source "$ROOT/scripts/env.sh"

have_gtest() { [ -e /usr/include/gtest/gtest.h ] || [ -e /usr/local/include/gtest/gtest.h ]; }

if ! command -v cmake >/dev/null; then
    echo "rmsnorm: C++ tests SKIPPED: cmake not found" >&2
    exit 0
fi
# Debian's mirror answering within seconds is the sign apt can work (the GPU machine has no
# network: it would wait on apt's timeouts); a failed install is not retried (the marker).
marker="$(dirname "$BUILD")/.gtest-install-failed"
mirror_reachable() {
    local url host port
    url=$(grep -hE '^[[:space:]]*(deb|URIs:)' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
              /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -oE 'https?://[^/ ]+' | head -n 1)
    url=${url:-http://deb.debian.org}
    host=${url#*://}
    port=80
    [ "${url%%://*}" = https ] && port=443
    timeout 5 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null
}
if ! have_gtest && [ ! -e "$marker" ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] &&
    mirror_reachable; then
    echo "rmsnorm: installing libgtest-dev (first use)" >&2
    timeout 30 apt-get install -y -q libgtest-dev >/dev/null 2>&1 ||
        { timeout 30 apt-get update -q >/dev/null 2>&1 &&
          timeout 60 apt-get install -y -q libgtest-dev >/dev/null 2>&1; } ||
        { mkdir -p "$(dirname "$marker")" && touch "$marker"; }
fi
tests=ON
have_gtest || tests=OFF
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
log="$BUILD.log"
mkdir -p "$(dirname "$BUILD")"
# Quiet when it works; the whole log when a step fails.
# A build folder configured from another source folder (cpp/ alone, before the package's
# CMakeLists.txt) is reconfigured from scratch; its AOT cache (aot/) is kept.
if [ -f "$BUILD/CMakeCache.txt" ] &&
    ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT" "$BUILD/CMakeCache.txt"; then
    rm -rf "$BUILD/CMakeCache.txt" "$BUILD/CMakeFiles"
fi
# The package's build (CMakeLists.txt: librmsnorm and the torch ops), installed in place into
# rmsnorm/_native, where `import rmsnorm` finds it as it would in an installed package. The
# AOT compile's progress goes to the terminal too (show_progress.sh): the first build is long.
echo "rmsnorm: building librmsnorm with its kernels for sm_${RMSNORM_CUDA_ARCHS:-90} and the" \
     "torch ops (log: $log)" >&2
if ! { cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
           -DRMSNORM_BUILD_TESTS=$tests -DRMSNORM_PYTHON="$(command -v "$PY")" \
           -DRMSNORM_GPU=ON -DRMSNORM_TORCH_OPS=ON \
           -DRMSNORM_CUDA_ARCHS="${RMSNORM_CUDA_ARCHS:-90}" &&
       cmake --build "$BUILD" -j "$(nproc)" &&
       cmake --install "$BUILD" --component python --prefix "$ROOT"; } 2>&1 |
       bash "$ROOT/scripts/show_progress.sh" "$log"; then
    cat "$log"
    echo "rmsnorm: the C++ build failed" >&2
    exit 1
fi
if [ $tests = OFF ]; then
    echo "rmsnorm: librmsnorm built; C++ tests SKIPPED: GoogleTest (libgtest-dev) is not" \
         "installed and cannot be installed here" >&2
    exit 0
fi
if ! ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)" >"$log" 2>&1; then
    cat "$log"
    exit 1
fi
# The library as an outside project uses it: installed, found by find_package, run.
RMSNORM_CPP_BUILD=$BUILD bash "$ROOT/scripts/example.sh"
# CTest's summary, and the tests it skipped (the GPU's, on a machine without one).
grep -E "tests passed|tests failed|\(Skipped\)" "$log" | sed -E 's/^[[:space:]]+/  /' |
    awk '/Skipped/ {n++; if (n > 3) next} {print} END {if (n > 3) print "  ... " n " skipped in all"}'

# Undefined behaviour passes ordinary tests unseen: the same suite with the sanitizers.
if [ "${RMSNORM_CPP_SANITIZE:-1}" != 0 ]; then
    san="$BUILD-sanitize"
    san_log="$san.log"
    if ! { cmake -S "$ROOT/cpp" -B "$san" "${generator[@]}" -DCMAKE_BUILD_TYPE=Debug \
               -DRMSNORM_GPU=OFF -DRMSNORM_BUILD_TESTS=ON -DRMSNORM_SANITIZE=address,undefined &&
           cmake --build "$san" -j "$(nproc)" &&
           ctest --test-dir "$san" --output-on-failure -j "$(nproc)"; } >"$san_log" 2>&1; then
        cat "$san_log"
        echo "rmsnorm: the C++ tests failed under the sanitizers (address,undefined)" >&2
        exit 1
    fi
    grep -E "tests passed|tests failed" "$san_log" | sed -E 's/^/  sanitizers: /'
fi
