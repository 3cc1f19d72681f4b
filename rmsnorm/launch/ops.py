"""The launcher under the public functions: validation, allocation and the launch of the
forward and backward kernels. rmsnorm.pytorch.functional (the public API) and
rmsnorm.pytorch.autograd call it."""

import contextlib
import dataclasses
import functools

import torch
import triton.language as tl

from rmsnorm.kernels.backward import bwd_loop_kernel, bwd_tile_kernel, dw_reduce_kernel
from rmsnorm.kernels.backward_split import bwd_cols_kernel, bwd_dot_kernel
from rmsnorm.kernels.forward import (fwd_loop_kernel, fwd_quant_loop_kernel,
                                     fwd_quant_tile_kernel, fwd_tile_kernel)
from rmsnorm.kernels.forward_split import fwd_scale_kernel, fwd_sumsq_kernel
from rmsnorm.launch import configs, contract, validation as v
from rmsnorm.launch.layout import plan_rows
from rmsnorm.launch.runner import Prepared

try:
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # pragma: no cover - every supported triton has it
    InterpretedFunction = ()

# Triton decides at decoration time whether a kernel runs compiled or under its interpreter
# (TRITON_INTERPRET=1 set before triton is imported); ask the kernel itself.
INTERPRETED = isinstance(fwd_tile_kernel, InterpretedFunction)

# The interpreter runs programs one after another: two programs keep both the multi-program
# and the persistent-loop code exercised on small test shapes.
INTERPRETER_PROGRAMS = 2


def forward(x, weight=None, eps=1e-6, *, offset=0.0, casting_mode="llama", residual=None,
            inplace=False, out=None, residual_out=None, return_rstd=False, launch=None,
            normalized_sum="rounded"):
    """Shared forward: returns (y, residual_out or None, rstd or None).

    The sum of the fused add goes to `residual_out` when given, to `residual` itself with
    inplace=True, else to a new tensor; normalized_sum "fp32" normalizes it unrounded. rstd (one fp32 value per row, fp64 for float64 input,
    shape x.shape[:-1]) is what the backward pass reuses. `launch` (a configs.Launch)
    replaces the table's choice; the tuning sweep uses it.
    """
    v.check_x(x)
    device = x.device
    n = x.shape[-1]
    v.check_weight(weight, n, device)
    fused = residual is not None
    if fused:
        v.check_same_shape("residual", residual, x, device)
    elif inplace:
        raise ValueError("inplace=True needs a residual tensor to update")
    elif residual_out is not None:
        raise ValueError("residual_out is the fused add's sum; it needs a residual tensor")
    if residual_out is not None:
        if inplace and residual_out is not residual:
            raise ValueError("inplace=True writes the sum into residual; residual_out must be "
                             "residual or None")
        inplace = residual_out is residual
    v.check_scalars(eps, offset, casting_mode, weight)
    v.check_normalized_sum(normalized_sum, fused)
    v.check_float64_not_mixed(x=x, residual=residual, weight=weight)

    norm_dtype = residual.dtype if fused else x.dtype
    out_dtype = contract.output_dtype(norm_dtype, weight, casting_mode)
    if out is not None:
        v.check_same_shape("out", out, x, device)
        if out.dtype != out_dtype:
            raise TypeError(f"out has dtype {out.dtype}, expected {out_dtype} (casting_mode="
                            f"{casting_mode!r}, input {norm_dtype}, weight "
                            f"{None if weight is None else weight.dtype})")
    if residual_out is not None and not inplace:
        v.check_same_shape("residual_out", residual_out, x, device)
        if residual_out.dtype != residual.dtype:
            raise TypeError(f"residual_out has dtype {residual_out.dtype}, expected "
                            f"{residual.dtype} (the residual's)")
    _check_outputs(x, residual, weight, out, residual if inplace else residual_out, inplace)
    x, weight = _resolved(x), _resolved(weight)
    if not inplace:
        residual = _resolved(residual)

    y = out if out is not None else alloc(x.shape, out_dtype, device)
    if inplace:
        residual_out = residual
    elif fused and residual_out is None:
        residual_out = alloc(x.shape, residual.dtype, device)
    rstd = alloc(x.shape[:-1], contract.acc_dtype(norm_dtype), device) if return_rstd else None

    if x.numel() == 0:
        return y, residual_out, rstd
    if device.type == "cpu" and not INTERPRETED:
        _forward_recipe(x, residual, weight, eps, offset, casting_mode, y, residual_out, rstd,
                        normalized_sum)
        return y, residual_out, rstd
    _launch(x, residual, weight, eps, offset, casting_mode, y, residual_out, rstd, launch,
            fp32_sum=normalized_sum == "fp32")
    return y, residual_out, rstd


def _resolved(t):
    """t with its negative bit applied: the kernels read raw memory (`x._neg_view()` and
    `z.conj().imag` store -x and z.imag)."""
    return t.resolve_neg() if t is not None and t.is_neg() else t


def _check_outputs(x, residual, weight, out, residual_out, inplace):
    """What the forward writes (y into `out`, the sum into `residual_out`) against what it
    reads: each output may be an input exactly (read before it is written, by the same
    thread) or share no element with it; the two outputs share nothing; the weight, read by
    every row, shares nothing with an output."""
    residual_out_name = "residual (updated in place)" if inplace else "residual_out"
    if out is not None:
        v.check_writable("out", out)
        v.check_no_partial_alias("out", out, "x", x)
        if inplace:
            v.check_disjoint("out", out, "residual", residual, ", which inplace=True also "
                                                               "writes")
        else:
            v.check_no_partial_alias("out", out, "residual", residual)
            v.check_disjoint("out", out, "residual_out", residual_out,
                             "; they are two different results")
        v.check_disjoint("out", out, "weight", weight, ", which every row reads")
    if residual_out is not None:
        v.check_writable(residual_out_name, residual_out)
        v.check_no_partial_alias(residual_out_name, residual_out, "x", x)
        if not inplace:
            v.check_no_partial_alias(residual_out_name, residual_out, "residual", residual)
        v.check_disjoint(residual_out_name, residual_out, "weight", weight,
                         ", which every row reads")


def alloc(shape, dtype, device):
    """Every output the launcher allocates comes from here: torch.empty, which PyTorch fills
    with NaN under deterministic mode with fill_uninitialized_memory."""
    return torch.empty(shape, dtype=dtype, device=device)


def _forward_recipe(x, residual, weight, eps, offset, casting_mode, y, residual_out, rstd,
                    normalized_sum="rounded"):
    """CPU without the interpreter: DESIGN.md's contract in PyTorch ops."""
    if residual is None:
        y_ref, r = contract.contract_rms_norm(x, weight, eps, offset=offset,
                                               casting_mode=casting_mode)
    else:
        y_ref, residual_out_ref, r = contract.contract_fused_add_rms_norm(
            x, residual, weight, eps, offset=offset, casting_mode=casting_mode,
            normalized_sum=normalized_sum)
        residual_out.copy_(residual_out_ref)
    y.copy_(y_ref)
    if rstd is not None:
        rstd.copy_(r.squeeze(-1))


def _readable(t):
    """Inputs are copied when their last dimension is strided (documented behaviour)."""
    return t if t.shape[-1] == 1 or t.stride(-1) == 1 else t.contiguous()


def _meta(t):
    return None if t is None else (t.stride(), t.dtype)


def _aligned(*tensors):
    return all(t is None or t.data_ptr() % 16 == 0 for t in tensors)


def _staged(t):
    """A fresh contiguous copy of t (fresh allocations are 16-byte aligned)."""
    return None if t is None else t.clone(memory_format=torch.contiguous_format)


def _launch(x, residual, weight, eps, offset, casting_mode, y, residual_out, rstd, launch,
            quant=None, fp32_sum=False):
    """quant: the quantized epilogue's arguments (rmsnorm.launch.quant.Epilogue), whose
    outputs (y among them) are the launcher's own contiguous allocations. fp32_sum: the fused
    add normalizes its unrounded sum (normalized_sum="fp32")."""
    fused = residual is not None
    inplace = fused and residual is residual_out
    x = _readable(x)
    if fused and not inplace:
        residual = _readable(residual)
    if weight is not None:
        weight = weight.contiguous()
    if launch is None:
        launch = configs.forward_launch(
            x.shape[-1], max(x.element_size(), residual.element_size() if fused else 0), fused,
            weight.element_size() if weight is not None else 0, _arch(x.device),
            _table_dtype(x, residual))
    else:
        _check_launch(launch, x.shape[-1], "fwd")
    if fp32_sum:
        launch = fp32_sum_launch(launch, x, residual, weight)
    spec = _launch_spec(x.shape, x.device, _meta(x), _meta(residual), _meta(y), _meta(residual_out),
                        None if weight is None else weight.dtype, rstd is not None,
                        casting_mode, launch, quant and quant.flags,
                        quant and quant.unquantized.dtype, fp32_sum)
    if spec is None or not spec[2] or not _aligned(x, residual, weight, y, residual_out):
        # Not the kernel the same data laid out contiguously would run (more than two
        # levels of row strides, a pointer off 16 bytes, a row stride that Triton
        # specializes otherwise than n, or one of 2^31 elements or more): run that kernel
        # on contiguous copies, so that every layout gives the contiguous layout's bits.
        y_c = y if quant else alloc(y.shape, y.dtype, y.device)
        if inplace:
            # The residual, read and then overwritten with the sum.
            residual_out_c = _staged(residual_out)
        else:
            residual_out_c = None if residual_out is None else \
                alloc(residual_out.shape, residual_out.dtype, residual_out.device)
        _launch(_staged(x), residual_out_c if inplace else _staged(residual), _staged(weight), eps,
                offset, casting_mode, y_c, residual_out_c, rstd, launch, quant, fp32_sum)
        if y_c is not y:
            y.copy_(y_c)
        if fused:
            residual_out.copy_(residual_out_c)
        return
    prepared, sizes, _ = spec
    if quant:
        with _on_device(x.device):
            prepared(x, residual if fused else x, weight if weight is not None else x, y,
                     residual_out if fused else y, rstd if rstd is not None else y,
                     *quant.pointers(y), *sizes, *quant.scalars(sizes[0]), float(eps),
                     float(offset))
        return
    # The split forward normalizes the rounded sum it wrote: the unrounded one takes the loop.
    if not fp32_sum and (launch.path == "split" or (launch.path == "loop" and
                                                    sizes[0] < _split_below(x.device, fused))):
        _split_forward(x, residual, weight, y, residual_out, rstd, sizes, eps, offset, casting_mode,
                       launch, prepared.constexprs["TWO_LEVEL"])
        return
    with _on_device(x.device):
        prepared(x, residual if fused else x, weight if weight is not None else x, y,
                 residual_out if fused else y, rstd if rstd is not None else y,
                 *sizes, float(eps), float(offset))


def fp32_sum_launch(launch, x, residual, weight):
    """configs.fp32_sum_launch for x's rows."""
    return configs.fp32_sum_launch(
        launch, max(x.element_size(), residual.element_size()),
        weight.element_size() if weight is not None else 0, _arch(x.device),
        _table_dtype(x, residual))


def _check_launch(launch, n, op):
    """Refuses, by name, an explicit launch (tests, the sweep) that cannot serve rows of n
    elements for op ("fwd" or "bwd")."""
    if launch.path == "tile" and launch.block_n * launch.chunks < n:
        raise ValueError(f"launch {launch} holds {launch.block_n * launch.chunks} columns; "
                         f"the rows have {n}")
    if launch.keep_stored and op == "bwd":
        raise ValueError(f"launch {launch}: keep_stored is a forward tile's; the backward "
                         "holds its rows in fp32")
    if launch.keep_stored and launch.path != "tile":
        raise ValueError(f"launch {launch}: keep_stored is for tile launches (a looped row "
                         "is read again, not kept)")


def _split_below(device, fused):
    """Looped rows fewer than this take the split forward (configs.SPLIT_FORWARD_SM_DIVISOR)."""
    if INTERPRETED:
        return INTERPRETER_PROGRAMS
    return configs.split_forward_below("add" if fused else "fwd", _sm_count(device))


def _split_forward(x, residual, weight, y, residual_out, rstd, sizes, eps, offset,
                   casting_mode, launch, two_level):
    """The forward of rmsnorm.kernels.forward_split over the rows `sizes` describes (the
    looped kernel's sizes and strides, from _launch_spec)."""
    fused = residual is not None
    rows, n, inner, rstd_rows = sizes[:4]
    st_x, st_r, st_y, st_residual_out = sizes[4:6], sizes[6:8], sizes[8:10], sizes[10:12]
    tiles = -(-n // launch.block_n)
    dtypes = (x.dtype, residual.dtype if fused else None,
              weight.dtype if weight is not None else None, y.dtype,
              residual_out.dtype if fused else None)
    sumsq, scale = _split_forward_spec(x.device, rows * tiles, fused, weight is not None,
                                       two_level, casting_mode, dtypes, launch,
                                       (n, *sizes[4:]))
    sums = alloc((rows, tiles), _torch_acc(x.dtype), x.device)
    src, st_src = (residual_out, st_residual_out) if fused else (x, st_x)
    with _on_device(x.device):
        sumsq(x, residual if fused else x, residual_out if fused else x, sums, rows, n, inner,
              tiles, *st_x, *st_r, *st_residual_out)
        scale(src, weight if weight is not None else x, y, rstd if rstd is not None else y,
              sums, rows, n, inner, tiles, rstd_rows, *st_src, *st_y, float(eps), float(offset))


@functools.lru_cache(maxsize=1024)
def _split_forward_spec(device, items, fused, has_w, two_level, casting_mode, dtypes, launch,
                        ints):
    """The two prepared kernels. Every dtype they see is in the key (`dtypes`: x, residual,
    weight, y, residual_out): a Prepared reuses the code it compiled for the first call's."""
    acc = _acc(dtypes[0])
    grid = min(items, INTERPRETER_PROGRAMS if INTERPRETED else
               _sm_count(device) * launch.programs_per_sm)
    common = dict(BLOCK_N=launch.block_n, TWO_LEVEL=two_level, ACC=acc,
                  SOFT_BF16=INTERPRETED, PDL=_pdl(device), VEC=_row_vector(dtypes))
    sumsq = _prepare(fwd_sumsq_kernel, grid, 4, dict(common, HAS_RESIDUAL=fused),
                     launch.num_warps, ints)
    scale = _prepare(fwd_scale_kernel, grid, 5,
                     dict(common, HAS_W=has_w, LLAMA=casting_mode == "llama"),
                     launch.num_warps, ints)
    return sumsq, scale


def _torch_acc(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _as_twin(plan, n):
    """Whether the row strides of `plan` make Triton compile the kernel that the same rows
    laid out contiguously (row stride n) get: each stride below 2^31 exactly when n is
    (Triton types larger ones as 64-bit) and a multiple of 16 exactly when n is (the JIT
    specializes on it, and a kernel knowing its rows aligned sums them in another order)."""
    if plan.rows == 1:
        return True
    levels = 2 if plan.two_level else 1
    return all((st < 2 ** 31) == (n < 2 ** 31) and (st % 16 == 0) == (n % 16 == 0)
               for pair in plan.strides.values() for st in pair[:levels])


def _row_vector(dtypes):
    """configs.row_vector of the widest of the row's dtypes (None: a tensor the call lacks)."""
    return configs.row_vector(max(d.itemsize for d in dtypes if d is not None))


@functools.lru_cache(maxsize=4096)
def _launch_spec(shape, device, x_meta, residual_meta, y_meta, residual_out_meta, w_dtype,
                 has_rstd, casting_mode, launch, quant_flags=None, unquantized_dtype=None,
                 fp32_sum=False):
    """(prepared kernel, sizes and strides, whether the strides are the contiguous twin's
    kind: _as_twin) for one call signature, or None when the rows need more than two levels
    of strides. quant_flags: the quantized epilogue's constexprs, as (name, value) pairs;
    unquantized_dtype: its y's dtype (y_meta is then the quantized output's)."""
    fused = residual_meta is not None
    named = {"x": x_meta, "y": y_meta, "residual": residual_meta,
             "residual_out": residual_out_meta}
    strides = {k: m[0][:-1] for k, m in named.items() if m is not None}
    plan = plan_rows(shape[:-1], strides)
    if plan is None:
        return None
    n = shape[-1]
    # A quantized y stands for its unquantized twin, which the kernel also stores (bf16 x,
    # fp16 weight: an fp32 y).
    row_dtypes = (x_meta[1], w_dtype, unquantized_dtype or y_meta[1],
                  *(m[1] for m in (residual_meta, residual_out_meta) if m is not None))
    grid = _grid(launch, plan.rows, device)
    st = _strides_of(plan, n)
    zero = (0, 0)
    sizes = (plan.rows, n, plan.inner, plan.rows if has_rstd else 0,
             *st["x"], *st.get("residual", zero), *st["y"], *st.get("residual_out", zero))
    flags = dict(BLOCK_N=launch.block_n, ROWS=launch.rows, NUM_STAGES=launch.num_stages,
                 W_RESIDENT=launch.w_resident, CHUNKS=launch.chunks,
                 KEEP_STORED=launch.keep_stored, HAS_RESIDUAL=fused, HAS_W=w_dtype is not None,
                 TWO_LEVEL=plan.two_level, LLAMA=casting_mode == "llama",
                 ACC=_acc(x_meta[1]), SOFT_BF16=INTERPRETED, PDL=_pdl(device),
                 VEC=_row_vector(row_dtypes), NORMALIZE_FP32_SUM=fp32_sum)
    if quant_flags:
        flags.update(quant_flags)
        kernel = fwd_quant_tile_kernel if launch.path == "tile" else fwd_quant_loop_kernel
    else:
        kernel = fwd_tile_kernel if launch.path == "tile" else fwd_loop_kernel
    pointers = 9 if quant_flags else 6
    return (_prepare(kernel, grid, pointers, flags, launch.num_warps, (n, *sizes[4:]),
                     launch.max_registers), sizes, _as_twin(plan, n))


def backward(dy, x, weight, rstd, *, offset=0.0, casting_mode="llama", dresidual=None,
             need_dw=True, dx_out=None, launch=None):
    """Gradients of a forward that normalized x (for the fused add: its sum s) and saved rstd.

    Returns (dx, dw): dx in x's dtype, plus `dresidual` (the gradient reaching the fused
    add's sum output) when given, which makes it the gradient of both x and residual; dw in
    the weight's dtype, or None without a weight or with need_dw=False. dy is only read,
    unless the caller opts in with dx_out=dy (dx then overwrites it: saves memory where
    nothing else needs dy).
    """
    if dy.shape != x.shape:
        raise ValueError(f"dy has shape {tuple(dy.shape)}, expected {tuple(x.shape)}")
    if dresidual is not None and dresidual.shape != x.shape:
        raise ValueError(f"dresidual has shape {tuple(dresidual.shape)}, expected "
                         f"{tuple(x.shape)}")
    acc = contract.acc_dtype(x.dtype)
    if rstd.dtype != acc or rstd.shape != x.shape[:-1]:
        raise ValueError(f"rstd must be the forward's: shape {tuple(x.shape[:-1])} and dtype "
                         f"{acc}, got {tuple(rstd.shape)} {rstd.dtype}")
    need_dw = need_dw and weight is not None
    if dx_out is None:
        dx = alloc(x.shape, x.dtype, x.device)
    else:
        _check_dx_out(dx_out, dy, x, weight, rstd, dresidual)
        dx = dx_out
    dy, x, weight, dresidual = (_resolved(t) for t in (dy, x, weight, dresidual))
    if x.numel() == 0:
        dw = torch.zeros_like(weight) if need_dw else None
        return dx, dw
    if x.device.type == "cpu" and not INTERPRETED:
        dx_ref, dw_ref = contract.contract_rms_norm_backward(
            dy, x, weight, rstd, offset=offset, casting_mode=casting_mode, dresidual=dresidual)
        dx.copy_(dx_ref)
        return dx, dw_ref if need_dw else None
    return dx, _launch_backward(dy, x, weight, rstd.contiguous(), offset, casting_mode,
                                dresidual, dx, need_dw, launch)


def _check_dx_out(dx_out, dy, x, weight, rstd, dresidual):
    v.check_same_shape("dx_out", dx_out, x, x.device)
    if dx_out.dtype != x.dtype:
        raise TypeError(f"dx_out has dtype {dx_out.dtype}, expected {x.dtype} (x's)")
    v.check_writable("dx_out", dx_out)
    v.check_no_partial_alias("dx_out", dx_out, "dy", dy)
    for name, t in (("x", x), ("weight", weight), ("rstd", rstd), ("dresidual", dresidual)):
        v.check_disjoint("dx_out", dx_out, name, t, ", which the backward reads")


def _launch_backward(dy, x, weight, rstd, offset, casting_mode, dresidual, dx, need_dw, launch):
    x, dy = _readable(x), _readable(dy)
    dresidual = _readable(dresidual) if dresidual is not None else None
    if weight is not None:
        weight = weight.contiguous()
    n = x.shape[-1]
    if launch is None:
        widest = max(t.element_size() for t in (x, dy, dresidual) if t is not None)
        launch = configs.backward_launch(n, widest, dresidual is not None,
                                         weight.element_size() if weight is not None else 0,
                                         _arch(x.device), _table_dtype(x, dy, dresidual))
    else:
        _check_launch(launch, n, "bwd")
    spec = _backward_spec(x.shape, x.device, _meta(dy), _meta(x), _meta(dx), _meta(dresidual),
                          None if weight is None else weight.dtype, need_dw, casting_mode,
                          launch)
    if spec is None or not spec[2] or not _aligned(dy, x, weight, rstd, dx, dresidual):
        # As the forward's _launch: the contiguous layout's kernel, on contiguous copies.
        dx_c = alloc(dx.shape, dx.dtype, dx.device)
        dw = _launch_backward(_staged(dy), _staged(x), _staged(weight), _staged(rstd), offset,
                              casting_mode, _staged(dresidual), dx_c, need_dw, launch)
        dx.copy_(dx_c)
        return dw
    prepared, sizes, _ = spec
    if launch.path == "split":
        return _split_backward(dy, x, weight, rstd, offset, casting_mode, dresidual, dx, need_dw,
                               launch, sizes, prepared.constexprs["TWO_LEVEL"])
    programs = prepared.grid[0]
    partials = alloc((programs, n), rstd.dtype, x.device) if need_dw else None
    with _on_device(x.device):
        prepared(dy, x, weight if weight is not None else x, rstd, dx,
                 dresidual if dresidual is not None else dx, partials if need_dw else rstd,
                 *sizes, float(offset))
        if not need_dw:
            return None
        dw = alloc(weight.shape, weight.dtype, x.device)
        _reduce_spec(n, partials.dtype, dw.dtype, x.device)(partials, dw, programs, n)
    return dw


# The split backward's row segment, in tiles of the launch's block_n (a prototype constant).
SPLIT_SEG_TILES = 8


def _split_backward(dy, x, weight, rstd, offset, casting_mode, dresidual, dx, need_dw, launch,
                    sizes, two_level):
    """The two-grid backward of rmsnorm.kernels.backward_split (explicit launches only) over
    the rows `sizes` describes (the looped kernel's sizes and strides, from _backward_spec)."""
    rows, n, inner = sizes[:3]
    st_dy, st_x, st_dx, st_dresidual = sizes[3:5], sizes[5:7], sizes[7:9], sizes[9:11]
    device = x.device
    segments = -(-n // (launch.block_n * SPLIT_SEG_TILES))
    col_blocks = -(-n // launch.block_n)
    programs = INTERPRETER_PROGRAMS if INTERPRETED else \
        _sm_count(device) * launch.programs_per_sm
    rows_per_group = -(-rows // max(1, min(rows, programs // col_blocks)))
    groups = -(-rows // rows_per_group)
    common = dict(HAS_W=weight is not None, TWO_LEVEL=two_level, ACC=_acc(x.dtype),
                  PDL=_pdl(device))
    ints = (n, *sizes[3:])
    dot_kernel = _prepare(bwd_dot_kernel, min(rows * segments, programs), 5,
                          dict(common, BLOCK_N=launch.block_n, SEG_TILES=SPLIT_SEG_TILES,
                               NUM_STAGES=launch.num_stages), launch.num_warps, ints)
    cols_kernel = _prepare(bwd_cols_kernel, groups * col_blocks, 8,
                           dict(common, BLOCK_N=launch.block_n,
                                BLOCK_S=configs.next_pow2(segments),
                                NUM_STAGES=launch.num_stages, HAS_DRESIDUAL=dresidual is not None,
                                HAS_DW=need_dw, LLAMA=casting_mode == "llama",
                                SOFT_BF16=INTERPRETED), launch.num_warps, ints)
    dot = alloc((rows, segments), rstd.dtype, device)
    partials = alloc((groups, n), rstd.dtype, device) if need_dw else None
    w = weight if weight is not None else x
    with _on_device(device):
        dot_kernel(dy, x, w, rstd, dot, rows, n, inner, segments, *st_dy, *st_x, float(offset))
        cols_kernel(dy, x, w, rstd, dot, dx, dresidual if dresidual is not None else dx,
                    partials if need_dw else rstd, rows, n, inner, segments, rows_per_group,
                    *st_dy, *st_x, *st_dx, *st_dresidual, float(offset))
        if not need_dw:
            return None
        dw = alloc(weight.shape, weight.dtype, device)
        _reduce_spec(n, partials.dtype, dw.dtype, device)(partials, dw, groups, n)
    return dw


@functools.lru_cache(maxsize=4096)
def _backward_spec(shape, device, dy_meta, x_meta, dx_meta, dresidual_meta, w_dtype, need_dw,
                   casting_mode, launch):
    """(prepared kernel, sizes and strides, _as_twin) for one backward call signature, or
    None when the rows need more than two levels of strides. Every dtype the kernel sees is
    in the key."""
    named = {"dy": dy_meta, "x": x_meta, "dx": dx_meta, "dresidual": dresidual_meta}
    strides = {k: m[0][:-1] for k, m in named.items() if m is not None}
    plan = plan_rows(shape[:-1], strides)
    if plan is None:
        return None
    st = _strides_of(plan, shape[-1])
    sizes = (plan.rows, shape[-1], plan.inner,
             *st["dy"], *st["x"], *st["dx"], *st.get("dresidual", (0, 0)))
    flags = dict(BLOCK_N=launch.block_n, ROWS=launch.rows, NUM_STAGES=launch.num_stages,
                 W_RESIDENT=launch.w_resident, DW_RESIDENT=launch.dw_resident,
                 CHUNKS=launch.chunks, HAS_DRESIDUAL=dresidual_meta is not None,
                 HAS_W=w_dtype is not None,
                 HAS_DW=need_dw, TWO_LEVEL=plan.two_level, LLAMA=casting_mode == "llama",
                 ACC=_acc(x_meta[1]), SOFT_BF16=INTERPRETED, PDL=_pdl(device))
    kernel = bwd_tile_kernel if launch.path == "tile" else bwd_loop_kernel
    return (_prepare(kernel, _grid(launch, plan.rows, device), 7, flags,
                     launch.num_warps, (shape[-1], *sizes[3:])), sizes,
            _as_twin(plan, shape[-1]))


def _strides_of(plan, n):
    """The row strides the kernel gets. A single row's are never used: it gets n, as
    librmsnorm passes them, since the JIT specializes on a stride's divisibility by 16 and
    both paths must compile the same kernel."""
    if plan.rows == 1:
        return {name: (n, 0) for name in plan.strides}
    return plan.strides


@functools.lru_cache(maxsize=1024)
def _reduce_spec(n, partial_dtype, dw_dtype, device):
    """The dw reduction over rows of n partials. The dtypes and the device are part of
    the key: the compiled kernel Prepared reuses is specific to them."""
    block_p, block_c, warps = configs.reduce_launch(n)
    return _prepare(dw_reduce_kernel, -(-n // block_c), 2,
                    dict(BLOCK_P=block_p, BLOCK_C=block_c, SOFT_BF16=INTERPRETED,
                         PDL=_pdl(device)), warps, (n,))


def _prepare(kernel, grid, n_pointers, flags, num_warps, ints, max_registers=0):
    """ints: the int arguments Triton specializes on (n and the row strides)."""
    # Constexprs in the kernel's parameter order: the compiled launcher takes them so.
    constexprs = {name: flags[name] for name in kernel.arg_names if name in flags}
    assert len(constexprs) == len(flags), "a flag is not a parameter of the kernel"
    return Prepared(kernel, grid, n_pointers, constexprs, num_warps,
                    all(v % 16 == 0 for v in ints), max_registers)


# The launch table's names of the dtypes it may hold rows of their own for (configs.Rule).
TABLE_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32",
                torch.float64: "fp64"}


def _table_dtype(*streamed):
    """The table's name of the streamed tensors' dtype; None when they differ (rows of the
    widest element's size then serve)."""
    dtypes = {t.dtype for t in streamed if t is not None}
    return TABLE_DTYPES.get(dtypes.pop()) if len(dtypes) == 1 else None


def _acc(dtype):
    return tl.float64 if dtype == torch.float64 else tl.float32


def _grid(launch, rows, device):
    if INTERPRETED:
        return min(launch.grid(rows, 1), INTERPRETER_PROGRAMS)
    return launch.grid(rows, _sm_count(device))


def _pdl(device):
    """Whether the kernels wait on the prior grid (rmsnorm.kernels.prior_grid): as the AOT
    build compiles them for the device's arch, so both paths run the same code."""
    return device.type == "cuda" and not INTERPRETED and \
        configs.waits_on_prior_grid(_arch(device))


def _on_device(device):
    # Triton launches on the current CUDA device; make it the tensors' one.
    if device.type == "cuda" and device.index != torch.cuda.current_device():
        return torch.cuda.device(device)
    return contextlib.nullcontext()


def _arch(device):
    """The device's compute capability as major * 10 + minor (the launch table's arch key)."""
    if device.type != "cuda":
        return configs.DEFAULT_ARCH
    return _arch_of(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _arch_of(index):
    major, minor = torch.cuda.get_device_capability(index)
    return major * 10 + minor


@functools.lru_cache(maxsize=None)
def _sm_count_of(index):
    return torch.cuda.get_device_properties(index).multi_processor_count


def _sm_count(device):
    return _sm_count_of(device.index if device.index is not None else
                        torch.cuda.current_device())
