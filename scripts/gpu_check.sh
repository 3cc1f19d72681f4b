#!/usr/bin/env bash
# One call on the GPU machine (the `device` tool): the steps named, in order, each under a
# time limit. Logs, JSON and the tables go to $OUT; a short summary is printed last.
#   scripts/gpu_check.sh [tests] [tests_triton] [suite] [sweep] [bench] [bench_more]
#                        [bench_bwd] [overhead] [demo] [cpp] [cbench] [sanitize] [install]
#                        [vendors]
#   (default: tests suite).
#   tests: the whole suite (scripts/test.sh, RMSNORM_REQUIRE_GPU=1, pytest on TEST_JOBS
#   processes, default 8; about 310 s on the H200, C++ build and tests included).
#   tests_triton: pytest again with RMSNORM_KERNELS=triton (every CUDA call through the Python
#   launcher; after tests, whose build it uses). install: scripts/offline_install_check.sh
#   (pip install of a copy of the checkout into a fresh venv, no network: the build backend's
#   wheels carried in .whl). suite: rmsnorm_tools.bench --suite against the committed baseline
#   (BASELINE), with its report (scripts/suite_report.py). cpp: librmsnorm's build, ctest,
#   the example, the CPU suite under ASan/UBSan (scripts/test_cpp.sh) and the Python tests of
#   the library (test_clib, test_compiled_path). cbench: rmsnorm-cpp-bench $CBENCH_ARGS (default:
#   the forward, fused add and backward sweeps, bf16) and its --overhead. sanitize: the C++
#   GPU tests under compute-sanitizer memcheck and racecheck. vendors: rmsnorm-compare on
#   vLLM's and FlashInfer's kernels, rmsnorm_tools.vendor_bits and vendor_speed (carry
#   build/peers: docs/DEVELOPING.md, "The vendors' kernels beside rmsnorm").
#   A carried AOT cache (build/aotcarry: python -m rmsnorm.aot.carry, or it packed as
#   build/aotcarry.tar.xz) is put in place first.
#   Arguments of the python tools: SWEEP_ARGS, BENCH_ARGS, BENCH_MORE_ARGS, BENCH_BWD_ARGS
#   (default: backward and forward+backward, bf16, against torch eager and torch.compile);
#   limits in seconds: TEST_TIMEOUT, SUITE_TIMEOUT, SWEEP_TIMEOUT, BENCH_TIMEOUT (each bench
#   step).
# $OUT gets run.log (the tools' stderr, with every row as it is measured), tests.log,
# tests-triton.log, install.log,
# demo.log, tables.md (each step's table), suite.json and suite-report.md, sweep.json (and
# sweep-2.json ... for more sweeps: SWEEP_ARGS separates them with ";") and
# <bench step>.json; the C++ steps add cpp.log, cbench.json and sanitize.log.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/rmsnorm-out}
mkdir -p "$OUT"
steps=${*:-tests suite}
if [ -f build/aotcarry.tar.xz ]; then
    # The same, packed (tar cJf build/aotcarry.tar.xz -C build aotcarry): the cubins of every
    # kernel (3668 per arch) exceed what a call may carry; packed they take a tenth.
    mkdir -p build/cpp/aot && rm -rf build/cpp/aot/cache build/cpp/aot/aotcarry &&
        tar xJf build/aotcarry.tar.xz -C build/cpp/aot && mv build/cpp/aot/aotcarry build/cpp/aot/cache
elif [ -d build/aotcarry ]; then
    # A local build's kernels (rmsnorm.aot.carry), carried with the call: not compiled again.
    mkdir -p build/cpp/aot && rm -rf build/cpp/aot/cache && cp -r build/aotcarry build/cpp/aot/cache
fi
log="$OUT/run.log"
tables="$OUT/tables.md"
step_out=$(mktemp)
trap 'rm -f "$step_out"' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import torch, triton, numpy
print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)"
summary=()
bench_bwd_args="--op bwd fwdbwd --dtype bf16 --peers eager compile"

# A step's table (the tool's stdout, rc its exit status): appended to tables.md and kept for
# the summary. A tool cut short by its time limit still leaves its rows in run.log.
add_table() {
    local title="$1 ($((SECONDS - t0)) s)"
    case $rc in
        0) ;;
        124) title+=", timed out: the rows done are in run.log and its JSON" ;;
        *) title+=", exit $rc: see run.log" ;;
    esac
    { echo "## $title"; cat "$step_out"; echo; } >>"$tables"
    summary+=("$title:" "$(cat "$step_out")")
}

# A command in a process group of its own, killed with whatever it leaves behind (pytest's
# workers after a timeout) and nothing else: `pkill -f pytest` also killed the shell running
# this script whenever the device call's command line named pytest. Its exit status.
in_group() {
    setsid "$@" &
    local pid=$!
    wait "$pid"
    local rc=$?
    kill -- "-$pid" 2>/dev/null
    return $rc
}

for step in $steps; do
    t0=$SECONDS
    case $step in
        tests) in_group env RMSNORM_REQUIRE_GPU=1 timeout "${TEST_TIMEOUT:-420}" \
                   bash scripts/test.sh -q -n "${TEST_JOBS:-8}" -rs -p no:cacheprovider \
                   --durations=8 >"$OUT/tests.log" 2>&1
               rc=$?
               # The exit status too: pytest's line is last even when the C++ step failed.
               status=""
               [ $rc -ne 0 ] && status=", exit $rc: see tests.log"
               summary+=("tests ($((SECONDS - t0)) s$status): $(tail -n 1 "$OUT/tests.log")") ;;
        tests_triton)
               in_group env RMSNORM_KERNELS=triton RMSNORM_REQUIRE_GPU=1 \
                   timeout "${TEST_TIMEOUT:-420}" python3 -m pytest tests -q \
                   -n "${TEST_JOBS:-8}" -rs -p no:cacheprovider --durations=8 \
                   >"$OUT/tests-triton.log" 2>&1
               rc=$?
               status=""
               [ $rc -ne 0 ] && status=", exit $rc: see tests-triton.log"
               summary+=("tests, RMSNORM_KERNELS=triton ($((SECONDS - t0)) s$status):"
                         "$(tail -n 1 "$OUT/tests-triton.log")") ;;
        install) timeout "${INSTALL_TIMEOUT:-300}" bash scripts/offline_install_check.sh \
                     >"$OUT/install.log" 2>&1
                 rc=$?
                 summary+=("install ($((SECONDS - t0)) s, exit $rc):"
                           "$(grep '^rmsnorm: offline install' "$OUT/install.log")") ;;
        suite) baseline=${BASELINE:-docs/results/h200-baseline.json}
               timeout "${SUITE_TIMEOUT:-240}" python3 -m rmsnorm_tools.bench --suite \
                   --json "$OUT/suite.json" --baseline "$baseline" >"$OUT/suite.md" 2>>"$log"
               rc=$?
               python3 scripts/suite_report.py "$OUT/suite.json" \
                   --peers docs/results/h200-peers.json >"$OUT/suite-report.md" 2>>"$log"
               { sed -n '/^| op | dtype | 2^26/,/^$/p' "$OUT/suite-report.md"
                 sed -n '/^baseline /,$p' "$OUT/suite.md"; } >"$step_out"
               add_table suite ;;
        sweep) # Several sweeps in one call: SWEEP_ARGS="--op fwd ... ; --op bwd ...", each
               # under SWEEP_TIMEOUT, into sweep.json, sweep-2.json, ...
               IFS=';' read -ra sweeps <<<"${SWEEP_ARGS:-}"
               [ ${#sweeps[@]} -eq 0 ] && sweeps=("")
               for i in "${!sweeps[@]}"; do
                   t0=$SECONDS
                   json="$OUT/sweep.json"
                   [ "$i" -gt 0 ] && json="$OUT/sweep-$((i + 1)).json"
                   timeout "${SWEEP_TIMEOUT:-300}" python3 -m rmsnorm_tools.sweep ${sweeps[$i]} \
                       --json "$json" >"$step_out" 2>>"$log"
                   rc=$?; add_table "sweep ${sweeps[$i]:-(defaults)} -> $(basename "$json")"
               done ;;
        bench|bench_more|bench_bwd)
               case $step in
                   bench) args=${BENCH_ARGS:-} ;;
                   bench_more) args=${BENCH_MORE_ARGS:-} ;;
                   bench_bwd) args=${BENCH_BWD_ARGS:-$bench_bwd_args} ;;
               esac
               timeout "${BENCH_TIMEOUT:-300}" python3 -m rmsnorm_tools.bench $args \
                   --json "$OUT/$step.json" >"$step_out" 2>>"$log"
               rc=$?; add_table "$step" ;;
        vendors) # vLLM's and FlashInfer's kernels (build/peers or RMSNORM_PEERS): rmsnorm-compare
                 # on each non-quantized one, vendor_bits, vendor_speed (docs/DEVELOPING.md)
                 for c in "vllm_rms_norm --convention out_first" \
                          "vllm_fused_add_rms_norm --convention out_first --residual" \
                          "flashinfer_rmsnorm --convention inplace" \
                          "flashinfer_fused_add_rmsnorm --convention inplace --residual" \
                          "flashinfer_gemma_rmsnorm --convention inplace --offset 1" \
                          "flashinfer_gemma_fused_add_rmsnorm --convention inplace --residual --offset 1"; do
                     name=${c%% *}
                     timeout 60 python3 -m rmsnorm.compare \
                         --impl "rmsnorm_tools.vendor_candidates:$name" ${c#* } \
                         --weight-dtype input --device cuda --shapes 40x64 256x4096 \
                         --json "$OUT/compare-$name.json" >"$OUT/compare-$name.txt" 2>&1
                     echo "compare $name (exit $?): $(tail -n 1 "$OUT/compare-$name.txt")"
                 done >"$step_out"
                 timeout "${BENCH_TIMEOUT:-300}" python3 -m rmsnorm_tools.vendor_bits \
                     --json "$OUT/vendor_bits.json" >"$OUT/vendor_bits.txt" 2>>"$log"
                 sed -n '/^## against/,$p' "$OUT/vendor_bits.txt" >>"$step_out"
                 timeout "${BENCH_TIMEOUT:-300}" python3 -m rmsnorm_tools.vendor_speed \
                     >>"$step_out" 2>>"$log"
                 rc=$?; add_table vendors ;;
        overhead) python3 -m rmsnorm_tools.bench --overhead >"$step_out" 2>>"$log"
                  rc=$?; add_table overhead ;;
        cpp) { bash scripts/test_cpp.sh && python3 -m pytest -q -p no:cacheprovider \
                   tests/native/test_clib.py tests/native/test_compiled_path.py; } \
                 >"$OUT/cpp.log" 2>&1
             summary+=("cpp ($((SECONDS - t0)) s): $(grep -E "tests passed|tests failed" \
                       "$OUT/cpp.log" | tr -s ' \n' ' '); $(grep -E "^(OK|MISMATCH)|no GPU" \
                       "$OUT/cpp.log"); $(tail -n 1 "$OUT/cpp.log")") ;;
        cbench) { timeout "${BENCH_TIMEOUT:-300}" build/cpp/bench/rmsnorm-cpp-bench \
                      ${CBENCH_ARGS:---op fwd add bwd} --json "$OUT/cbench.json" &&
                  build/cpp/bench/rmsnorm-cpp-bench --overhead; } >"$step_out" 2>>"$log"
                rc=$?; add_table cbench ;;
        sanitize) for tool in memcheck racecheck; do
                      timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool $tool \
                          --error-exitcode 9 build/cpp/tests/rmsnorm_tests \
                          --gtest_filter="${SANITIZE_FILTER:-Gpu*:*Gpu*:-*MoreThan2To31*}" \
                          >>"$OUT/sanitize.log" 2>&1
                      summary+=("sanitize $tool: exit $? ($(grep -E "ERROR SUMMARY" \
                                "$OUT/sanitize.log" | tail -n 1))")
                  done ;;
        demo) bash scripts/demo.sh >"$OUT/demo.log" 2>&1
              summary+=("demo ($((SECONDS - t0)) s):" "$(cat "$OUT/demo.log")") ;;
        *) summary+=("$step: no such step") ;;
    esac
done
grep -hE "^(FAILED|ERROR)" "$OUT/tests.log" 2>/dev/null | head -30
tail -n 5 "$log" 2>/dev/null | grep -iE "error|traceback" && echo "(see run.log)"
printf '%s\n' "${summary[@]}"
