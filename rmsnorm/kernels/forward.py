"""RMSNorm forward and fused residual-add forward (device code only).

Two paths, chosen by rmsnorm.launch.configs:
- `fwd_tile_kernel`: a row fits in registers as CHUNKS tiles of BLOCK_N columns (one tile for
  most widths); each program owns ROWS rows at a time and loops over row blocks (persistent
  grid). Each input byte is read once. With KEEP_STORED the row waits for its 1/rms in its
  storage dtype, not in fp32: a row of 65536 16-bit values then fits one program.
- `fwd_loop_kernel`: rows longer than one tile; one row at a time per program, a first pass
  over the row for the sum of squares (each tile's, added in tile order) and a second pass
  (served mostly from L2) to normalize. rmsnorm.kernels.forward_split computes the same sums
  in two grids, for fewer rows than SMs.

Row addressing: row r lives at `(r // H) * s_outer + (r % H) * s_inner` when TWO_LEVEL (a 3-D
view such as q/k heads sliced from a fused QKV tensor), else at `r * s_outer`. The last
dimension is contiguous. All offsets are 64-bit.

rstd (1/rms per row, what the backward reuses) is stored for the first `rstd_rows` rows: M
when wanted, else 0. A run-time bound rather than a constexpr flag keeps the number of
compiled specializations (the AOT build compiles them all) at half.

Numerics (DESIGN.md, "Semantics"): every element is converted to ACC (fp32, or fp64 for
float64 tensors) right after its load; the residual sum is rounded to the residual dtype before
it is written and normalized; "llama" rounds x*r to the norm input's dtype before the weight,
"gemma" rounds once at the end; `offset` is added to the weight in ACC.
"""

import triton
import triton.language as tl

from rmsnorm.kernels.prior_grid import wait_for_prior_grid
from rmsnorm.kernels import quantize as q
from rmsnorm.kernels.rounding import round_pairs, round_to, widen


@triton.jit
def _row_start(rows, H, s_outer, s_inner, TWO_LEVEL: tl.constexpr):
    if TWO_LEVEL:
        return (rows // H) * s_outer + (rows % H) * s_inner
    else:
        return rows * s_outer


@triton.jit
def _row_cols(BLOCK_N: tl.constexpr, VEC: tl.constexpr):
    """A tile's columns, hinted contiguous in runs of VEC (rmsnorm.launch.configs.row_vector):
    every load and store of the row then takes VEC elements to a thread, and the row has one
    layout in every kernel. Left to itself, Triton lays a row out by its best-aligned access
    (the weight's, always aligned) where it shares the row's shape, or by a narrower store's,
    so a kernel that re-reads the weight, holds more rows or stores more outputs summed the
    squares in another order (rstd, and so y, an ulp apart at widths off 16: in most float32
    rows, a few 16-bit elements per million)."""
    return tl.max_contiguous(tl.arange(0, BLOCK_N), VEC)


@triton.jit
def _as_fp32(eps, offset):
    # The contract's scalars are fp32 (the GPU passes them so); the interpreter would keep a
    # Python float's double precision.
    return tl.cast(eps, tl.float32), tl.cast(offset, tl.float32)


@triton.jit
def _inv_rms(sum_sq, N, eps, ACC: tl.constexpr):
    mean_sq = sum_sq / N + eps
    if ACC == tl.float64:
        # tl.rsqrt is an fp32-accurate approximation; float64 must stay exact.
        return 1.0 / tl.sqrt(mean_sq)
    else:
        return tl.rsqrt(mean_sq)


@triton.jit
def _tile_sumsq(v):
    """One tile's sum of squares. The looped rows add these in tile order, in one program
    (fwd_loop_kernel) or from many (rmsnorm.kernels.forward_split): one order for both."""
    return tl.sum(v * v, axis=0)


@triton.jit
def _widen(v, ACC: tl.constexpr):
    """v, as stored, in ACC, exactly as `.to(ACC)` converts it, but by its bits: a route the
    compiler does not merge with the conversion right after the load, so that a tile kept for
    the second pass (KEEP_STORED) stays in registers in its storage dtype, two 16-bit values
    to a register, instead of in fp32 (ptxas: 79 registers instead of 126 for 64 bf16 values
    a thread; with `.to` both ways, the same 126)."""
    if v.dtype == tl.bfloat16:
        bits = v.to(tl.uint16, bitcast=True).to(tl.uint32) << 16
        return bits.to(tl.float32, bitcast=True).to(ACC)
    elif v.dtype == tl.float16:
        h = v.to(tl.uint16, bitcast=True).to(tl.uint32)
        mag = h & 0x7FFF
        # Exponent and mantissa moved into fp32's places, then scaled by 2^112 (exact: normal
        # and subnormal fp16 alike land on normal fp32 values); infinities and NaNs directly.
        f = (mag << 13).to(tl.float32, bitcast=True) * 5.192296858534828e33  # 2^112
        f = tl.where(mag >= 0x7C00, ((mag << 13) | 0x7F800000).to(tl.float32, bitcast=True), f)
        sign = (h & 0x8000) << 16
        return (f.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True).to(ACC)
    else:
        return v.to(ACC)


@triton.jit
def _load_weight(W, cols, mask, offset, ACC: tl.constexpr, PAIRS: tl.constexpr = False):
    return widen(tl.load(W + cols, mask=mask, other=0.0, eviction_policy="evict_last"), ACC,
                 PAIRS) + offset


@triton.jit
def _row_weight(W, cols, N, offset, ACC: tl.constexpr, PAIRS: tl.constexpr = False):
    """The weight (+ offset) of columns cols for the forward kernels, read through a pointer
    that Triton knows to be no better aligned than the rows: W + min(N, 0), which is W, with
    n's divisibility. An aligned weight beside rows off 16 bytes would otherwise set the
    layout of the accesses that share its shape (_row_cols), and only of those."""
    return _load_weight(W + tl.minimum(N, 0), cols, cols < N, offset, ACC, PAIRS)


@triton.jit
def _scale(v, rstd, w, NORM_DTYPE: tl.constexpr, HAS_W: tl.constexpr, LLAMA: tl.constexpr,
           SOFT_BF16: tl.constexpr, PAIRS: tl.constexpr = False):
    """y (in ACC, not yet rounded) from normalized input v, 1/rms and weight (+ offset);
    PAIRS: bf16 rounded and widened two values at a time (rmsnorm.kernels.rounding)."""
    if HAS_W:
        if LLAMA:
            return widen(round_pairs(v * rstd, NORM_DTYPE, SOFT_BF16, PAIRS), v.dtype, PAIRS) * w
        else:
            return v * rstd * w
    else:
        return v * rstd


# The two entry points of each path share one body: the plain forward passes QUANT=NONE
# (its signature, which librmsnorm's compiled kernels take, has no quantization arguments);
# the quantized forward (rmsnorm.kernels.quantize) passes its epilogue's pointers and flags.
# Row counts are never specialized (Triton would compile a count of 1, or one divisible by
# 16, as a kernel of its own): the AOT build compiles the same code for every count.
@triton.jit(do_not_specialize=["M", "H", "rstd_rows"])
def fwd_tile_kernel(
    X, RESIDUAL, W, Y, RESIDUAL_OUT, RSTD,
    M, N, H, rstd_rows,
    sx_o, sx_i, sresidual_o, sresidual_i, sy_o, sy_i, sresidual_out_o, sresidual_out_i,
    eps, offset,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, NUM_STAGES: tl.constexpr,
    W_RESIDENT: tl.constexpr, CHUNKS: tl.constexpr, KEEP_STORED: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr, HAS_W: tl.constexpr,
    TWO_LEVEL: tl.constexpr, LLAMA: tl.constexpr, ACC: tl.constexpr,
    SOFT_BF16: tl.constexpr, PDL: tl.constexpr, VEC: tl.constexpr,
    NORMALIZE_FP32_SUM: tl.constexpr = False,
):
    _tile_rows(X, RESIDUAL, W, Y, RESIDUAL_OUT, RSTD, Y, Y, Y,
               M, N, H, rstd_rows,
               sx_o, sx_i, sresidual_o, sresidual_i, sy_o, sy_i, sresidual_out_o, sresidual_out_i,
               0, 0, 0, 0, 0, eps, offset,
               BLOCK_N, ROWS, NUM_STAGES, W_RESIDENT, CHUNKS, KEEP_STORED, HAS_RESIDUAL, HAS_W,
               TWO_LEVEL, LLAMA, ACC, SOFT_BF16, PDL, VEC,
               q.NONE, Y.dtype.element_ty, 0, NORMALIZE_FP32_SUM, False)


@triton.jit(do_not_specialize=["M", "H", "rstd_rows", "ss_row", "ss_col", "store_unq", "has_ub",
                               "ue8m0"])
def fwd_quant_tile_kernel(
    X, RESIDUAL, W, Y, RESIDUAL_OUT, RSTD, SCALE, SCALE_UB, UNQ,
    M, N, H, rstd_rows,
    sx_o, sx_i, sresidual_o, sresidual_i, sy_o, sy_i, sresidual_out_o, sresidual_out_i,
    ss_row, ss_col, store_unq, has_ub, ue8m0, eps, offset,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, NUM_STAGES: tl.constexpr,
    W_RESIDENT: tl.constexpr, CHUNKS: tl.constexpr, KEEP_STORED: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr, HAS_W: tl.constexpr,
    TWO_LEVEL: tl.constexpr, LLAMA: tl.constexpr, ACC: tl.constexpr,
    SOFT_BF16: tl.constexpr, PDL: tl.constexpr, VEC: tl.constexpr,
    QUANT: tl.constexpr, Q_DTYPE: tl.constexpr, GROUP_SIZE: tl.constexpr,
    NORMALIZE_FP32_SUM: tl.constexpr = False, QUANTIZER_FUSED: tl.constexpr = False,
):
    """The tile forward with y quantized: Y holds Q_DTYPE values (their bits as uint8 for
    fp8 under the interpreter); UNQ, of y's dtype and Y's strides, takes the unquantized y
    when store_unq. SCALE is read (STATIC) or written (TOKEN: row r's at r * ss_row; GROUP:
    group g's at r * ss_row + g * ss_col); SCALE_UB bounds TOKEN's max, and GROUP's with
    QUANTIZER_FUSED, when has_ub; ue8m0 rounds GROUP's scales up to powers of two. These
    three are run-time flags, not constexprs: the AOT build compiles a kernel per mode and
    format, not per option."""
    _tile_rows(X, RESIDUAL, W, Y, RESIDUAL_OUT, RSTD, SCALE, SCALE_UB, UNQ,
               M, N, H, rstd_rows,
               sx_o, sx_i, sresidual_o, sresidual_i, sy_o, sy_i, sresidual_out_o, sresidual_out_i,
               ss_row, ss_col, store_unq, has_ub, ue8m0, eps, offset,
               BLOCK_N, ROWS, NUM_STAGES, W_RESIDENT, CHUNKS, KEEP_STORED, HAS_RESIDUAL, HAS_W,
               TWO_LEVEL, LLAMA, ACC, SOFT_BF16, PDL, VEC,
               QUANT, Q_DTYPE, GROUP_SIZE, NORMALIZE_FP32_SUM, QUANTIZER_FUSED)


@triton.jit
def _tile_rows(
    X, RESIDUAL, W, Y, RESIDUAL_OUT, RSTD, SCALE, SCALE_UB, UNQ,
    M, N, H, rstd_rows,
    sx_o, sx_i, sresidual_o, sresidual_i, sy_o, sy_i, sresidual_out_o, sresidual_out_i,
    ss_row, ss_col, store_unq, has_ub, ue8m0, eps, offset,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, NUM_STAGES: tl.constexpr,
    W_RESIDENT: tl.constexpr, CHUNKS: tl.constexpr, KEEP_STORED: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr, HAS_W: tl.constexpr,
    TWO_LEVEL: tl.constexpr, LLAMA: tl.constexpr, ACC: tl.constexpr,
    SOFT_BF16: tl.constexpr, PDL: tl.constexpr, VEC: tl.constexpr,
    QUANT: tl.constexpr, Q_DTYPE: tl.constexpr, GROUP_SIZE: tl.constexpr,
    NORMALIZE_FP32_SUM: tl.constexpr, QUANTIZER_FUSED: tl.constexpr,
):
    # The row is held as CHUNKS tiles of BLOCK_N columns (a tuple of tensors): a width that
    # is not a power of two, such as 3 x 2048, then needs no tile of the next power of two
    # whose masked lanes would hold registers and threads for nothing.
    wait_for_prior_grid(PDL)
    eps, offset = _as_fp32(eps, offset)
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = _row_cols(BLOCK_N, VEC)
    # The quantized forward is bound by instructions, not bytes (without a residual) or by
    # its latency (decode): there bf16 is rounded and widened two values at a time
    # (rmsnorm.kernels.rounding; the same bits). ptxas, bf16 -> e4m3 at 4096 columns, the
    # row loop: static 597 -> 520 instructions, per token 929 -> 821; the fused add's no
    # shorter, but the static forward's decode went from 1.11-1.16x the plain forward's time
    # to 1.02-1.05x. The plain forward keeps the compiler's conversions.
    PAIRS: tl.constexpr = QUANT != q.NONE and not SOFT_BF16
    ws = ()
    if HAS_W and W_RESIDENT:
        for k in tl.static_range(CHUNKS):
            w_cols = k * BLOCK_N + cols
            ws = ws + (_row_weight(W, w_cols, N, offset, ACC, PAIRS)[None, :],)
    if HAS_RESIDUAL:
        norm_dtype: tl.constexpr = RESIDUAL_OUT.dtype.element_ty
    else:
        norm_dtype: tl.constexpr = X.dtype.element_ty
    if QUANT == q.NONE:
        y_dtype: tl.constexpr = Y.dtype.element_ty
    else:
        y_dtype: tl.constexpr = UNQ.dtype.element_ty
    if QUANT == q.STATIC:
        static_scale = tl.load(SCALE)
        static_inverse = tl.math.div_rn(1.0, static_scale)
    n_blocks = tl.cdiv(M, ROWS)
    for blk in tl.range(pid, n_blocks, nprog, num_stages=NUM_STAGES):
        rows = tl.cast(blk, tl.int64) * ROWS + tl.arange(0, ROWS)
        row_mask = rows < M
        x_row = _row_start(rows, H, sx_o, sx_i, TWO_LEVEL)[:, None]
        vs = ()
        for k in tl.static_range(CHUNKS):
            c = (k * BLOCK_N + cols)[None, :]
            mask = row_mask[:, None] & (c < N)
            kept = tl.load(X + x_row + c, mask=mask, other=0.0, eviction_policy="evict_first")
            v = widen(kept, ACC, PAIRS)
            if HAS_RESIDUAL:
                residual_at = _row_start(rows, H, sresidual_o, sresidual_i,
                                         TWO_LEVEL)[:, None] + c
                residual = tl.load(RESIDUAL + residual_at, mask=mask, other=0.0,
                                   eviction_policy="evict_first")
                total = v + widen(residual, ACC, PAIRS)
                residual_out = round_pairs(total, RESIDUAL_OUT.dtype.element_ty, SOFT_BF16,
                                           PAIRS)
                residual_out_at = _row_start(rows, H, sresidual_out_o, sresidual_out_i,
                                             TWO_LEVEL)[:, None] + c
                tl.store(RESIDUAL_OUT + residual_out_at, residual_out, mask=mask)
                if NORMALIZE_FP32_SUM:
                    # vLLM's fused quantized kernels and FlashInfer's fused add normalize the
                    # sum before its rounding; the row is then held in fp32.
                    tl.static_assert(not KEEP_STORED)
                    v = total
                else:
                    v = widen(residual_out, ACC, PAIRS)
                kept = residual_out
            # Squares summed chunk by chunk, element by element, then across the tile: one
            # order for every row of a width.
            if k == 0:
                sq = v * v
            else:
                sq += v * v
            vs = vs + (kept if KEEP_STORED else v,)
        rstd = _inv_rms(tl.sum(sq, axis=1), N, eps, ACC)
        tl.store(RSTD + rows, rstd, mask=rows < rstd_rows)
        y_row = _row_start(rows, H, sy_o, sy_i, TWO_LEVEL)[:, None]
        if QUANT == q.TOKEN:
            # The row's scale needs all of y first: y is formed once and kept, in its own
            # dtype (two 16-bit values to a register), for the pass that quantizes it. Its
            # max is taken in that dtype too: exact, and packed on the GPU.
            amax = tl.zeros((ROWS,), y_dtype)
            ys = ()
            for k in tl.static_range(CHUNKS):
                c = (k * BLOCK_N + cols)[None, :]
                y = _tile_y(vs[k], ws, k, W, c, N, offset, rstd, norm_dtype, y_dtype, HAS_W,
                            W_RESIDENT, KEEP_STORED, LLAMA, ACC, SOFT_BF16, PAIRS)
                amax = tl.maximum(amax, tl.max(q.abs_for_max(y, SOFT_BF16), axis=1))
                ys = ys + (y,)
            amax = amax.to(tl.float32)
            row_scale = q.token_scale(amax, SCALE_UB, has_ub, Q_DTYPE, SOFT_BF16,
                                      QUANTIZER_FUSED)
            row_inverse = q.token_inverse(amax, row_scale, Q_DTYPE, QUANTIZER_FUSED)
            tl.store(SCALE + rows * ss_row, row_scale, mask=row_mask)
        for k in tl.static_range(CHUNKS):
            c = (k * BLOCK_N + cols)[None, :]
            mask = row_mask[:, None] & (c < N)
            if QUANT == q.TOKEN:
                y = ys[k]
            else:
                y = _tile_y(vs[k], ws, k, W, c, N, offset, rstd, norm_dtype, y_dtype, HAS_W,
                            W_RESIDENT, KEEP_STORED, LLAMA, ACC, SOFT_BF16, PAIRS)
            if QUANT == q.NONE:
                tl.store(Y + y_row + c, y, mask=mask)
            else:
                tl.store(UNQ + y_row + c, y, mask=mask & (store_unq != 0))
                yf = widen(y, tl.float32, PAIRS)
                if QUANT == q.STATIC:
                    out = q.quantize(yf, static_scale, static_inverse, QUANT, Q_DTYPE, SOFT_BF16,
                                     True)
                elif QUANT == q.TOKEN:
                    out = q.quantize(yf, row_scale[:, None], row_inverse[:, None], QUANT, Q_DTYPE,
                                     SOFT_BF16, has_ub, QUANTIZER_FUSED)
                else:
                    out = _quantize_groups(yf, rows, row_mask, k * BLOCK_N, N, SCALE, ss_row,
                                           ss_col, ROWS, BLOCK_N, GROUP_SIZE, Q_DTYPE,
                                           ue8m0, SCALE_UB, has_ub, SOFT_BF16, QUANTIZER_FUSED)
                tl.store(Y + y_row + c, out, mask=mask)


@triton.jit
def _tile_y(kept, ws, k: tl.constexpr, W, c, N, offset, rstd, norm_dtype: tl.constexpr,
            y_dtype: tl.constexpr, HAS_W: tl.constexpr, W_RESIDENT: tl.constexpr,
            KEEP_STORED: tl.constexpr, LLAMA: tl.constexpr, ACC: tl.constexpr,
            SOFT_BF16: tl.constexpr, PAIRS: tl.constexpr):
    """Chunk k's y, in y_dtype, from its kept input (as loaded when KEEP_STORED), the rows'
    1/rms and the weight (held in ws when W_RESIDENT)."""
    if HAS_W and W_RESIDENT:
        w = ws[k]
    else:
        w = _weight_at(W, c, N, offset, HAS_W, ACC, PAIRS)
    v = _widen(kept, ACC) if KEEP_STORED else kept
    return round_pairs(_scale(v, rstd[:, None], w, norm_dtype, HAS_W, LLAMA, SOFT_BF16, PAIRS),
                       y_dtype, SOFT_BF16, PAIRS)


@triton.jit
def _weight_at(W, c, N, offset, HAS_W: tl.constexpr, ACC: tl.constexpr,
               PAIRS: tl.constexpr = False):
    """The weight (+ offset) of columns c, where it is not held in registers."""
    if HAS_W:
        # Long rows: the weight would take as many registers as the row; L1 serves it.
        return _row_weight(W, c, N, offset, ACC, PAIRS)
    else:
        return offset


@triton.jit
def _quantize_groups(yf, rows, row_mask, col0, N, SCALE, ss_row, ss_col,
                     ROWS: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_SIZE: tl.constexpr,
                     Q_DTYPE: tl.constexpr, ue8m0, SCALE_UB, has_ub, SOFT: tl.constexpr,
                     FUSED: tl.constexpr = False):
    """A (ROWS, BLOCK_N) tile of y starting at column col0, quantized per GROUP_SIZE columns;
    the groups' scales are stored (FUSED: bounded by SCALE_UB when has_ub)."""
    tl.static_assert(BLOCK_N % GROUP_SIZE == 0)
    GROUPS: tl.constexpr = BLOCK_N // GROUP_SIZE
    g = tl.reshape(yf, (ROWS, GROUPS, GROUP_SIZE))
    s = q.group_scale(tl.max(q.abs_for_max(g, SOFT), axis=2), Q_DTYPE, ue8m0, SCALE_UB, has_ub,
                      SOFT, FUSED)
    first = col0 // GROUP_SIZE + tl.arange(0, GROUPS)
    at = rows[:, None] * ss_row + first[None, :] * ss_col
    tl.store(SCALE + at, s, mask=row_mask[:, None] & (first * GROUP_SIZE < N)[None, :])
    inverse = tl.math.div_rn(1.0, s)
    out = q.quantize(g, s[:, :, None], inverse[:, :, None], q.GROUP, Q_DTYPE, SOFT, False,
                     FUSED)
    return tl.reshape(out, (ROWS, BLOCK_N))

@triton.jit(do_not_specialize=["M", "H", "rstd_rows"])
def fwd_loop_kernel(
    X, RESIDUAL, W, Y, RESIDUAL_OUT, RSTD,
    M, N, H, rstd_rows,
    sx_o, sx_i, sresidual_o, sresidual_i, sy_o, sy_i, sresidual_out_o, sresidual_out_i,
    eps, offset,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, NUM_STAGES: tl.constexpr,
    W_RESIDENT: tl.constexpr, CHUNKS: tl.constexpr, KEEP_STORED: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr, HAS_W: tl.constexpr,
    TWO_LEVEL: tl.constexpr, LLAMA: tl.constexpr, ACC: tl.constexpr,
    SOFT_BF16: tl.constexpr, PDL: tl.constexpr, VEC: tl.constexpr,
    NORMALIZE_FP32_SUM: tl.constexpr = False,
):
    _loop_rows(X, RESIDUAL, W, Y, RESIDUAL_OUT, RSTD, Y, Y, Y,
               M, N, H, rstd_rows,
               sx_o, sx_i, sresidual_o, sresidual_i, sy_o, sy_i, sresidual_out_o, sresidual_out_i,
               0, 0, 0, 0, 0, eps, offset,
               BLOCK_N, ROWS, NUM_STAGES, W_RESIDENT, CHUNKS, KEEP_STORED, HAS_RESIDUAL, HAS_W,
               TWO_LEVEL, LLAMA, ACC, SOFT_BF16, PDL, VEC,
               q.NONE, Y.dtype.element_ty, 0, NORMALIZE_FP32_SUM, False)


@triton.jit(do_not_specialize=["M", "H", "rstd_rows", "ss_row", "ss_col", "store_unq", "has_ub",
                               "ue8m0"])
def fwd_quant_loop_kernel(
    X, RESIDUAL, W, Y, RESIDUAL_OUT, RSTD, SCALE, SCALE_UB, UNQ,
    M, N, H, rstd_rows,
    sx_o, sx_i, sresidual_o, sresidual_i, sy_o, sy_i, sresidual_out_o, sresidual_out_i,
    ss_row, ss_col, store_unq, has_ub, ue8m0, eps, offset,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, NUM_STAGES: tl.constexpr,
    W_RESIDENT: tl.constexpr, CHUNKS: tl.constexpr, KEEP_STORED: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr, HAS_W: tl.constexpr,
    TWO_LEVEL: tl.constexpr, LLAMA: tl.constexpr, ACC: tl.constexpr,
    SOFT_BF16: tl.constexpr, PDL: tl.constexpr, VEC: tl.constexpr,
    QUANT: tl.constexpr, Q_DTYPE: tl.constexpr, GROUP_SIZE: tl.constexpr,
    NORMALIZE_FP32_SUM: tl.constexpr = False, QUANTIZER_FUSED: tl.constexpr = False,
):
    """The looped forward with y quantized (arguments as fwd_quant_tile_kernel's)."""
    _loop_rows(X, RESIDUAL, W, Y, RESIDUAL_OUT, RSTD, SCALE, SCALE_UB, UNQ,
               M, N, H, rstd_rows,
               sx_o, sx_i, sresidual_o, sresidual_i, sy_o, sy_i, sresidual_out_o, sresidual_out_i,
               ss_row, ss_col, store_unq, has_ub, ue8m0, eps, offset,
               BLOCK_N, ROWS, NUM_STAGES, W_RESIDENT, CHUNKS, KEEP_STORED, HAS_RESIDUAL, HAS_W,
               TWO_LEVEL, LLAMA, ACC, SOFT_BF16, PDL, VEC,
               QUANT, Q_DTYPE, GROUP_SIZE, NORMALIZE_FP32_SUM, QUANTIZER_FUSED)


@triton.jit
def _loop_rows(
    X, RESIDUAL, W, Y, RESIDUAL_OUT, RSTD, SCALE, SCALE_UB, UNQ,
    M, N, H, rstd_rows,
    sx_o, sx_i, sresidual_o, sresidual_i, sy_o, sy_i, sresidual_out_o, sresidual_out_i,
    ss_row, ss_col, store_unq, has_ub, ue8m0, eps, offset,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, NUM_STAGES: tl.constexpr,
    W_RESIDENT: tl.constexpr, CHUNKS: tl.constexpr, KEEP_STORED: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr, HAS_W: tl.constexpr,
    TWO_LEVEL: tl.constexpr, LLAMA: tl.constexpr, ACC: tl.constexpr,
    SOFT_BF16: tl.constexpr, PDL: tl.constexpr, VEC: tl.constexpr,
    QUANT: tl.constexpr, Q_DTYPE: tl.constexpr, GROUP_SIZE: tl.constexpr,
    NORMALIZE_FP32_SUM: tl.constexpr, QUANTIZER_FUSED: tl.constexpr,
):
    # ROWS, W_RESIDENT, CHUNKS and KEEP_STORED are part of the shared signature; this path
    # owns one row at a time, walks it in tiles and streams the weight with the row.
    tl.static_assert(ROWS == 1)
    tl.static_assert(CHUNKS == 1)
    tl.static_assert(not KEEP_STORED)
    wait_for_prior_grid(PDL)
    eps, offset = _as_fp32(eps, offset)
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = _row_cols(BLOCK_N, VEC)
    if QUANT == q.NONE:
        y_dtype: tl.constexpr = Y.dtype.element_ty
    else:
        y_dtype: tl.constexpr = UNQ.dtype.element_ty
    if QUANT == q.STATIC:
        static_scale = tl.load(SCALE)
        static_inverse = tl.math.div_rn(1.0, static_scale)
    for r in tl.range(pid, M, nprog):
        row = tl.cast(r, tl.int64)
        x_row = X + _row_start(row, H, sx_o, sx_i, TWO_LEVEL)
        y_at = _row_start(row, H, sy_o, sy_i, TWO_LEVEL)
        if HAS_RESIDUAL:
            residual_row = RESIDUAL + _row_start(row, H, sresidual_o, sresidual_i, TWO_LEVEL)
            residual_out_row = RESIDUAL_OUT + _row_start(row, H, sresidual_out_o,
                                                         sresidual_out_i, TWO_LEVEL)
            norm_dtype: tl.constexpr = RESIDUAL_OUT.dtype.element_ty
            src_row = residual_out_row
        else:
            norm_dtype: tl.constexpr = X.dtype.element_ty
            src_row = x_row
            residual_row = x_row

        # Pass 1: sum of squares, tile by tile (and the residual sum, written once).
        sum_sq = tl.cast(0.0, ACC)
        for start in tl.range(0, N, BLOCK_N, num_stages=NUM_STAGES):
            c = start + cols
            m = c < N
            v = tl.load(x_row + c, mask=m, other=0.0, eviction_policy="evict_last").to(ACC)
            if HAS_RESIDUAL:
                residual = tl.load(residual_row + c, mask=m, other=0.0,
                                   eviction_policy="evict_first")
                if NORMALIZE_FP32_SUM:
                    # The unrounded sum is normalized: the passes below add it again from x
                    # and the residual, and the last one writes its rounding (after its
                    # reads: the residual may be updated in place).
                    v = v + residual.to(ACC)
                else:
                    residual_out = round_to(v + residual.to(ACC),
                                            RESIDUAL_OUT.dtype.element_ty, SOFT_BF16)
                    tl.store(residual_out_row + c, residual_out, mask=m,
                             eviction_policy="evict_last")
                    v = residual_out.to(ACC)
            sum_sq += _tile_sumsq(v)
        rstd = _inv_rms(sum_sq, N, eps, ACC)
        tl.store(RSTD + row, rstd, mask=row < rstd_rows)

        last = tl.cdiv(N, BLOCK_N) - 1
        if QUANT == q.TOKEN:
            # The row's scale needs all of y first: one more pass (from L2) for its max.
            amax = tl.cast(0.0, tl.float32)
            for i in tl.range(0, last + 1, num_stages=NUM_STAGES):
                c = (last - i) * BLOCK_N + cols
                m = c < N
                v = _norm_input(x_row, residual_row, src_row, c, m, "evict_last", HAS_RESIDUAL,
                                NORMALIZE_FP32_SUM, ACC)
                y = round_to(_scale(v, rstd, _weight_at(W, c, N, offset, HAS_W, ACC), norm_dtype,
                                    HAS_W, LLAMA, SOFT_BF16), y_dtype, SOFT_BF16)
                amax = tl.maximum(amax, tl.max(q.abs_for_max(y.to(tl.float32), SOFT_BF16),
                                                     axis=0))
            row_scale = q.token_scale(amax, SCALE_UB, has_ub, Q_DTYPE, SOFT_BF16,
                                      QUANTIZER_FUSED)
            row_inverse = q.token_inverse(amax, row_scale, Q_DTYPE, QUANTIZER_FUSED)
            tl.store(SCALE + row * ss_row, row_scale)

        # Pass 2: re-read the row and normalize, last tile first: the tiles pass 1 read last
        # are the likeliest to still be in L1/L2.
        for i in tl.range(0, last + 1, num_stages=NUM_STAGES):
            c = (last - i) * BLOCK_N + cols
            m = c < N
            v = _norm_input(x_row, residual_row, src_row, c, m, "evict_first", HAS_RESIDUAL,
                            NORMALIZE_FP32_SUM, ACC)
            if HAS_RESIDUAL and NORMALIZE_FP32_SUM:
                tl.store(residual_out_row + c, round_to(v, RESIDUAL_OUT.dtype.element_ty,
                                                        SOFT_BF16), mask=m)
            y = round_to(_scale(v, rstd, _weight_at(W, c, N, offset, HAS_W, ACC), norm_dtype,
                                HAS_W, LLAMA, SOFT_BF16), y_dtype, SOFT_BF16)
            if QUANT == q.NONE:
                tl.store(Y + y_at + c, y, mask=m)
            else:
                tl.store(UNQ + y_at + c, y, mask=m & (store_unq != 0))
                yf = y.to(tl.float32)
                if QUANT == q.STATIC:
                    out = q.quantize(yf, static_scale, static_inverse, QUANT, Q_DTYPE, SOFT_BF16,
                                     True)
                elif QUANT == q.TOKEN:
                    out = q.quantize(yf, row_scale, row_inverse, QUANT, Q_DTYPE, SOFT_BF16,
                                     has_ub, QUANTIZER_FUSED)
                else:
                    out = tl.reshape(
                        _quantize_groups(yf[None, :], row + tl.zeros((1,), tl.int64),
                                         row + tl.zeros((1,), tl.int64) < M,
                                         (last - i) * BLOCK_N, N, SCALE, ss_row, ss_col, 1,
                                         BLOCK_N, GROUP_SIZE, Q_DTYPE, ue8m0, SCALE_UB,
                                         has_ub, SOFT_BF16, QUANTIZER_FUSED),
                        (BLOCK_N,))
                tl.store(Y + y_at + c, out, mask=m)


@triton.jit
def _norm_input(x_row, residual_row, src_row, c, m, POLICY: tl.constexpr,
                HAS_RESIDUAL: tl.constexpr, NORMALIZE_FP32_SUM: tl.constexpr, ACC: tl.constexpr):
    """A looped row's tile as normalized, read again: x, the rounded sum (src_row), or the
    unrounded sum of x and the residual."""
    if HAS_RESIDUAL and NORMALIZE_FP32_SUM:
        v = tl.load(x_row + c, mask=m, other=0.0, eviction_policy=POLICY).to(ACC)
        return v + tl.load(residual_row + c, mask=m, other=0.0,
                           eviction_policy=POLICY).to(ACC)
    else:
        return tl.load(src_row + c, mask=m, other=0.0, eviction_policy=POLICY).to(ACC)
