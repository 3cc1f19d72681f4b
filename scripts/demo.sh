#!/usr/bin/env bash
# The main job: rmsnorm against PyTorch, correctness and timing (GPU, or the CPU interpreter).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec "$PY" -m rmsnorm_tools.demo "$@"
