#!/usr/bin/env bash
# The whole test suite: librmsnorm's C++ tests (scripts/test_cpp.sh), then the pytest suite.
# Without a GPU the kernels run in Triton's interpreter on the CPU.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"
# C++ first, Python last, so pytest's summary is the last line; either failing fails the run.
cpp=0
bash scripts/test_cpp.sh || cpp=$?
"$PY" -m pytest tests "$@" || exit $?
exit $cpp
