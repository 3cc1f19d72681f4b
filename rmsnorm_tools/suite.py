"""The benchmark suite and its baseline: a fixed set of cases that every change to the kernels
or the launch table is measured on (`rmsnorm-bench --suite`), and the comparison with a
committed run of it (`--baseline PATH`), so that a shape that falls is seen, whichever it is.

Cases: forward, fused add and backward at every width a model uses, with M x N = 2^26
elements (timed as single calls: the GPU time dwarfs the launch's host time) and 2^23
elements; decode (M of 1 to 256 rows at N = 2048, 4096, 8192); each in bf16, fp16 and fp32.
The 2^23 and decode cases take less GPU time than the Python launcher's host time per call,
so they are timed as GPU time per call of calls replayed from a CUDA graph: the kernels', not
the host's, which moves by a third between runs. Decode replays one input set, warm in L2 as
in a model's decode step ("graph"); the 2^23 cases cycle through input sets three times the
L2's size ("graph_hbm"), so that they measure HBM traffic as a large batch does. Every case is held
against a device-to-device copy of the same bytes timed the same way in the same run: "% of
copy" is what is compared, so that runs on one GPU model compare though its clocks move.
"""

import json

WIDTHS = (128, 256, 512, 768, 1024, 1536, 2048, 2304, 2560, 3072, 4096, 6144, 8192, 10240,
          12288, 16384, 32768, 65536, 131072, 262144)
ELEMENTS = (2 ** 26, 2 ** 23)
OPS = ("fwd", "add", "bwd")
DECODE_ROWS = (1, 4, 16, 64, 256)
DECODE_WIDTHS = (2048, 4096, 8192)
DECODE_OPS = ("fwd", "add")
DTYPES = ("bf16", "fp16", "fp32")
# A case whose % of copy falls by more than this against the baseline is a regression.
POINTS = 2.0


def throughput_shapes():
    """(M, N, timing) of the throughput cases."""
    return [(elements // n, n, "median" if elements == max(ELEMENTS) else "graph_hbm")
            for elements in ELEMENTS for n in WIDTHS]


def decode_shapes():
    return [(m, n) for n in DECODE_WIDTHS for m in DECODE_ROWS]


def cases(dtypes=DTYPES, ops=OPS):
    """(op, dtype name, M, N, timing) of the suite, timing "median" (do_bench), "graph" or
    "graph_hbm" (GPU time per call, replayed from a CUDA graph; rmsnorm_tools.bench.TIMERS)."""
    out = []
    for dtype in dtypes:
        out += [(op, dtype, m, n, timing) for op in ops for m, n, timing in throughput_shapes()]
        out += [(op, dtype, m, n, "graph") for op in DECODE_OPS if op in ops
                for m, n in decode_shapes()]
    return out


def key(row):
    return (row["op"], row["dtype"], row["M"], row["N"], row.get("timing", "median"))


def pct_copy(row):
    """rmsnorm's % of copy in a result row, or None where it failed."""
    return row["impls"].get("rmsnorm", {}).get("pct_copy")


def regressions(rows, baseline_rows, points=POINTS):
    """(key, baseline %, this run's %) of every case both runs measured whose % of copy fell
    by more than `points`; a case that now fails counts, with None as this run's %."""
    before = {key(r): pct_copy(r) for r in baseline_rows}
    out = []
    for row in rows:
        base = before.get(key(row))
        if base is None:
            continue
        now = pct_copy(row)
        if now is None or now < base - points:
            out.append((key(row), base, now))
    return out


def better_timing(first, second):
    """Of two timings of one case, the row whose rmsnorm % of copy is higher (a failure
    counts as lowest), with both figures in `timed_pct_copy`: the --baseline comparison times
    a case that fell once more and keeps the better, so only a loss both timings show
    counts."""
    def pct(row):
        value = pct_copy(row)
        return float("-inf") if value is None else value

    best = dict(max((first, second), key=pct))
    best["timed_pct_copy"] = [pct_copy(first), pct_copy(second)]
    return best


def load_rows(path):
    with open(path) as f:
        return json.load(f)["rows"]


def format_regressions(found, baseline_path, points=POINTS):
    if not found:
        return f"baseline {baseline_path}: no case fell by more than {points} points of copy"
    lines = [f"baseline {baseline_path}: {len(found)} cases fell by more than {points} points "
             "of copy", "| op | dtype | M x N | timing | baseline % | now % |",
             "|---|---|---|---|---|---|"]
    for (op, dtype, m, n, timing), base, now in found:
        now_text = "fails" if now is None else f"{now:.1f}"
        lines.append(f"| {op} | {dtype} | {m} x {n} | {timing} | {base:.1f} | {now_text} |")
    return "\n".join(lines)
