"""The one table of kernel specializations and the launch heuristic.

The Python launcher (rmsnorm.ops) reads it through `forward_launch` and `backward_launch`; the
AOT compiler and the C++ runtime are to derive their specializations and dispatch from the same
`RULES`, so every path picks the same kernel for the same shape. The numbers come from
`python -m rmsnorm.sweep` on an H200 (docs/PERFORMANCE.md).

Paths:
- "tile": a row fits one tile of block_n columns (held in registers); `rows` rows per program
  step; programs loop over row blocks (persistent grid).
- "loop": any longer row; one program walks it twice in tiles of block_n (the second pass is
  served mostly from L2). No limit on N.
"""

import contextlib
import dataclasses
import functools

# Largest row, in elements, held in one tile; longer rows take the looped path. Above this the
# fp32 copy of the row no longer fits the registers of one program.
MAX_TILE = {2: 32768, 4: 32768, 8: 8192}
# Narrowest tile: shorter rows are masked. One floor keeps tiny rows off a family of
# specializations of their own (the AOT build compiles every one).
MIN_TILE = 16
# Shared memory a block may take on each GPU arch (the opt-in maximum), by compute capability;
# archs not listed take the smallest. The pipelined loads of one program may take all but
# SMEM_MARGIN of it (Triton's own scratch, e.g. for reductions, needs the rest): deeper
# pipelines are cut back one stage at a time. The table itself is tuned on sm_90.
SMEM_LIMIT = {80: 166912, 87: 166912, 90: 232448, 100: 232448, 103: 232448}
SMEM_LIMIT_DEFAULT = 101376  # sm_86, sm_89, sm_120: 99 KB
SMEM_MARGIN = 27 * 1024
DEFAULT_ARCH = 90  # what the interpreter and the CPU assume
# Programmatic dependent launch (rmsnorm.kernels.prior_grid) needs PTX's griddepcontrol, from
# sm_90 on: kernels for these archs wait on the prior grid (a no-op unless launched with PDL).
PDL_MIN_ARCH = 90


def compile_options(vectorised: bool) -> dict:
    """Compiler options of a kernel, the same on every path. A reduction whose threads hold
    one element of the row each (the unvectorised kernels) starts by adding a lane's product
    to its partner's, and FMA contraction fuses each lane's own product in, so the lanes that
    hold copies of the sum disagree in the last bit (rstd and y then show one copy or another
    at random; compute-sanitizer reports the race). Those kernels are compiled without it.
    Vectorised kernels sum several elements per thread first (fused or not, in one fixed
    order) and only then across lanes: they keep FMAs, which small rows need (n = 128 is
    ~20% slower without them)."""
    return {"enable_fp_fusion": vectorised}


def waits_on_prior_grid(arch: int) -> bool:
    return arch >= PDL_MIN_ARCH


def smem_budget(arch: int) -> int:
    return SMEM_LIMIT.get(arch, SMEM_LIMIT_DEFAULT) - SMEM_MARGIN


@dataclasses.dataclass(frozen=True)
class Launch:
    path: str  # "tile" or "loop" (see the module docstring)
    block_n: int  # columns per tile, a power of two
    rows: int  # rows per program per step (tile path); 1 otherwise
    num_warps: int
    num_stages: int  # software pipelining depth of the program's loop
    programs_per_sm: int  # persistent grid: min(work items, SMs * programs_per_sm) programs
    w_resident: bool  # tile path: weight held in registers across rows, else re-read per row
    # Backward tile path: the program's dw partial sums held in registers across its rows
    # (written once), else added to its partial row in global memory (L2) after every step,
    # which frees registers for wide rows. The loop path always does the latter.
    dw_resident: bool = True

    def grid(self, m: int, sm_count: int) -> int:
        """Number of programs for m rows on a device with sm_count multiprocessors."""
        work = -(-m // self.rows)
        return max(1, min(work, sm_count * self.programs_per_sm))


@dataclasses.dataclass(frozen=True)
class Rule:
    """One row of the table. For each op and element size the "tile" rules come first, by
    the largest block_n (next power of two of N) they cover; then the "loop" rule (tile width
    block_n) for every longer row."""

    op: str  # "fwd", "add" (fused residual add + forward) or "bwd" (backward, both forms)
    elem_bytes: int  # widest streamed element: 2 (fp16/bf16), 4 (fp32), 8 (fp64)
    block_n: int
    path: str
    rows: int
    num_warps: int
    num_stages: int
    programs_per_sm: int
    w_resident: bool
    dw_resident: bool = True


# 2- and 4-byte elements share a row until sweeps say otherwise (smem_budget trims stages);
# 8-byte (float64) elements take half the rows. bf16 sweeps on an H200, 2026-11-29.
#    block_n  rows  warps  stages  programs/SM  weight in registers  [dw in registers]
_TILE = {
    "fwd": (
        (16, 128, 4, 3, 32, True),
        (32, 128, 4, 3, 32, True),
        (64, 64, 4, 3, 32, True),
        (128, 64, 8, 3, 32, True),
        (256, 32, 8, 3, 32, True),
        (512, 4, 2, 3, 32, True),
        (1024, 1, 2, 3, 32, True),
        (2048, 4, 4, 3, 128, False),
        (4096, 2, 4, 3, 64, True),
        (8192, 2, 16, 2, 32, True),
        (16384, 1, 8, 2, 32, False),
        (32768, 1, 16, 1, 1, True),
    ),
    "add": (
        (16, 128, 4, 3, 128, True),
        (32, 64, 4, 3, 128, True),
        (64, 32, 8, 3, 128, True),
        (128, 16, 8, 3, 128, True),
        (256, 8, 4, 3, 64, True),
        (512, 4, 2, 3, 64, True),
        (1024, 4, 2, 3, 64, True),
        (2048, 1, 8, 3, 128, False),
        (4096, 2, 16, 2, 32, True),
        (8192, 4, 32, 2, 128, True),
        (16384, 2, 16, 2, 32, False),
        (32768, 1, 16, 2, 64, False),
    ),
    # Backward: programs/SM also sets how many fp32 dw partial rows the reduction reads, so
    # it stays small for wide rows. Rows wider than the last tile here take the loop. Swept
    # (bf16, H200) at 128, 2048, 4096, 8192, 16384; the rows between keep about 16 elements
    # per thread like their swept neighbours.
    "bwd": (
        (16, 64, 2, 1, 8, True),
        (32, 32, 2, 1, 8, True),
        (64, 16, 2, 1, 8, True),
        (128, 8, 2, 1, 8, True),
        (256, 4, 2, 2, 8, True),
        (512, 2, 2, 2, 8, True),
        (1024, 1, 2, 3, 8, True),
        (2048, 1, 2, 3, 4, True),
        (4096, 1, 4, 3, 2, True),
        (8192, 1, 8, 3, 1, True),
        (16384, 1, 16, 1, 1, False),
    ),
}
_LOOP = {
    "fwd": (8192, 1, 32, 1, 6, False),
    "add": (16384, 1, 32, 1, 6, False),
    "bwd": (4096, 4, 8, 2, 1, False),
}
OPS = tuple(_TILE)


def _rules():
    rules = []
    for op in OPS:
        for eb in (2, 4, 8):
            for bn, rows, *rest in _TILE[op]:
                if bn > MAX_TILE[eb]:
                    break
                rows = max(1, rows // 2) if eb == 8 else rows
                rules.append(Rule(op, eb, bn, "tile", rows, *rest))
            rules.append(Rule(op, eb, _LOOP[op][0], "loop", *_LOOP[op][1:]))
    return tuple(rules)


RULES = _rules()

_max_tile_override = None


@contextlib.contextmanager
def max_tile(n: int):
    """Temporarily cap tiles at n elements (tests use it to reach the looped path at sizes
    the interpreter can run)."""
    global _max_tile_override
    if n < 1 or n & (n - 1):
        raise ValueError(f"max_tile must be a power of two >= 1, got {n}")
    saved, _max_tile_override = _max_tile_override, n
    try:
        yield
    finally:
        _max_tile_override = saved


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _stage_bytes(width, rows, elem_bytes, weight_bytes, streams, reloads_weight):
    """Bytes one pipeline stage of a program's loop loads into shared memory (cp.async)."""
    return width * (rows * elem_bytes * streams + (weight_bytes if reloads_weight else 0))


def _fit_stages(stages, per_stage, budget):
    while stages > 1 and (stages - 1) * per_stage > budget:
        stages -= 1
    return stages


def forward_launch(n: int, elem_bytes: int, fused: bool, weight_bytes: int = 0,
                   arch: int = DEFAULT_ARCH) -> Launch:
    """The launch for rows of n elements of elem_bytes bytes (the widest of x and residual),
    plain or fused-add forward; weight_bytes is the weight's element size (0: no weight);
    arch the GPU's compute capability (major * 10 + minor)."""
    return _launch_for("add" if fused else "fwd", n, elem_bytes, 2 if fused else 1,
                       weight_bytes, arch)


def backward_launch(n: int, elem_bytes: int, fused: bool, weight_bytes: int = 0,
                    arch: int = DEFAULT_ARCH) -> Launch:
    """The backward launch for rows of n elements (elem_bytes: the widest of x, dy and, fused,
    the residual's gradient)."""
    return _launch_for("bwd", n, elem_bytes, 3 if fused else 2, weight_bytes, arch)


def tile_limit(op: str, elem_bytes: int) -> int:
    """Widest row (a power of two) the tile path of op takes; longer rows take the loop."""
    return max(r.block_n for r in RULES
               if r.op == op and r.elem_bytes == elem_bytes and r.path == "tile")


def loop_block(op: str, elem_bytes: int) -> int:
    """Tile width of the looped path of op (rows wider than tile_limit)."""
    return _launch_for(op, 4 * tile_limit(op, elem_bytes), elem_bytes, 1, 0,
                       DEFAULT_ARCH).block_n


def _launch_for(op, n, elem_bytes, streams, weight_bytes, arch):
    limit = MAX_TILE[elem_bytes]
    if _max_tile_override is not None:
        limit = min(limit, _max_tile_override)
    return _launch(op, n, elem_bytes, streams, weight_bytes, limit, smem_budget(arch))


@functools.lru_cache(maxsize=4096)  # on every call's path: keep the table walk off it
def _launch(op, n, elem_bytes, streams, weight_bytes, limit, budget):
    block_n = max(MIN_TILE, next_pow2(n))
    for rule in RULES:
        if rule.op != op or rule.elem_bytes != elem_bytes:
            continue
        if rule.path == "tile":
            if block_n > min(rule.block_n, limit):
                continue
            width = block_n
        else:
            # A capped tile (tests) also narrows the loop's tile and its warps.
            width = min(rule.block_n, limit)
        warps = max(1, min(rule.num_warps, width * rule.rows // 256))
        reloads_weight = rule.path != "tile" or not rule.w_resident
        per_stage = _stage_bytes(width, rule.rows, elem_bytes, weight_bytes, streams,
                                 reloads_weight)
        return Launch(rule.path, width, rule.rows, warps,
                      _fit_stages(rule.num_stages, per_stage, budget), rule.programs_per_sm,
                      rule.w_resident, rule.dw_resident and rule.path == "tile")
    raise AssertionError(f"no launch rule for op={op} elem_bytes={elem_bytes}")


def reduce_launch(n: int):
    """(block_p, block_c, num_warps) of the dw reduction over rows of n fp32 partials: column
    blocks narrow enough that about a hundred programs share the columns, and tiles of 8192
    partials, so that a program needs few steps down the partial rows (narrow rows have many).
    The tile does not depend on the number of partial rows (the backward's grid, which
    depends on the GPU): that keeps the AOT build to five reduction kernels per dtype, and
    the order of dw's sums the same on every GPU."""
    block_c = min(256, max(16, next_pow2(n) // 128))
    return 8192 // block_c, block_c, 8
