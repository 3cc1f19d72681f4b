#!/usr/bin/env bash
# Multi-GPU check (DTensor, FSDP2, sequence parallelism) on a machine with two or more GPUs, in
# one call of about 3-5 minutes:
#   1. tests/api/test_distributed.py with NCCL on two GPUs (RMSNORM_DIST_DEVICE=cuda);
#   2. training throughput of a small Llama (hidden 2048, 4 layers, seq 4096, bf16) on two
#      GPUs, rmsnorm against HF's LlamaRMSNorm, under sequence parallelism (+ FSDP2 on a
#      data-parallel dimension of 1) and under FSDP2 alone (scripts/multi_gpu_bench.py, one
#      torchrun per run). Without transformers the model is the script's own Llama-shaped one
#      and the baseline HF's norm recipe in plain PyTorch (the table says which).
#   scripts/multi_gpu_check.sh [tests] [bench]          (default: both)
# Environment: OUT (default /tmp/rmsnorm-multi-gpu) gets tests.log, bench.log, bench.jsonl and
# tables.md; BENCH_ARGS go to every benchmark run (e.g. "--layers 8 --steps 20");
# BENCH_MODES (default "sp fsdp"); TEST_TIMEOUT (240 s), BENCH_TIMEOUT (120 s per run);
# RMSNORM_PYTHON picks the interpreter (default python3). The table is printed last.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# NVLink SHARP (multicast) stays off on the lent machines.
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/rmsnorm-multi-gpu}
PY=${RMSNORM_PYTHON:-python3}
mkdir -p "$OUT"
steps=${*:-tests bench}
summary=()

nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader || true
"$PY" - <<'EOF'
import torch, triton
try:
    import transformers
    hf = "transformers " + transformers.__version__
except ImportError:
    hf = "no transformers (the benchmark uses its own Llama-shaped model)"
print("torch", torch.__version__, "triton", triton.__version__, "GPUs", torch.cuda.device_count(),
      "NCCL", torch.cuda.nccl.version() if torch.cuda.is_available() else None, "|", hf)
EOF
gpus=$("$PY" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
if [ "$gpus" -lt 2 ]; then
    echo "multi_gpu_check: needs two GPUs, found $gpus: nothing run"
    exit 2
fi

for step in $steps; do
    t0=$SECONDS
    case $step in
        tests)
            RMSNORM_DIST_DEVICE=cuda timeout "${TEST_TIMEOUT:-240}" "$PY" -m pytest -q -rs \
                -p no:cacheprovider --durations=5 tests/api/test_distributed.py \
                >"$OUT/tests.log" 2>&1
            rc=$?
            grep -hE "^(FAILED|ERROR)" "$OUT/tests.log" | head -20
            summary+=("tests (exit $rc, $((SECONDS - t0)) s): $(tail -n 1 "$OUT/tests.log")") ;;
        bench)
            : >"$OUT/bench.jsonl"
            failed=()
            for mode in ${BENCH_MODES:-sp fsdp}; do
                for norm in hf rmsnorm; do
                    echo "== $mode $norm" >>"$OUT/bench.log"
                    timeout "${BENCH_TIMEOUT:-120}" "$PY" -m torch.distributed.run --standalone \
                        --nproc_per_node=2 scripts/multi_gpu_bench.py --mode "$mode" \
                        --norm "$norm" ${BENCH_ARGS:-} --json "$OUT/bench.jsonl" \
                        >>"$OUT/bench.log" 2>&1 || failed+=("$mode/$norm (exit $?)")
                done
            done
            "$PY" scripts/multi_gpu_bench.py --table "$OUT/bench.jsonl" >"$OUT/tables.md"
            failures=${failed[*]:+, failed: ${failed[*]} (see bench.log)}
            summary+=("bench ($((SECONDS - t0)) s)$failures:" "$(cat "$OUT/tables.md")") ;;
        *) summary+=("$step: no such step") ;;
    esac
done
printf '%s\n' "${summary[@]}"
