#!/usr/bin/env bash
# The whole test suite: librmsnorm's C++ tests (scripts/test_cpp.sh), the package installed
# with pip into a fresh venv (scripts/install_check.sh; skipped without a network), the same
# with each other Triton of the declared range and that release's kernel and AOT checks
# (scripts/triton_check.sh; skipped without a network), then the pytest suite. Without a GPU
# the kernels run in Triton's interpreter on the CPU.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"
# pytest last, so its summary is the last line; any step failing fails the run.
cpp=0 install=0 tritons=0
bash scripts/test_cpp.sh || cpp=$?
bash scripts/install_check.sh || install=$?
bash scripts/triton_check.sh || tritons=$?
"$PY" -m pytest tests "$@" || exit $?
[ $cpp -ne 0 ] && exit $cpp
[ $install -ne 0 ] && exit $install
exit $tritons
