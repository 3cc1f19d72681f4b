#!/usr/bin/env bash
# rmsnorm on every Triton of its declared range besides the one the suite runs on
# (requirements/other-tritons.txt; requirements/ci.txt pins the suite's). For each release:
# scripts/install_check.sh with it (a fresh venv with torch 2.13.0 and that triton, where
# `pip install` of the checkout must keep it, the demo, rmsnorm-compare and the looped kernels
# from the installed package), then in the venv it leaves: the interpreter tests of every
# kernel family (KERNEL_TESTS: plain, fused add, backward, quantized, split, the interpreter's
# fixes) and the AOT tests, and the AOT compile of a sample of the sm_90 specializations with
# the ABI check on each (python -m rmsnorm.aot.sample). A line per release with its times;
# logs in $RMSNORM_TRITON_LOGS (default build/triton-check). Skipped, exit 0, where pip cannot
# install (install_check.sh's test; no network: the GPU machine) or RMSNORM_SKIP_TRITON_CHECK=1.
# Called by scripts/test.sh; RMSNORM_TRITONS="3.8.0 3.9.0" picks releases.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOGS=${RMSNORM_TRITON_LOGS:-$ROOT/build/triton-check}
KERNEL_TESTS=(kernels/test_forward.py kernels/test_fused_add.py kernels/test_backward.py
              quant/test_quant.py quant/test_quant_layouts.py quant/test_quant_rounding.py
              kernels/test_split_forward.py kernels/test_split_backward.py
              kernels/test_chunked_tiles.py kernels/test_interpreter_compat.py
              kernels/test_interpreter_launches.py aot/test_triton_versions.py
              aot/test_aot.py aot/test_aot_abi.py)
say() { echo "rmsnorm: triton check: $*" >&2; }
if [ "${RMSNORM_SKIP_TRITON_CHECK:-0}" = 1 ]; then
    say "SKIPPED (RMSNORM_SKIP_TRITON_CHECK=1)"
    exit 0
fi
read -r -a tritons <<<"${RMSNORM_TRITONS:-$(grep -v '^#' "$ROOT/requirements/other-tritons.txt" | xargs)}"
pytest_pin=$(grep -m 1 '^pytest==' "$ROOT/requirements/ci.txt")
mkdir -p "$LOGS"
status=0
for triton in "${tritons[@]}"; do
    work=$(mktemp -d "${TMPDIR:-/tmp}/rmsnorm-triton.XXXXXX")
    log=$LOGS/triton-$triton.log
    t0=$SECONDS
    if ! RMSNORM_TRITON=$triton RMSNORM_INSTALL_KEEP=$work/kept \
            bash "$ROOT/scripts/install_check.sh" >"$log" 2>&1; then
        cat "$log" >&2
        say "triton $triton: FAILED: the install check (log: $log)"
        status=1
        rm -rf "$work" &
        continue
    fi
    if grep -q "install check: SKIPPED" "$log"; then
        say "SKIPPED: $(grep -m 1 'install check: SKIPPED' "$log" | sed 's/.*SKIPPED: //')"
        rm -rf "$work" &
        exit 0
    fi
    install_s=$((SECONDS - t0))
    venv=$work/kept/venv src=$work/kept/src
    run() { (cd "$src" && env -u PYTHONPATH -u TRITON_INTERPRET PATH="$venv/bin:$PATH" "$@"); }
    failed=()
    t1=$SECONDS
    run python -m pip install --quiet --disable-pip-version-check "$pytest_pin" >>"$log" 2>&1 ||
        failed+=("pip install $pytest_pin")
    # The suite's own choice without a GPU (tests/conftest.py): Triton's interpreter.
    run python -m pytest -q -p no:cacheprovider "${KERNEL_TESTS[@]/#/tests/}" >>"$log" 2>&1 ||
        failed+=("the kernel tests")
    tests_line=$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed)' "$log" | tail -n 1 |
                 tr -d '=' | sed 's/ in [0-9.]*s.*//' | xargs)
    tests_s=$((SECONDS - t1))
    t2=$SECONDS
    run python -m rmsnorm.aot.sample --arch 90 >>"$log" 2>&1 || failed+=("the AOT sample")
    aot_line=$(grep -m 1 '^rmsnorm.aot.sample: OK' "$log" |
               sed 's/^rmsnorm.aot.sample: OK: //; s/ compiled with triton [^ ]* in [^;]*;/ compiled;/')
    aot_s=$((SECONDS - t2))
    rm -rf "$work" </dev/null >/dev/null 2>&1 &
    if [ ${#failed[@]} -ne 0 ]; then
        tail -n 60 "$log" >&2
        say "triton $triton: FAILED: ${failed[*]} (log: $log)"
        status=1
        continue
    fi
    say "triton $triton: OK in $((SECONDS - t0)) s: installed and checked ($install_s s);" \
        "kernel and AOT tests under the interpreter: $tests_line ($tests_s s);" \
        "AOT sample: $aot_line ($aot_s s)"
done
exit $status
