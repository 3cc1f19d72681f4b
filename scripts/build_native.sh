#!/usr/bin/env bash
# Builds the package's native part in place (CMakeLists.txt: librmsnorm and the torch ops,
# without librmsnorm's tests and benchmark) and installs it into rmsnorm/_native, where
# `import rmsnorm` finds it in a checkout. What pip install does for an installed package.
# The GPU kernels are compiled where torch is a CUDA build (for the local GPU's arch, else
# $RMSNORM_CUDA_ARCHS): minutes the first time, then cached in $RMSNORM_NATIVE_BUILD
# (default build/native). Quiet when it works but for the AOT compile's progress
# (show_progress.sh); the log when it does not.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
BUILD=${RMSNORM_NATIVE_BUILD:-$ROOT/build/native}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
archs=()
[ -n "${RMSNORM_CUDA_ARCHS:-}" ] && archs=(-DRMSNORM_CUDA_ARCHS="$RMSNORM_CUDA_ARCHS")
mkdir -p "$(dirname "$BUILD")"
echo "rmsnorm: building the native part into rmsnorm/_native (log: $BUILD.log)" >&2
if ! { cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
           -DRMSNORM_BUILD_TESTS=OFF -DRMSNORM_BUILD_BENCH=OFF -DRMSNORM_TORCH_OPS=ON \
           -DRMSNORM_PYTHON="$(command -v "$PY")" "${archs[@]}" &&
       cmake --build "$BUILD" -j "$(nproc)" &&
       cmake --install "$BUILD" --component python --prefix "$ROOT"; } 2>&1 |
       bash "$ROOT/scripts/show_progress.sh" "$BUILD.log"; then
    cat "$BUILD.log"
    echo "rmsnorm: building the native part failed" >&2
    exit 1
fi
