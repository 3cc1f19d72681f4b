"""Tuning sweep (GPU): times launch variants around the table's choice, shape by shape.

    python -m rmsnorm_tools.sweep --op fwd add --shapes 16384x4096 1024x65536 --json sweep.json
    python -m rmsnorm_tools.sweep --op bwd --shapes 131072x128 16384x4096 1024x65536

Coordinate descent from the table's launch: first the tile shape (rows per program, warps,
weight in registers or re-read, pipelining stages, and at widths that are not a power of two
the row in chunks of a narrower tile; for the plain forward in 2-byte dtypes also each tile
kept in its storage dtype, and whole rows kept where an fp32 tile cannot hold them), then
programs per SM for the three fastest shapes; the five fastest launches are timed again,
longer. Each launch is checked before it is timed: forward launches against the recipe;
backward launches (dx and dw) against the table's launch, itself checked against the recipe,
within a tolerance, since dw's summation order depends on the launch. The backward is timed as
a whole ops.backward call: programs per SM also sets how many dw partial rows its reduction
reads. Each shape's winner is printed as it is found; `--json` keeps every timing, and `--table
PATH` writes the arch's launch table with the winners (rmsnorm_tools.table_gen; commit the JSON
under a checkout's docs/results/sweeps/ and regenerate the table from it there).

Compiling dominates a sweep (a second or more per launch, tens of launches per shape):
`--jobs N` compiles every shape's first-round launches ahead in N processes, which fill
Triton's on-disk cache while the GPU times the shapes before.
"""

import argparse
import concurrent.futures
import dataclasses
import json
import math
import multiprocessing
import sys

import torch

from rmsnorm import reference
from rmsnorm.launch import configs, dtypes, ops
from rmsnorm_tools import suite, table_gen
from rmsnorm_tools.bench import DTYPES, EPS, TIMERS, check_device, copy_gbps, \
    input_sets, make_grad, make_inputs, moved_elements, parse_shape, prog_name, rotating, \
    saved_rstd

DEFAULT_SHAPES = [(524288, 128), (65536, 1024), (32768, 2048), (16384, 4096), (16384, 8192),
                  (8192, 16384), (4096, 32768), (1024, 65536), (256, 262144)]


def _warps_for(elements):
    """Warp counts giving 8 to 64 elements per thread (16-byte accesses or more)."""
    return [w for w in (1, 2, 4, 8, 16, 32) if 8 <= elements / (32 * w) <= 64]


def chunkings(n, block_n):
    """(block_n, chunks) ways for a tile to hold rows of n elements: the power of two
    block_n, and, for a width that wastes a quarter of it or more, the two tightest ways
    (fewest masked lanes, then fewest chunks) of 2 to 8 chunks of 256 columns or more."""
    out = [(block_n, 1)]
    if 4 * n > 3 * block_n:
        return out
    split = []
    for k in range(2, 9):
        width = configs.next_pow2(-(-n // k))
        if width >= 256 and width * (k - 1) < n and width * k < block_n:
            split.append((width * k - n, k, width))
    return out + [(width, k) for _, k, width in sorted(split)[:2]]


def kept_tilings(n, elem_bytes):
    """(block_n, chunks) ways to hold rows of n elements in one tile kept in its storage dtype
    (Launch.keep_stored), for rows too long for an fp32 tile: chunks of at most MAX_TILE,
    fewest masked lanes first, at most two."""
    widest = configs.widest_tile(elem_bytes, True)
    if n <= configs.MAX_TILE.get(elem_bytes, 0) or n > widest:
        return []
    ways = []
    for k in range(1, 9):
        width = max(configs.MIN_TILE, configs.next_pow2(-(-n // k)))
        if width * (k - 1) < n and width * k <= widest and width <= configs.MAX_TILE[elem_bytes]:
            ways.append((width * k - n, k, width))
    return [(width, k) for _, k, width in sorted(set(ways))[:2]]


def kept_candidates(launches, n, elem_bytes, base):
    """The forward's kept tiles (Launch.keep_stored): a kept twin of each tile launch that
    holds 32 or more values a thread (fewer leave registers to spare), and, for rows longer
    than an fp32 tile, whole-row tiles kept in registers (one read of each row) in place of
    the loop."""
    if elem_bytes != 2:
        return []
    out = [dataclasses.replace(c, keep_stored=True) for c in launches
           if c.path == "tile" and c.rows * c.block_n * c.chunks >= 32 * 32 * c.num_warps]
    for block_n, chunks in kept_tilings(n, elem_bytes):
        for warps in (16, 32):
            for stages in (1, 2):
                out.append(configs.Launch("tile", block_n, 1, warps, stages,
                                          base.programs_per_sm, False, chunks=chunks,
                                          keep_stored=True))
    return out


def shape_candidates(base, n, backward=False):
    """Launches around the table's: tile shape (rows per program, warps, weight in registers,
    pipelining depth, and for the backward's wide rows dw partials in registers or not; the
    row in chunks of a narrower tile where a power of two would waste lanes); for rows longer
    than a tile, the loop's tile width and depth."""
    out = []
    if base.path == "tile":
        dw_choices = (True, False) if backward and base.block_n >= 4096 else (True,)
        # The backward holds two rows' worth (x and dy) per row: half the forward's tile.
        limit = 16384 if backward else 32768
        pow2 = max(configs.MIN_TILE, configs.next_pow2(n))
        ways = chunkings(n, pow2)
        if (base.block_n, base.chunks) not in ways:
            ways.append((base.block_n, base.chunks))
        for block_n, chunks in ways:
            width = block_n * chunks
            for rows in sorted({max(1, base.rows // 2), base.rows, base.rows * 2}):
                if rows * width > max(limit, width):
                    continue
                for warps in _warps_for(rows * width):
                    for wres in ({True, False} if width >= 2048 else {True}):
                        for stages in (1, 2, 3):
                            for dwres in dw_choices:
                                out.append(dataclasses.replace(
                                    base, block_n=block_n, chunks=chunks, rows=rows,
                                    num_warps=warps, w_resident=wres, num_stages=stages,
                                    dw_resident=dwres))
        return out
    # The backward's loop also takes several rows per step (one dw partial update for all).
    for rows in ((1, 2, 4) if backward else (1,)):
        for bn in (4096, 8192, 16384) if backward else (4096, 8192, 16384, 32768):
            if rows * bn > (16384 if backward else 32768):
                continue
            for warps in _warps_for(rows * bn):
                for stages in (1, 2) if backward else (1, 2, 3):
                    out.append(configs.Launch("loop", bn, rows, warps, stages,
                                              base.programs_per_sm, False))
    if backward:
        # The split backward (two grids: row dots, then column blocks with dw in registers;
        # a prototype the table cannot hold yet, since the AOT build has no kernels for it).
        for bn in (1024, 2048, 4096):
            for warps in _warps_for(bn):
                for stages in (1, 2):
                    out.append(configs.Launch("split", bn, 1, warps, stages, 4, False, False))
    return out


# Programs per SM tried once the tile shape is chosen, and the value the tile search starts
# from, for the forward ops and the backward. The backward's stay low: each program adds one
# fp32 dw partial row to the reduction.
PROGRAMS_PER_SM = {"fwd": {"tile": (4, 8, 16, 32, 64, 128), "loop": (1, 2, 3, 4, 6)},
                   "bwd": {"tile": (1, 2, 4, 8, 16, 32), "loop": (1, 2, 3, 4),
                           "split": (2, 4, 8, 16)}}
START_PROGRAMS_PER_SM = {"fwd": {"tile": 32, "loop": 2}, "bwd": {"tile": 8, "loop": 1}}


def _family(op):
    return "bwd" if op == "bwd" else "fwd"


def mismatches(a, ref):
    """Elements of a farther from ref than 2% plus 0.1% of ref's largest magnitude; a NaN is
    always far. Wrong indexing or masking gives errors of the data's own size."""
    a, ref = a.float(), ref.float()
    tol = 0.02 * ref.abs() + 1e-3 * ref.abs().max()
    return int((~((a - ref).abs() <= tol)).sum())


def expect_close(what, **pairs):
    """Raises unless every name=(result, reference) pair matches (see mismatches)."""
    for name, (got, ref) in pairs.items():
        bad = mismatches(got, ref)
        if bad:
            raise AssertionError(f"{what}: {name} wrong at {bad} elements")


def table_launch(op, n, dtype):
    """The table's launch for op at rows of n elements of dtype (weight of the same dtype):
    where forward_case and backward_case start from."""
    eb, name = dtype.itemsize, dtypes.name_of(dtype)
    if op == "bwd":
        return configs.backward_launch(n, eb, False, eb, dtype=name)
    return configs.forward_launch(n, eb, op == "add", eb, dtype=name)


def first_round(op, n, dtype):
    """The table's launch and the tile shapes tried around it (what --jobs compiles ahead)."""
    table = table_launch(op, n, dtype)
    family = _family(op)
    start = dataclasses.replace(table,
                                programs_per_sm=START_PROGRAMS_PER_SM[family][table.path])
    around = shape_candidates(start, n, backward=family == "bwd")
    if op == "fwd":
        kept_start = dataclasses.replace(start, programs_per_sm=START_PROGRAMS_PER_SM["fwd"]
                                         ["tile"])
        around += kept_candidates(around, n, dtype.itemsize, kept_start)
    return [table] + list(dict.fromkeys(c for c in around if c != table))


def _compile_ahead(task):
    """Runs each launch once on a few rows, so that its kernel lands in Triton's cache: a
    kernel's specialization does not depend on the row count."""
    op, n, dtype_name, launches = task
    dtype = getattr(torch, dtype_name)
    failed = []
    for launch in launches:
        try:
            if op == "bwd":
                backward_case(64, n, dtype, check_table=False)[1](launch)
            else:
                forward_case(op, 64, n, dtype)[1](launch)
        except Exception as e:  # e.g. out of shared memory: the sweep itself says so again
            failed.append(f"{launch}: {type(e).__name__}: {str(e)[:120]}")
    torch.cuda.synchronize()
    if failed:
        print(f"  compile ahead, {op} N={n}: " + "; ".join(failed), file=sys.stderr, flush=True)
    return len(launches)


def compile_ahead(pool, shapes, ops_, dtype, chunk=4):
    """{(op, m, n): [futures]} of every shape's first-round launches, compiled in pool."""
    futures = {}
    for op in ops_:
        for m, n in shapes:
            launches = first_round(op, n, dtype)
            futures[(op, m, n)] = [
                pool.submit(_compile_ahead, (op, n, str(dtype).replace("torch.", ""),
                                             launches[i:i + chunk]))
                for i in range(0, len(launches), chunk)]
    return futures


def forward_case(op, m, n, dtype, seed=0):
    """(table launch, run, check) of a forward op at one shape: run(launch) calls it with that
    launch; check(launch) raises when the results are wrong."""
    x, r, w = make_inputs(op, m, n, dtype, seed)
    src = reference.residual_add(x, r) if r is not None else x
    ref = reference.contract_rms_norm(src, w, EPS)[0]

    def run(launch):
        return ops.forward(x, w, EPS, residual=r, launch=launch)

    def check(launch):
        expect_close("against the recipe", y=(run(launch)[0], ref))

    return table_launch(op, n, dtype), run, check


def backward_case(m, n, dtype, check_table=True, seed=0):
    """(table launch, run, check) of the backward at one shape, as forward_case; without
    check_table, check is None (the table's launch is not run against the recipe)."""
    x, _, w = make_inputs("bwd", m, n, dtype, seed)
    dy = make_grad(x, seed + 1)
    rstd = saved_rstd(x, w)

    def run(launch):
        return ops.backward(dy, x, w, rstd, launch=launch)

    table = table_launch("bwd", n, dtype)
    if not check_table:
        return table, run, None
    dx_ref, dw_ref = run(table)
    dx_recipe, dw_recipe = reference.contract_rms_norm_backward(dy, x, w, rstd)
    expect_close(f"table launch {table} against the recipe", dx=(dx_ref, dx_recipe),
                 dw=(dw_ref, dw_recipe))

    def check(launch):
        dx, dw = run(launch)
        expect_close("against the table launch", dx=(dx, dx_ref), dw=(dw, dw_ref))

    return table, run, check


class Size:
    """One row count a launch is timed at: the case's runs (one per input set), the bytes one
    call moves, its copy ceiling and how it is timed (bench.TIMERS)."""

    def __init__(self, op, m, n, dtype, timing, warmup, rep):
        self.timing = timing
        self.nbytes = moved_elements(op, m, n) * dtype.itemsize
        sets = input_sets(timing, self.nbytes)
        cases = [(backward_case(m, n, dtype, check_table=k == 0, seed=2 * k) if op == "bwd"
                  else forward_case(op, m, n, dtype, seed=2 * k)) for k in range(sets)]
        self.table, _, self.check = cases[0]
        self.runs = [c[1] for c in cases]
        self.copy = copy_gbps(self.nbytes, warmup, rep, timing, sets)

    def ms(self, launch, warmup, rep):
        return TIMERS[self.timing](rotating([lambda r=r: r(launch) for r in self.runs]),
                                   warmup, rep)

    def pct(self, ms):
        return 100 * self.nbytes / ms / 1e6 / self.copy


def sweep_shape(op, m, n, dtype, warmup, rep, log, small_m=None):
    """The sweep of one shape (see the module docstring). With small_m, every launch is also
    timed at small_m rows as the suite times its 2^23-element cases (CUDA graphs over input
    sets three times the L2), and launches rank by the geometric mean of their % of copy at
    both sizes: the table serves every row count from one row per width."""
    torch.cuda.empty_cache()  # the last shape's tensors died with its closures: free them
    sizes = [Size(op, m, n, dtype, "median", warmup, rep)]
    if small_m:
        sizes.append(Size(op, small_m, n, dtype, "graph_hbm", warmup, rep))
    table = sizes[0].table
    timed = {}  # launch -> [ms at each size]

    def score(launch):
        """Geometric mean of the % of copy at the sizes (higher is better)."""
        pcts = [size.pct(ms) for size, ms in zip(sizes, timed[launch])]
        return math.prod(pcts) ** (1 / len(pcts))

    def measure(launch):
        if launch not in timed:
            for size in sizes:
                size.check(launch)
            timed[launch] = [size.ms(launch, warmup, rep) for size in sizes]
            pcts = " / ".join(f"{size.pct(ms):.1f}%" for size, ms in zip(sizes, timed[launch]))
            print(f"  {op} {m}x{n} {launch} {pcts}", file=log, flush=True)
        return -score(launch)

    def try_measure(launch):
        try:
            return measure(launch)
        except Exception as e:  # e.g. out of shared memory: not a candidate
            print(f"  {launch}: {type(e).__name__}: {str(e)[:120]}", file=log)
            return float("inf")

    family = _family(op)
    best = table
    measure(best)
    for cand in first_round(op, n, dtype)[1:]:
        if try_measure(cand) < measure(best):
            best = cand
    # Programs per SM for the three best tile shapes, not the best alone: a shape that lost
    # at the starting value can win at another.
    shapes = []
    for launch in sorted(timed, key=measure):
        shape = dataclasses.replace(launch, programs_per_sm=0)
        if shape not in shapes:
            shapes.append(shape)
    for shape in shapes[:3]:
        for ppsm in PROGRAMS_PER_SM[family][shape.path]:
            cand = dataclasses.replace(shape, programs_per_sm=ppsm)
            if try_measure(cand) < measure(best):
                best = cand
    # Re-time the five best longer, and the table's own launch (its first timing, the
    # process's first launch, can read low): single timings differ by a few percent.
    finalists = list(dict.fromkeys(sorted(timed, key=measure)[:5] + [table]))
    for launch in finalists:
        timed[launch] = [min(old, size.ms(launch, warmup, 3 * rep))
                         for size, old in zip(sizes, timed[launch])]
    best = min(finalists, key=measure)

    def gbps(launch, i=0):
        return sizes[i].nbytes / timed[launch][i] / 1e6

    result = {"op": op, "M": m, "N": n, "dtype": str(dtype), "copy_gbps": sizes[0].copy,
              "table": dataclasses.asdict(table), "table_gbps": gbps(table),
              "best": dataclasses.asdict(best), "best_gbps": gbps(best),
              "all": [dict(dataclasses.asdict(k), gbps=gbps(k)) for k in timed]}
    if small_m:
        result.update(
            small={"M": small_m, "timing": sizes[1].timing, "copy_gbps": sizes[1].copy,
                   "table_gbps": gbps(table, 1), "best_gbps": gbps(best, 1)},
            table_score=score(table), best_score=score(best))
        for entry, launch in zip(result["all"], timed):
            entry["gbps_small"] = gbps(launch, 1)
    return result


def result_line(res):
    b = res["best"]
    return (f"| {res['op']} | {res['M']} x {res['N']} | {res['copy_gbps']:.0f} | "
            f"{res['table_gbps']:.0f} ({100 * res['table_gbps'] / res['copy_gbps']:.1f}) | "
            f"{res['best_gbps']:.0f} ({100 * res['best_gbps'] / res['copy_gbps']:.1f}) | "
            f"{b['path']} bn={b['block_n']} rows={b['rows']} w={b['num_warps']} "
            f"st={b['num_stages']} ppsm={b['programs_per_sm']} wres={b['w_resident']} "
            f"dwres={b.get('dw_resident', True)} chunks={b.get('chunks', 1)} "
            f"kept={b.get('keep_stored', False)} |")


def main(argv=None):
    """`rmsnorm-sweep` / `python -m rmsnorm_tools.sweep`."""
    p = argparse.ArgumentParser(prog=prog_name("rmsnorm_tools.sweep"), description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", nargs="+", choices=["fwd", "add", "bwd"], default=["fwd", "add"])
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    p.add_argument("--shapes", nargs="+", type=parse_shape, default=DEFAULT_SHAPES,
                   metavar="MxN")
    p.add_argument("--warmup", type=float, default=5, help="ms of warm-up per timing")
    p.add_argument("--rep", type=float, default=20,
                   help="ms of timing per launch (the five fastest: three times as long)")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--table", metavar="PATH",
                   help="write the launch table with this sweep's winners (needs --json)")
    p.add_argument("--jobs", type=int, default=0,
                   help="processes compiling ahead (0: none)")
    p.add_argument("--small", action="store_true",
                   help="also time each launch at the suite's smaller size (2^23 / N rows, "
                        "CUDA graphs over inputs three times the L2) and rank launches by the "
                        "geometric mean of both sizes' %% of copy")
    args = p.parse_args(argv)
    if args.table and not args.json:
        p.error("--table needs --json (the table names the sweep it comes from)")
    check_device("rmsnorm_tools.sweep")
    dtype = DTYPES[args.dtype]
    pool = futures = None
    if args.jobs:
        # spawn: the children start without this process's CUDA state.
        pool = concurrent.futures.ProcessPoolExecutor(
            args.jobs, mp_context=multiprocessing.get_context("spawn"))
        futures = compile_ahead(pool, args.shapes, args.op, dtype)
    # Rows are printed as each shape finishes, so a run cut short keeps its table so far.
    print("| op | M x N | copy GB/s | table GB/s (%) | best GB/s (%) | best launch |")
    print("|---|---|---|---|---|---|", flush=True)
    results = []
    for op in args.op:
        for m, n in args.shapes:
            if futures:
                concurrent.futures.wait(futures.pop((op, m, n)))
            small_m = max(1, min(suite.ELEMENTS) // n) if args.small else None
            res = sweep_shape(op, m, n, dtype, args.warmup, args.rep, sys.stderr, small_m)
            results.append(res)
            print(result_line(res), flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(results, f, indent=1)
    if pool:
        pool.shutdown()
    if args.table:
        major, minor = torch.cuda.get_device_capability() if torch.cuda.is_available() \
            else divmod(configs.DEFAULT_ARCH, 10)
        table_gen.write(major * 10 + minor, [args.json], args.table)


if __name__ == "__main__":
    main()
