"""Tuning sweep (GPU): times launch variants around the table's choice, shape by shape.

    python -m rmsnorm.sweep --op fwd add --shapes 16384x4096 1024x65536 --json sweep.json

Coordinate descent from the table's launch: first the tile shape (rows per program, warps,
weight in registers or re-read, pipelining stages), then programs per SM; the five fastest are
timed again, longer. Each launch is
checked against the recipe before it is timed. Results feed rmsnorm/configs.py by hand.
"""

import argparse
import dataclasses
import json
import sys

import torch

from rmsnorm import configs, ops, reference
from rmsnorm.bench import DTYPES, EPS, bench_ms, copy_gbps, make_inputs, moved_elements, \
    parse_shape

DEFAULT_SHAPES = [(524288, 128), (65536, 1024), (32768, 2048), (16384, 4096), (16384, 8192),
                  (8192, 16384), (4096, 32768), (1024, 65536), (256, 262144)]


def _warps_for(elements):
    """Warp counts giving 8 to 64 elements per thread (16-byte accesses or more)."""
    return [w for w in (1, 2, 4, 8, 16, 32) if 8 <= elements / (32 * w) <= 64]


def shape_candidates(base, n):
    """Launches around the table's: tile shape (rows per program, warps, weight in registers,
    pipelining depth); for rows longer than a tile, the loop's tile width and depth."""
    out = []
    if base.path == "tile":
        for rows in sorted({max(1, base.rows // 2), base.rows, base.rows * 2}):
            if rows * base.block_n > 32768:
                continue
            for warps in _warps_for(rows * base.block_n):
                for wres in ({True, False} if base.block_n >= 2048 else {True}):
                    for stages in (1, 2, 3):
                        out.append(dataclasses.replace(base, rows=rows, num_warps=warps,
                                                       w_resident=wres, num_stages=stages))
        return out
    for bn in (4096, 8192, 16384, 32768):
        for warps in _warps_for(bn):
            for stages in (1, 2, 3):
                out.append(configs.Launch("loop", bn, 1, warps, stages, 2, False))
    return out


PROGRAMS_PER_SM = {"tile": (4, 8, 16, 32, 64, 128), "loop": (1, 2, 3, 4, 6)}
START_PROGRAMS_PER_SM = {"tile": 32, "loop": 2}


def run(op, x, r, w, launch):
    return ops.forward(x, w, EPS, residual=r, launch=launch)


def check(op, x, r, w, launch):
    y, _, _ = run(op, x, r, w, launch)
    src = reference.residual_add(x, r) if r is not None else x
    ref = reference.contract_rms_norm(src, w, EPS)[0]
    bad = (y.float() - ref.float()).abs() > 0.02 * ref.float().abs() + 1e-3
    if bad.any():
        raise AssertionError(f"{launch} gives wrong results at {int(bad.sum())} elements")


def sweep_shape(op, m, n, dtype, warmup, rep, log):
    x, r, w = make_inputs(op, m, n, dtype)
    nbytes = moved_elements(op, m, n) * x.element_size()
    copy = copy_gbps(nbytes, warmup, rep)
    timed = {}

    def measure(launch):
        if launch not in timed:
            check(op, x, r, w, launch)
            timed[launch] = bench_ms(lambda: run(op, x, r, w, launch), warmup, rep)
            gbps = nbytes / timed[launch] / 1e6
            print(f"  {op} {m}x{n} {launch} {gbps:.0f} GB/s ({100 * gbps / copy:.1f}%)",
                  file=log, flush=True)
        return timed[launch]

    def try_measure(launch):
        try:
            return measure(launch)
        except Exception as e:  # e.g. out of shared memory: not a candidate
            print(f"  {launch}: {type(e).__name__}: {str(e)[:120]}", file=log)
            return float("inf")

    table = configs.forward_launch(n, x.element_size(), op == "add")
    best = table
    measure(best)
    start = dataclasses.replace(table, programs_per_sm=START_PROGRAMS_PER_SM[table.path])
    for cand in shape_candidates(start, n):
        if try_measure(cand) < measure(best):
            best = cand
    for ppsm in PROGRAMS_PER_SM[best.path]:
        cand = dataclasses.replace(best, programs_per_sm=ppsm)
        if try_measure(cand) < measure(best):
            best = cand
    # Re-time the five fastest longer: single timings differ by a few percent.
    finalists = sorted(timed, key=timed.get)[:5]
    for launch in finalists:
        timed[launch] = min(timed[launch], bench_ms(lambda: run(op, x, r, w, launch), warmup,
                                                    3 * rep))
    best = min(finalists + [table], key=timed.get)
    del x, r, w
    torch.cuda.empty_cache()

    def gbps(launch):
        return nbytes / timed[launch] / 1e6

    return {"op": op, "M": m, "N": n, "dtype": str(dtype), "copy_gbps": copy,
            "table": dataclasses.asdict(table), "table_gbps": gbps(table),
            "best": dataclasses.asdict(best), "best_gbps": gbps(best),
            "all": [dict(dataclasses.asdict(k), gbps=gbps(k)) for k in timed]}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m rmsnorm.sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", nargs="+", choices=["fwd", "add"], default=["fwd", "add"])
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    p.add_argument("--shapes", nargs="+", type=parse_shape, default=DEFAULT_SHAPES,
                   metavar="MxN")
    p.add_argument("--warmup", type=float, default=10)
    p.add_argument("--rep", type=float, default=40)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("rmsnorm.sweep needs a CUDA GPU")
    results = []
    for op in args.op:
        for m, n in args.shapes:
            res = sweep_shape(op, m, n, DTYPES[args.dtype], args.warmup, args.rep, sys.stderr)
            results.append(res)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(results, f, indent=1)
    print("| op | M x N | copy GB/s | table GB/s (%) | best GB/s (%) | best launch |")
    print("|---|---|---|---|---|---|")
    for res in results:
        b = res["best"]
        print(f"| {res['op']} | {res['M']} x {res['N']} | {res['copy_gbps']:.0f} | "
              f"{res['table_gbps']:.0f} ({100 * res['table_gbps'] / res['copy_gbps']:.1f}) | "
              f"{res['best_gbps']:.0f} ({100 * res['best_gbps'] / res['copy_gbps']:.1f}) | "
              f"{b['path']} bn={b['block_n']} rows={b['rows']} w={b['num_warps']} "
              f"st={b['num_stages']} ppsm={b['programs_per_sm']} wres={b['w_resident']} |")


if __name__ == "__main__":
    main()
