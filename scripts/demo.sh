#!/usr/bin/env bash
# The main job: rmsnorm against PyTorch, correctness and timing (GPU, or the CPU interpreter).
# Builds the native part first where the checkout has none (scripts/build_native.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
[ -e "$ROOT/rmsnorm/_native/librmsnorm_torch.so" ] || bash "$ROOT/scripts/build_native.sh"
exec "$PY" -m rmsnorm_tools.demo "$@"
