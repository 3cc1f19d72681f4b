"""RMSNorm forward (and fused add) for a few long rows, split in two grids (device code only;
rmsnorm.launch.ops takes it for looped rows when they are fewer than half the SMs, a quarter for the
fused add: configs.SPLIT_FORWARD_SM_DIVISOR. librmsnorm has none: the torch ops hand these
calls to the Python launcher; librmsnorm's own callers get the looped kernel, the same bits).

The looped forward gives a row to one program: 32 rows of 262144 keep 32 of 132 SMs busy.
Here every (row, tile of BLOCK_N columns) is a work item of two grids:
- `fwd_sumsq_kernel`: the tile's sum of squares (after the fused add's rounded sum, which it
  writes), into SS[row, tile];
- `fwd_scale_kernel`: the row's sum from its tiles' sums, added in tile order, then 1/rms and
  y for the tile; the first tile's item stores rstd.
The looped kernel sums a row the same way (each tile's squares across the tile, then the tiles
in order: `_tile_sumsq`), so for one launch table row both paths give the same bits and the
choice between them may depend on M. The second grid re-reads x (or the sum) from L2, where a
few rows fit.
"""

import triton
import triton.language as tl

from rmsnorm.kernels.forward import (_as_fp32, _inv_rms, _row_cols, _row_start, _row_weight,
                                     _scale, _tile_sumsq)
from rmsnorm.kernels.prior_grid import wait_for_prior_grid
from rmsnorm.kernels.rounding import round_to


@triton.jit(do_not_specialize=["M", "H"])
def fwd_sumsq_kernel(
    X, RESIDUAL, RESIDUAL_OUT, SS,
    M, N, H, T,
    sx_o, sx_i, sresidual_o, sresidual_i, sresidual_out_o, sresidual_out_i,
    BLOCK_N: tl.constexpr, HAS_RESIDUAL: tl.constexpr, TWO_LEVEL: tl.constexpr,
    ACC: tl.constexpr, SOFT_BF16: tl.constexpr, PDL: tl.constexpr,
    VEC: tl.constexpr,
):
    wait_for_prior_grid(PDL)
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = _row_cols(BLOCK_N, VEC)
    for item in tl.range(pid, M * T, nprog):
        row = tl.cast(item // T, tl.int64)
        tile = item % T
        c = tile * BLOCK_N + cols
        m = c < N
        v = tl.load(X + _row_start(row, H, sx_o, sx_i, TWO_LEVEL) + c, mask=m, other=0.0,
                    eviction_policy="evict_last").to(ACC)
        if HAS_RESIDUAL:
            residual_at = _row_start(row, H, sresidual_o, sresidual_i, TWO_LEVEL) + c
            residual = tl.load(RESIDUAL + residual_at, mask=m, other=0.0,
                               eviction_policy="evict_first")
            residual_out = round_to(v + residual.to(ACC), RESIDUAL_OUT.dtype.element_ty, SOFT_BF16)
            at = _row_start(row, H, sresidual_out_o, sresidual_out_i, TWO_LEVEL) + c
            tl.store(RESIDUAL_OUT + at, residual_out, mask=m, eviction_policy="evict_last")
            v = residual_out.to(ACC)
        tl.store(SS + row * T + tile, _tile_sumsq(v))


@triton.jit(do_not_specialize=["M", "H", "rstd_rows"])
def fwd_scale_kernel(
    SRC, W, Y, RSTD, SS,
    M, N, H, T, rstd_rows,
    ssrc_o, ssrc_i, sy_o, sy_i,
    eps, offset,
    BLOCK_N: tl.constexpr, HAS_W: tl.constexpr, TWO_LEVEL: tl.constexpr,
    LLAMA: tl.constexpr, ACC: tl.constexpr, SOFT_BF16: tl.constexpr, PDL: tl.constexpr,
    VEC: tl.constexpr,
):
    # SRC: x, or the fused add's rounded sum (what the looped kernel's second pass reads).
    wait_for_prior_grid(PDL)
    eps, offset = _as_fp32(eps, offset)
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = _row_cols(BLOCK_N, VEC)
    norm_dtype: tl.constexpr = SRC.dtype.element_ty
    for item in tl.range(pid, M * T, nprog):
        row = tl.cast(item // T, tl.int64)
        tile = item % T
        total = tl.load(SS + row * T)
        for t in tl.range(1, T):
            total += tl.load(SS + row * T + t)
        rstd = _inv_rms(total, N, eps, ACC)
        tl.store(RSTD + row, rstd, mask=(tile == 0) & (row < rstd_rows))
        c = tile * BLOCK_N + cols
        m = c < N
        v = tl.load(SRC + _row_start(row, H, ssrc_o, ssrc_i, TWO_LEVEL) + c, mask=m,
                    other=0.0, eviction_policy="evict_first").to(ACC)
        if HAS_W:
            w = _row_weight(W, c, N, offset, ACC)
        else:
            w = offset
        y = _scale(v, rstd, w, norm_dtype, HAS_W, LLAMA, SOFT_BF16)
        tl.store(Y + _row_start(row, H, sy_o, sy_i, TWO_LEVEL) + c,
                 round_to(y, Y.dtype.element_ty, SOFT_BF16), mask=m)
