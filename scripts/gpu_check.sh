#!/usr/bin/env bash
# One call on the GPU machine (the `device` tool): the steps named, in order, each under a
# time limit. Logs and tables go to $OUT; a short summary is printed last.
#   scripts/gpu_check.sh [tests] [sweep] [bench] [bench_more] [overhead] [demo]
#   (default: tests bench). Arguments of the python tools: SWEEP_ARGS, BENCH_ARGS,
#   BENCH_MORE_ARGS; limits in seconds: TEST_TIMEOUT, SWEEP_TIMEOUT, BENCH_TIMEOUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/rmsnorm-out}
mkdir -p "$OUT"
steps=${*:-tests bench}
log="$OUT/run.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)"
summary=()
for step in $steps; do
    t0=$SECONDS
    case $step in
        tests) timeout "${TEST_TIMEOUT:-300}" bash scripts/test.sh -q -p no:cacheprovider \
                   --durations=8 >"$OUT/tests.log" 2>&1
               summary+=("tests ($((SECONDS - t0)) s): $(tail -n 1 "$OUT/tests.log")") ;;
        sweep) timeout "${SWEEP_TIMEOUT:-300}" python3 -m rmsnorm.sweep ${SWEEP_ARGS:-} \
                   --json "$OUT/sweep.json" >"$OUT/sweep.md" 2>>"$log"
               summary+=("sweep ($((SECONDS - t0)) s):" "$(cat "$OUT/sweep.md")") ;;
        bench|bench_more)
               if [ "$step" = bench ]; then args=${BENCH_ARGS:-}; else args=${BENCH_MORE_ARGS:-}; fi
               timeout "${BENCH_TIMEOUT:-300}" python3 -m rmsnorm.bench $args \
                   --json "$OUT/$step.json" >"$OUT/$step.md" 2>>"$log"
               summary+=("$step ($((SECONDS - t0)) s):" "$(cat "$OUT/$step.md")") ;;
        overhead) python3 -m rmsnorm.bench --overhead >"$OUT/overhead.md" 2>>"$log"
                  summary+=("overhead:" "$(cat "$OUT/overhead.md")") ;;
        demo) bash scripts/demo.sh >"$OUT/demo.log" 2>&1
              summary+=("demo ($((SECONDS - t0)) s):" "$(cat "$OUT/demo.log")") ;;
    esac
done
grep -hE "^(FAILED|ERROR)" "$OUT/tests.log" 2>/dev/null | head -30
tail -n 5 "$log" 2>/dev/null | grep -iE "error|traceback" && echo "(see run.log)"
printf '%s\n' "${summary[@]}"
