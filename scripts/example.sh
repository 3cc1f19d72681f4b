#!/usr/bin/env bash
# Installs librmsnorm from its build (scripts/test_cpp.sh makes it) into build/install, then
# builds examples/cpp as an outside project would (find_package(rmsnorm)) and runs it.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${RMSNORM_CPP_BUILD:-$ROOT/build/cpp}
PREFIX=$ROOT/build/install
log=$ROOT/build/example.log
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if ! { cmake --install "$BUILD" --prefix "$PREFIX" &&
       cmake -S "$ROOT/examples/cpp" -B "$ROOT/build/example" "${generator[@]}" \
           -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX" &&
       cmake --build "$ROOT/build/example"; } >"$log" 2>&1; then
    cat "$log"
    echo "rmsnorm: building examples/cpp against the installed library failed" >&2
    exit 1
fi
"$ROOT/build/example/rmsnorm_example"
