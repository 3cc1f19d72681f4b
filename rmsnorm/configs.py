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
# Shared memory the pipelined loads of one program may take (of 227 KB on sm_90): deeper
# pipelines are cut back one stage at a time. The table is tuned for sm_90; smaller parts
# (99 KB on sm_89) need their own budget.
SMEM_BUDGET = 200 * 1024


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


# 2- and 4-byte elements share a row until sweeps say otherwise (SMEM_BUDGET trims stages);
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


def _fit_stages(stages, per_stage):
    while stages > 1 and (stages - 1) * per_stage > SMEM_BUDGET:
        stages -= 1
    return stages


def forward_launch(n: int, elem_bytes: int, fused: bool, weight_bytes: int = 0) -> Launch:
    """The launch for rows of n elements of elem_bytes bytes (the widest of x and residual),
    plain or fused-add forward; weight_bytes is the weight's element size (0: no weight)."""
    return _launch_for("add" if fused else "fwd", n, elem_bytes, 2 if fused else 1,
                       weight_bytes)


def backward_launch(n: int, elem_bytes: int, fused: bool, weight_bytes: int = 0) -> Launch:
    """The backward launch for rows of n elements (elem_bytes: the widest of x, dy and, fused,
    the residual's gradient)."""
    return _launch_for("bwd", n, elem_bytes, 3 if fused else 2, weight_bytes)


def _launch_for(op, n, elem_bytes, streams, weight_bytes):
    limit = MAX_TILE[elem_bytes]
    if _max_tile_override is not None:
        limit = min(limit, _max_tile_override)
    return _launch(op, n, elem_bytes, streams, weight_bytes, limit)


@functools.lru_cache(maxsize=4096)  # on every call's path: keep the table walk off it
def _launch(op, n, elem_bytes, streams, weight_bytes, limit):
    block_n = next_pow2(n)
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
                      _fit_stages(rule.num_stages, per_stage), rule.programs_per_sm,
                      rule.w_resident, rule.dw_resident and rule.path == "tile")
    raise AssertionError(f"no launch rule for op={op} elem_bytes={elem_bytes}")


def reduce_launch(partial_rows: int, n: int):
    """(block_p, block_c, num_warps) of the dw reduction over partial_rows x n fp32 partials:
    column blocks narrow enough that about a hundred programs share the columns, and tall
    enough that a program needs few steps down the partial rows (narrow rows have many)."""
    block_c = min(256, max(16, next_pow2(n) // 128))
    block_p = max(1, min(next_pow2(partial_rows), 8192 // block_c))
    return block_p, block_c, 8 if block_p * block_c >= 8192 else 4
