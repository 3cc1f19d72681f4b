"""Launch sweep of the quantized forward (GPU): the table's launch of the plain forward beside
variants with more warps per row, the weight re-read or held, rows kept in their storage
dtype and fewer programs per SM, for each width, mode and op; every launch is checked bit for bit against the table's
before it is timed.

    python -m rmsnorm_tools.quant_sweep --shapes 32768x2048 16384x4096 --json sweep.json

It measures what rmsnorm.launch.configs.quantized_launch derives from the table
(docs/PERFORMANCE.md, "Quantized output"): the quantized kernels hold more per element than
the plain forward (the row's max, its scale, the quotient), so the plain forward's launch
leaves them short of registers or of issue slots. `--caps 128 96 80 64` adds the derived
launch under each register cap (Launch.max_registers: more programs per SM, against spills);
`--narrow` times only the table's launch, the derived one, its caps and its weight flipped.
"""

import argparse
import dataclasses
import json

import torch

from rmsnorm.launch import configs, quant
from rmsnorm_tools import bench
from rmsnorm_tools.bench import EPS, check_device, copy_gbps, make_inputs, moved_bytes, \
    parse_shape, prog_name, quant_kwargs

SHAPES = [(32768, 2048), (16384, 4096), (9362, 7168), (8192, 8192), (4096, 16384)]
MODES = ("static", "token", "group128")


def candidates(base, derived, group, caps=(), narrow=False):
    """The table's launch first, the quantized forward's own (configs.quantized_launch)
    second, then the derived launch under each register cap and with its weight held or
    re-read the other way, then (unless narrow) the table's variants (deduplicated, each a
    tile or loop launch whose tiles hold whole groups)."""
    out = [base, derived]
    out += [dataclasses.replace(derived, max_registers=cap) for cap in caps]
    if derived.path == "tile":
        out.append(dataclasses.replace(derived, w_resident=not derived.w_resident))
    if not narrow:
        out += _table_variants(base, derived)
    unique = []
    for launch in out:
        if launch not in unique and not (group and launch.block_n % group):
            unique.append(launch)
    return unique


def _table_variants(base, derived):
    out = []
    elements = base.block_n * base.chunks * base.rows
    for factor in (2, 4):
        warps = base.num_warps * factor
        if warps <= 32 and elements // (32 * warps) >= 4:
            out.append(dataclasses.replace(base, num_warps=warps))
    if base.path == "tile":
        out.append(dataclasses.replace(base, w_resident=not base.w_resident))
        if base.rows > 1:
            out.append(dataclasses.replace(base, rows=base.rows // 2))
        if not base.keep_stored and base.block_n * base.chunks <= configs.widest_tile(2, True):
            out.append(dataclasses.replace(base, keep_stored=True))
        # The grid: one program per row, or fewer that each walk many rows, their loads
        # pipelined across rows (the same compiled kernel: no compile to time these).
        for launch in (base, derived):
            for per_sm in (1, 2, 4, 8):
                out.append(dataclasses.replace(launch, programs_per_sm=per_sm))
    return out


def sweep_case(op, m, n, mode, dtype, warmup, rep, caps=(), narrow=False):
    fused = op == "add_quant"
    x, r, w = make_inputs(op, m, n, dtype)
    kw = quant_kwargs((mode, "fp8"))
    name = str(dtype).replace("torch.bfloat16", "bf16")
    base = configs.forward_launch(n, dtype.itemsize, fused, dtype.itemsize, dtype=name)
    scales = quant.SCALES[quant.mode(kw.get("scale"), kw.get("group_size"))]
    derived = configs.forward_launch(n, dtype.itemsize, fused, dtype.itemsize, dtype=name,
                                     quantized=scales)

    def call(launch):  # not in place: the residual is only read
        return quant.forward_quant(x, w, EPS, residual=r, launch=launch, **kw)

    want = call(base)
    nbytes = moved_bytes(op, m, n, dtype, (mode, "fp8"))
    rows = []
    for launch in candidates(base, derived, kw.get("group_size"), caps, narrow):
        try:
            got = call(launch)
            same = all(torch.equal(a.view(torch.uint8) if a.dtype.itemsize == 1 else a,
                                   b.view(torch.uint8) if b.dtype.itemsize == 1 else b)
                       for a, b in zip(got, want) if a is not None)
            ms = bench.bench_ms(lambda: call(launch), warmup, rep)
        except Exception as e:  # a launch the compiler refuses is reported, not fatal
            rows.append(dict(launch=dataclasses.asdict(launch), error=str(e)[:200]))
            continue
        rows.append(dict(launch=dataclasses.asdict(launch), us=ms * 1e3, same=same,
                         gbps=nbytes / ms / 1e6, table=launch == base,
                         quantized=launch == derived))
    return rows


def result_line(op, m, n, mode, ceiling, rows):
    """The table's launch, the quantized forward's own and the fastest of those that keep
    the table's bits, in % of the copy."""
    def pct(row):
        return f"{100 * row['gbps'] / ceiling:5.1f}%" if "us" in row else "error"

    keeping = [r for r in rows if r.get("same")]
    best = min(keeping, key=lambda r: r["us"]) if keeping else None
    what = "" if best is None else " ".join(
        f"{k}={best['launch'][k]}" for k in ("num_warps", "rows", "w_resident", "keep_stored",
                                             "programs_per_sm", "max_registers"))
    table = next((r for r in rows if r.get("table")), {})
    derived = next((r for r in rows if r.get("quantized")), {})
    return (f"{op:9} {m:>6}x{n:<6} {mode:8} table {pct(table)}  quantized {pct(derived)}  "
            f"best of the same bits {pct(best) if best else '-'} ({what}); "
            f"{sum(1 for r in rows if r.get('same') is False)} of {len(rows)} change the bits")


def main(argv=None):
    p = argparse.ArgumentParser(prog=prog_name("rmsnorm_tools.quant_sweep"),
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", nargs="+", default=["quant", "add_quant"],
                   choices=["quant", "add_quant"])
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--shapes", nargs="+", type=parse_shape, default=SHAPES)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rep", type=int, default=40)
    p.add_argument("--caps", nargs="*", type=int, default=[],
                   help="register caps to time the derived launch under (0: none)")
    p.add_argument("--narrow", action="store_true",
                   help="only the table's launch, the derived one, its caps, its weight flip")
    p.add_argument("--json")
    a = p.parse_args(argv)
    check_device(p.prog)
    dtype = torch.bfloat16
    results = []
    for op in a.op:
        for m, n in a.shapes:
            ceiling = copy_gbps(moved_bytes(op, m, n, dtype, ("token", "fp8")), a.warmup, a.rep)
            for mode in a.modes:
                rows = sweep_case(op, m, n, mode, dtype, a.warmup, a.rep, a.caps, a.narrow)
                results.append(dict(op=op, M=m, N=n, mode=mode, copy_gbps=ceiling, rows=rows))
                print(result_line(op, m, n, mode, ceiling, rows), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
