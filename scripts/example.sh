#!/usr/bin/env bash
# Installs librmsnorm from its build (scripts/test_cpp.sh makes it; RMSNORM_CPP_BUILD, default
# build/cpp) into <build>/example/install, then builds examples/cpp there as an outside project
# would (find_package(rmsnorm)) and runs it. Everything it writes stays under <build>/example,
# which it creates; the log is <build>/example/example.log.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${RMSNORM_CPP_BUILD:-$ROOT/build/cpp}
WORK=$BUILD/example
PREFIX=$WORK/install
log=$WORK/example.log
mkdir -p "$WORK"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if ! { cmake --install "$BUILD" --prefix "$PREFIX" &&
       cmake -S "$ROOT/examples/cpp" -B "$WORK/build" "${generator[@]}" \
           -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX" &&
       cmake --build "$WORK/build"; } >"$log" 2>&1; then
    cat "$log"
    echo "rmsnorm: building examples/cpp against the installed library failed" >&2
    exit 1
fi
"$WORK/build/rmsnorm_example"
