"""RMSNorm backward: dx (and the fused-add ds) plus per-program dw partials, and the fixed-order
reduction of those partials (device code only).

With g = dy * (w + offset), xhat = x * rstd (rstd saved by the forward, one per row):
    dx = rstd * (g - xhat * mean(g * xhat))          stored in x's dtype
    dw = sum over rows of dy * xhat                   ("llama": xhat rounded to x's dtype first)
With HAS_DRESIDUAL (fused residual add) the gradient of the residual output is added to dx, so the
one stored tensor is the gradient of both x and residual.

Two paths, chosen by rmsnorm.launch.configs (op "bwd"), like the forward:
- `bwd_tile_kernel`: a row fits one tile (or CHUNKS tiles of a narrower power of two, as the
  forward's); each program owns ROWS rows per step of a persistent loop and keeps its dw
  partial in registers, summed and written once at the end (DW_RESIDENT), or, for wide rows,
  adds each step's sum to its partial row in global memory.
- `bwd_loop_kernel`: longer rows; per ROWS rows a first pass for mean(g * xhat) and a
  second pass (served mostly from L2) for dx, adding the rows' dw contribution to the
  program's partial row in global memory.
Each program writes exactly one partial row (DWP[pid, :N]); `dw_reduce_kernel` sums the rows
in a fixed order, so dw (like dx) is bit-identical from run to run. No atomics.

Row addressing (two levels of row strides) and numerics (ACC right after each load) follow
the forward kernels.
"""

import triton
import triton.language as tl

from rmsnorm.kernels.forward import _load_weight, _row_start
from rmsnorm.kernels.prior_grid import wait_for_prior_grid
from rmsnorm.kernels.rounding import round_to


@triton.jit
def _scaled_grad(dy, w, HAS_W: tl.constexpr):
    if HAS_W:
        return dy * w
    else:
        return dy


@triton.jit
def _dw_term(dy, xhat, NORM_DTYPE: tl.constexpr, LLAMA: tl.constexpr, SOFT_BF16: tl.constexpr):
    # The "llama" forward rounds xhat before the weight multiplies it: that rounded value is
    # what the weight's gradient sees.
    if LLAMA:
        return dy * round_to(xhat, NORM_DTYPE, SOFT_BF16).to(xhat.dtype)
    else:
        return dy * xhat


@triton.jit
def _dw_update(dy, xhat, acc, NORM_DTYPE: tl.constexpr, LLAMA: tl.constexpr,
               SOFT_BF16: tl.constexpr, DW_RESIDENT: tl.constexpr):
    """A step's dw contribution: added to the partial held in registers (DW_RESIDENT), or
    the tile's column sums, which the caller adds to the partial row in global memory."""
    term = _dw_term(dy, xhat, NORM_DTYPE, LLAMA, SOFT_BF16)
    if DW_RESIDENT:
        return acc + term
    else:
        return tl.sum(term, axis=0)


@triton.jit(do_not_specialize=["M", "H"])  # as the forward's
def bwd_tile_kernel(
    DY, X, W, RSTD, DX, DRESIDUAL, DWP,
    M, N, H,
    sdy_o, sdy_i, sx_o, sx_i, sdx_o, sdx_i, sdresidual_o, sdresidual_i,
    offset,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, NUM_STAGES: tl.constexpr,
    W_RESIDENT: tl.constexpr, DW_RESIDENT: tl.constexpr, CHUNKS: tl.constexpr,
    HAS_DRESIDUAL: tl.constexpr, HAS_W: tl.constexpr, HAS_DW: tl.constexpr, TWO_LEVEL: tl.constexpr,
    LLAMA: tl.constexpr, ACC: tl.constexpr, SOFT_BF16: tl.constexpr, PDL: tl.constexpr,
):
    # The row is held as CHUNKS tiles of BLOCK_N columns (tuples of tensors), as the forward's
    # tile: 10240 as 5 x 2048 needs no tile of 16384 whose masked lanes hold registers.
    wait_for_prior_grid(PDL)
    offset = tl.cast(offset, tl.float32)
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    ws = ()
    # Per-thread partial sums, one per element of the tile: rows are only summed (across
    # warps) once, after the loop, not on every step.
    dw_accs = ()
    for k in tl.static_range(CHUNKS):
        c = k * BLOCK_N + cols
        if HAS_W and W_RESIDENT:
            ws = ws + (_load_weight(W, c, c < N, offset, ACC)[None, :],)
        dw_accs = dw_accs + (tl.zeros([ROWS, BLOCK_N], ACC),)
    n_blocks = tl.cdiv(M, ROWS)
    for blk in tl.range(pid, n_blocks, nprog, num_stages=NUM_STAGES):
        rows = tl.cast(blk, tl.int64) * ROWS + tl.arange(0, ROWS)
        row_mask = rows < M
        x_row = _row_start(rows, H, sx_o, sx_i, TWO_LEVEL)[:, None]
        dy_row = _row_start(rows, H, sdy_o, sdy_i, TWO_LEVEL)[:, None]
        xhats = ()
        gs = ()
        dys = ()
        # Per chunk: the updated dw partial (DW_RESIDENT), or this step's column sums.
        dw_new = ()
        for k in tl.static_range(CHUNKS):
            c = k * BLOCK_N + cols
            mask = row_mask[:, None] & (c < N)[None, :]
            v = tl.load(X + x_row + c[None, :], mask=mask, other=0.0,
                        eviction_policy="evict_first").to(ACC)
            dy = tl.load(DY + dy_row + c[None, :], mask=mask, other=0.0,
                         eviction_policy="evict_first").to(ACC)
            if k == 0:
                rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)[:, None]
            xhat = v * rstd
            if HAS_DW and not W_RESIDENT:
                # Wide rows take the dw term before g: dy dies once g exists, so x, g and
                # the partial are all the row holds across the reduction (x, dy and g as
                # well spill at 16384). Narrow tiles take it after dx, as register pressure
                # then allows: earlier, it costs them registers (168 instead of 112 at 128).
                dw_new = dw_new + (_dw_update(dy, xhat, dw_accs[k], X.dtype.element_ty,
                                              LLAMA, SOFT_BF16, DW_RESIDENT),)
            if HAS_W and W_RESIDENT:
                g = _scaled_grad(dy, ws[k], HAS_W)
            elif HAS_W:
                # Wide rows: registers go to x, dy and the dw partial; L1 serves the weight.
                g = _scaled_grad(dy, _load_weight(W, c, c < N, offset, ACC)[None, :], HAS_W)
            else:
                g = _scaled_grad(dy, offset, HAS_W)
            # Products summed chunk by chunk, element by element, then across the tile: one
            # order for every row of a width.
            if k == 0:
                gx = g * xhat
            else:
                gx += g * xhat
            xhats = xhats + (xhat,)
            gs = gs + (g,)
            dys = dys + (dy,)
        mean_gx = (tl.sum(gx, axis=1) / N)[:, None]
        dx_row = _row_start(rows, H, sdx_o, sdx_i, TWO_LEVEL)[:, None]
        for k in tl.static_range(CHUNKS):
            c = k * BLOCK_N + cols
            mask = row_mask[:, None] & (c < N)[None, :]
            dx = rstd * (gs[k] - xhats[k] * mean_gx)
            if HAS_DRESIDUAL:
                dresidual_at = _row_start(rows, H, sdresidual_o, sdresidual_i,
                                          TWO_LEVEL)[:, None] + c[None, :]
                dx += tl.load(DRESIDUAL + dresidual_at, mask=mask, other=0.0,
                              eviction_policy="evict_first").to(ACC)
            tl.store(DX + dx_row + c[None, :], round_to(dx, DX.dtype.element_ty, SOFT_BF16),
                     mask=mask)
            if HAS_DW and W_RESIDENT:
                dw_new = dw_new + (_dw_update(dys[k], xhats[k], dw_accs[k],
                                              X.dtype.element_ty, LLAMA, SOFT_BF16,
                                              DW_RESIDENT),)
        if HAS_DW and DW_RESIDENT:
            dw_accs = dw_new
        if HAS_DW and not DW_RESIDENT:
            # Wide rows: registers go to the row; the partial row stays in L2. The program's
            # first step (grids never exceed the blocks) starts it from zero.
            for k in tl.static_range(CHUNKS):
                c = k * BLOCK_N + cols
                partial = DWP + tl.cast(pid, tl.int64) * N + c
                prev = tl.load(partial, mask=(c < N) & (blk != pid), other=0.0,
                               eviction_policy="evict_last")
                tl.store(partial, prev + dw_new[k], mask=c < N, eviction_policy="evict_last")
            # Threads may store and later load one element under different layouts: make
            # this step's stores visible to the whole program.
            tl.debug_barrier()
    if HAS_DW and DW_RESIDENT:
        for k in tl.static_range(CHUNKS):
            c = k * BLOCK_N + cols
            tl.store(DWP + tl.cast(pid, tl.int64) * N + c, tl.sum(dw_accs[k], axis=0),
                     mask=c < N)


@triton.jit(do_not_specialize=["M", "H"])
def bwd_loop_kernel(
    DY, X, W, RSTD, DX, DRESIDUAL, DWP,
    M, N, H,
    sdy_o, sdy_i, sx_o, sx_i, sdx_o, sdx_i, sdresidual_o, sdresidual_i,
    offset,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, NUM_STAGES: tl.constexpr,
    W_RESIDENT: tl.constexpr, DW_RESIDENT: tl.constexpr, CHUNKS: tl.constexpr,
    HAS_DRESIDUAL: tl.constexpr, HAS_W: tl.constexpr, HAS_DW: tl.constexpr, TWO_LEVEL: tl.constexpr,
    LLAMA: tl.constexpr, ACC: tl.constexpr, SOFT_BF16: tl.constexpr, PDL: tl.constexpr,
):
    # W_RESIDENT, DW_RESIDENT and CHUNKS belong to the shared signature: the weight is
    # streamed with the rows and dw goes to the program's partial row in global memory, once
    # per ROWS rows.
    tl.static_assert(CHUNKS == 1)
    wait_for_prior_grid(PDL)
    offset = tl.cast(offset, tl.float32)
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    partial = DWP + tl.cast(pid, tl.int64) * N
    if HAS_DW:
        # The partial row is accumulated in place below; a program with no rows leaves zeros.
        for start in tl.range(0, N, BLOCK_N):
            tl.store(partial + start + cols, tl.zeros([BLOCK_N], ACC), mask=start + cols < N)
        tl.debug_barrier()  # the zeros are read back below, maybe by other threads
    n_blocks = tl.cdiv(M, ROWS)
    for blk in tl.range(pid, n_blocks, nprog):
        rows = tl.cast(blk, tl.int64) * ROWS + tl.arange(0, ROWS)
        row_mask = rows < M
        x_rows = X + _row_start(rows, H, sx_o, sx_i, TWO_LEVEL)[:, None]
        dy_rows = DY + _row_start(rows, H, sdy_o, sdy_i, TWO_LEVEL)[:, None]
        dx_rows = DX + _row_start(rows, H, sdx_o, sdx_i, TWO_LEVEL)[:, None]
        rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)[:, None]

        # Pass 1: mean(g * xhat) over each row.
        acc = tl.zeros([ROWS, BLOCK_N], ACC)
        for start in tl.range(0, N, BLOCK_N, num_stages=NUM_STAGES):
            c = start + cols
            m = row_mask[:, None] & (c < N)[None, :]
            v = tl.load(x_rows + c[None, :], mask=m, other=0.0,
                        eviction_policy="evict_last").to(ACC)
            dy = tl.load(dy_rows + c[None, :], mask=m, other=0.0,
                         eviction_policy="evict_last").to(ACC)
            if HAS_W:
                w = _load_weight(W, c, c < N, offset, ACC)[None, :]
            else:
                w = offset
            acc += _scaled_grad(dy, w, HAS_W) * (v * rstd)
        mean_gx = (tl.sum(acc, axis=1) / N)[:, None]

        # Pass 2, last tile first (the likeliest still cached): dx and the dw partial.
        last = tl.cdiv(N, BLOCK_N) - 1
        for i in tl.range(0, last + 1, num_stages=NUM_STAGES):
            c = (last - i) * BLOCK_N + cols
            col_mask = c < N
            m = row_mask[:, None] & col_mask[None, :]
            v = tl.load(x_rows + c[None, :], mask=m, other=0.0,
                        eviction_policy="evict_first").to(ACC)
            dy = tl.load(dy_rows + c[None, :], mask=m, other=0.0,
                         eviction_policy="evict_first").to(ACC)
            if HAS_W:
                w = _load_weight(W, c, col_mask, offset, ACC)[None, :]
            else:
                w = offset
            xhat = v * rstd
            dx = rstd * (_scaled_grad(dy, w, HAS_W) - xhat * mean_gx)
            if HAS_DRESIDUAL:
                dresidual_rows = DRESIDUAL + _row_start(rows, H, sdresidual_o, sdresidual_i,
                                                        TWO_LEVEL)[:, None]
                dx += tl.load(dresidual_rows + c[None, :], mask=m, other=0.0,
                              eviction_policy="evict_first").to(ACC)
            tl.store(dx_rows + c[None, :], round_to(dx, DX.dtype.element_ty, SOFT_BF16), mask=m)
            if HAS_DW:
                term = tl.sum(_dw_term(dy, xhat, X.dtype.element_ty, LLAMA, SOFT_BF16), axis=0)
                prev = tl.load(partial + c, mask=col_mask, other=0.0,
                               eviction_policy="evict_last")
                tl.store(partial + c, prev + term, mask=col_mask, eviction_policy="evict_last")
        if HAS_DW:
            tl.debug_barrier()  # as above, for the next rows' read-modify-write


@triton.jit(do_not_specialize=["P"])
def dw_reduce_kernel(DWP, DW, P, N, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr,
                     SOFT_BF16: tl.constexpr, PDL: tl.constexpr):
    """dw[c] = sum over the P partial rows of DWP[:, c], always in the same order."""
    wait_for_prior_grid(PDL)
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_mask = cols < N
    acc = tl.zeros([BLOCK_P, BLOCK_C], DWP.dtype.element_ty)
    for start in tl.range(0, P, BLOCK_P):
        rows = tl.cast(start + tl.arange(0, BLOCK_P), tl.int64)
        mask = (rows < P)[:, None] & col_mask[None, :]
        acc += tl.load(DWP + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
    dw = tl.sum(acc, axis=0)
    tl.store(DW + cols, round_to(dw, DW.dtype.element_ty, SOFT_BF16), mask=col_mask)
