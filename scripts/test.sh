#!/usr/bin/env bash
# The whole test suite: librmsnorm's C++ tests (scripts/test_cpp.sh), the package installed
# with pip into a fresh venv (scripts/install_check.sh; skipped without a network), then the
# pytest suite. Without a GPU the kernels run in Triton's interpreter on the CPU.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"
# pytest last, so its summary is the last line; any step failing fails the run.
cpp=0 install=0
bash scripts/test_cpp.sh || cpp=$?
bash scripts/install_check.sh || install=$?
"$PY" -m pytest tests "$@" || exit $?
[ $cpp -ne 0 ] && exit $cpp
exit $install
