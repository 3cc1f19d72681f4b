"""The backward's launcher: validation, allocation and the launch of the backward kernels
and the dw reduction. Which kernel serves a call is rmsnorm.launch.specs' decision."""

import torch

from rmsnorm.launch import contract, specs, validation as v
from rmsnorm.launch.device import INTERPRETED, on_device
from rmsnorm.launch.tensors import aligned, alloc, meta, readable, resolved, staged


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
    dy, x, weight, dresidual = (resolved(t) for t in (dy, x, weight, dresidual))
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
    x, dy = readable(x), readable(dy)
    dresidual = readable(dresidual) if dresidual is not None else None
    if weight is not None:
        weight = weight.contiguous()
    n = x.shape[-1]
    if launch is None:
        launch = specs.backward_launch(dy, x, weight, dresidual)
    else:
        specs.check_launch(launch, n, "bwd")
    spec = specs.backward_spec(x.shape, x.device, meta(dy), meta(x), meta(dx), meta(dresidual),
                               None if weight is None else weight.dtype, need_dw, casting_mode,
                               launch)
    if spec is None or not spec[2] or not aligned(dy, x, weight, rstd, dx, dresidual):
        # As the forward's launch: the contiguous layout's kernel, on contiguous copies.
        dx_c = alloc(dx.shape, dx.dtype, dx.device)
        dw = _launch_backward(staged(dy), staged(x), staged(weight), staged(rstd), offset,
                              casting_mode, staged(dresidual), dx_c, need_dw, launch)
        dx.copy_(dx_c)
        return dw
    prepared, sizes, _ = spec
    if launch.path == "split":
        return _split_backward(dy, x, weight, rstd, offset, casting_mode, dresidual, dx, need_dw,
                               launch, sizes, prepared.constexprs["TWO_LEVEL"])
    programs = prepared.grid[0]
    partials = alloc((programs, n), rstd.dtype, x.device) if need_dw else None
    with on_device(x.device):
        prepared(dy, x, weight if weight is not None else x, rstd, dx,
                 dresidual if dresidual is not None else dx, partials if need_dw else rstd,
                 *sizes, float(offset))
        if not need_dw:
            return None
        dw = alloc(weight.shape, weight.dtype, x.device)
        specs.reduce_spec(n, partials.dtype, dw.dtype, x.device)(partials, dw, programs, n)
    return dw


def _split_backward(dy, x, weight, rstd, offset, casting_mode, dresidual, dx, need_dw, launch,
                    sizes, two_level):
    """The two-grid backward of rmsnorm.kernels.backward_split (explicit launches only) over
    the rows `sizes` describes (the looped kernel's sizes and strides, from
    specs.backward_spec)."""
    rows, n, inner = sizes[:3]
    st_dy, st_x, st_dx, st_dresidual = sizes[3:5], sizes[5:7], sizes[7:9], sizes[9:11]
    device = x.device
    segments, _, rows_per_group, groups = specs.split_backward_plan(rows, n, launch, device)
    dot_kernel, cols_kernel = specs.split_backward_kernels(
        rows, n, (n, *sizes[3:]), launch, device, weight is not None, two_level, x.dtype,
        dresidual is not None, need_dw, casting_mode)
    dot = alloc((rows, segments), rstd.dtype, device)
    partials = alloc((groups, n), rstd.dtype, device) if need_dw else None
    w = weight if weight is not None else x
    with on_device(device):
        dot_kernel(dy, x, w, rstd, dot, rows, n, inner, segments, *st_dy, *st_x, float(offset))
        cols_kernel(dy, x, w, rstd, dot, dx, dresidual if dresidual is not None else dx,
                    partials if need_dw else rstd, rows, n, inner, segments, rows_per_group,
                    *st_dy, *st_x, *st_dx, *st_dresidual, float(offset))
        if not need_dw:
            return None
        dw = alloc(weight.shape, weight.dtype, device)
        specs.reduce_spec(n, partials.dtype, dw.dtype, device)(partials, dw, groups, n)
    return dw
