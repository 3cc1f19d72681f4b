#!/usr/bin/env bash
# One call on the GPU machine (the `device` tool): the steps named, in order, each under a
# time limit. Logs, JSON and the tables go to $OUT; a short summary is printed last.
#   scripts/gpu_check.sh [tests] [sweep] [bench] [bench_more] [bench_bwd] [overhead] [demo]
#   (default: tests bench). Arguments of the python tools: SWEEP_ARGS, BENCH_ARGS,
#   BENCH_MORE_ARGS, BENCH_BWD_ARGS (default: backward and forward+backward, bf16, against
#   torch eager and torch.compile); limits in seconds: TEST_TIMEOUT, SWEEP_TIMEOUT,
#   BENCH_TIMEOUT (each bench step).
# $OUT gets at most 8 files: run.log (the tools' stderr, with every row as it is measured),
# tests.log, demo.log, tables.md (each step's table), sweep.json and <bench step>.json.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/rmsnorm-out}
mkdir -p "$OUT"
steps=${*:-tests bench}
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

for step in $steps; do
    t0=$SECONDS
    case $step in
        tests) timeout "${TEST_TIMEOUT:-300}" bash scripts/test.sh -q -p no:cacheprovider \
                   --durations=8 >"$OUT/tests.log" 2>&1
               summary+=("tests ($((SECONDS - t0)) s): $(tail -n 1 "$OUT/tests.log")") ;;
        sweep) timeout "${SWEEP_TIMEOUT:-300}" python3 -m rmsnorm.sweep ${SWEEP_ARGS:-} \
                   --json "$OUT/sweep.json" >"$step_out" 2>>"$log"
               rc=$?; add_table sweep ;;
        bench|bench_more|bench_bwd)
               case $step in
                   bench) args=${BENCH_ARGS:-} ;;
                   bench_more) args=${BENCH_MORE_ARGS:-} ;;
                   bench_bwd) args=${BENCH_BWD_ARGS:-$bench_bwd_args} ;;
               esac
               timeout "${BENCH_TIMEOUT:-300}" python3 -m rmsnorm.bench $args \
                   --json "$OUT/$step.json" >"$step_out" 2>>"$log"
               rc=$?; add_table "$step" ;;
        overhead) python3 -m rmsnorm.bench --overhead >"$step_out" 2>>"$log"
                  rc=$?; add_table overhead ;;
        demo) bash scripts/demo.sh >"$OUT/demo.log" 2>&1
              summary+=("demo ($((SECONDS - t0)) s):" "$(cat "$OUT/demo.log")") ;;
        *) summary+=("$step: no such step") ;;
    esac
done
grep -hE "^(FAILED|ERROR)" "$OUT/tests.log" 2>/dev/null | head -30
tail -n 5 "$log" 2>/dev/null | grep -iE "error|traceback" && echo "(see run.log)"
printf '%s\n' "${summary[@]}"
