"""RMSNorm backward for long rows, split in two grids (device code only; a prototype, reached
only by an explicit `Launch(path="split")`, not by the table).

The looped backward (rmsnorm.kernels.backward) gives every program a dw partial row as long
as the rows: 132 programs x 65536 fp32 columns are 34 MB, which compete in L2 with the rows its
second pass re-reads, and dw then costs 40-57% of the backward at N >= 65536 (PERFORMANCE.md).
Here the row-wide reduction and the column-wise work are two grids:
- `bwd_dot_kernel`: one work item per (row, segment of SEG_TILES tiles of BLOCK_N columns);
  DOT[row, seg] = the segment's sum of g * xhat (squares summed tile by tile, element by
  element, then across the tile, as the looped kernel sums a whole row).
- `bwd_cols_kernel`: a program per (row group, column block of BLOCK_N): for each row of its
  group, mean(g * xhat) from the row's DOT entries (a fixed-shape sum), dx for its columns,
  and the dw sum of its columns over its rows in registers, written once to DWP[group, cols]
  for the fixed-order reduction (dw_reduce_kernel).
The order of every sum dx depends on is a function of N (and the launch's BLOCK_N), not of M
or of the grids: dx is batch invariant. x and dy are read twice, the second time from L2 when
the rows fit there (few rows), else from HBM.
"""

import triton
import triton.language as tl

from rmsnorm.kernels.backward import _dw_term, _scaled_grad
from rmsnorm.kernels.forward import _load_weight, _row_start
from rmsnorm.kernels.prior_grid import wait_for_prior_grid
from rmsnorm.kernels.rounding import round_to


@triton.jit(do_not_specialize=["M", "H"])
def bwd_dot_kernel(
    DY, X, W, RSTD, DOT,
    M, N, H, S,
    sdy_o, sdy_i, sx_o, sx_i,
    offset,
    BLOCK_N: tl.constexpr, SEG_TILES: tl.constexpr, NUM_STAGES: tl.constexpr,
    HAS_W: tl.constexpr, TWO_LEVEL: tl.constexpr, ACC: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_prior_grid(PDL)
    offset = tl.cast(offset, tl.float32)
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    for item in tl.range(pid, M * S, nprog):
        row = tl.cast(item // S, tl.int64)
        seg = item % S
        x_row = X + _row_start(row, H, sx_o, sx_i, TWO_LEVEL)
        dy_row = DY + _row_start(row, H, sdy_o, sdy_i, TWO_LEVEL)
        rstd = tl.load(RSTD + row)
        acc = tl.zeros([BLOCK_N], ACC)
        for t in tl.range(0, SEG_TILES, num_stages=NUM_STAGES):
            c = (seg * SEG_TILES + t) * BLOCK_N + cols
            m = c < N
            v = tl.load(x_row + c, mask=m, other=0.0, eviction_policy="evict_last").to(ACC)
            dy = tl.load(dy_row + c, mask=m, other=0.0, eviction_policy="evict_last").to(ACC)
            if HAS_W:
                w = _load_weight(W, c, m, offset, ACC)
            else:
                w = offset
            acc += _scaled_grad(dy, w, HAS_W) * (v * rstd)
        tl.store(DOT + row * S + seg, tl.sum(acc, axis=0))


@triton.jit(do_not_specialize=["M", "H", "ROWS_PER_GROUP"])
def bwd_cols_kernel(
    DY, X, W, RSTD, DOT, DX, DRESIDUAL, DWP,
    M, N, H, S, ROWS_PER_GROUP,
    sdy_o, sdy_i, sx_o, sx_i, sdx_o, sdx_i, sdresidual_o, sdresidual_i,
    offset,
    BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr, NUM_STAGES: tl.constexpr,
    HAS_DRESIDUAL: tl.constexpr, HAS_W: tl.constexpr, HAS_DW: tl.constexpr, TWO_LEVEL: tl.constexpr,
    LLAMA: tl.constexpr, ACC: tl.constexpr, SOFT_BF16: tl.constexpr, PDL: tl.constexpr,
):
    # Program (group, block): program ids run column block first, so that the programs
    # resident at one time share rows (their x and dy lines were read by one dot item).
    wait_for_prior_grid(PDL)
    offset = tl.cast(offset, tl.float32)
    n_col_blocks = tl.cdiv(N, BLOCK_N)
    group = tl.program_id(0) // n_col_blocks
    c = (tl.program_id(0) % n_col_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = c < N
    segs = tl.arange(0, BLOCK_S)
    if HAS_W:
        w = _load_weight(W, c, col_mask, offset, ACC)
    else:
        w = offset
    dw_acc = tl.zeros([BLOCK_N], ACC)
    first = group * ROWS_PER_GROUP
    last = tl.minimum(first + ROWS_PER_GROUP, M)
    for r in tl.range(first, last, num_stages=NUM_STAGES):
        row = tl.cast(r, tl.int64)
        # The segments' sums in one fixed shape (BLOCK_S, a function of N): the same order
        # for every row, grid and M.
        dots = tl.load(DOT + row * S + segs, mask=segs < S, other=0.0)
        mean_gx = tl.sum(dots, axis=0) / N
        rstd = tl.load(RSTD + row)
        v = tl.load(X + _row_start(row, H, sx_o, sx_i, TWO_LEVEL) + c, mask=col_mask,
                    other=0.0, eviction_policy="evict_first").to(ACC)
        dy = tl.load(DY + _row_start(row, H, sdy_o, sdy_i, TWO_LEVEL) + c, mask=col_mask,
                     other=0.0, eviction_policy="evict_first").to(ACC)
        xhat = v * rstd
        if HAS_DW:
            dw_acc += _dw_term(dy, xhat, X.dtype.element_ty, LLAMA, SOFT_BF16)
        dx = rstd * (_scaled_grad(dy, w, HAS_W) - xhat * mean_gx)
        if HAS_DRESIDUAL:
            dx += tl.load(DRESIDUAL + _row_start(row, H, sdresidual_o, sdresidual_i, TWO_LEVEL) + c,
                          mask=col_mask, other=0.0, eviction_policy="evict_first").to(ACC)
        tl.store(DX + _row_start(row, H, sdx_o, sdx_i, TWO_LEVEL) + c,
                 round_to(dx, DX.dtype.element_ty, SOFT_BF16), mask=col_mask)
    if HAS_DW:
        tl.store(DWP + tl.cast(group, tl.int64) * N + c, dw_acc, mask=col_mask)
