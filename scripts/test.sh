#!/usr/bin/env bash
# The whole test suite. Without a GPU the kernels run in Triton's interpreter on the CPU.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"
exec "$PY" -m pytest tests "$@"
