"""The torch.library custom ops behind the public functions, their fake (meta) kernels and
their autograd formulas.

Registered ops (namespace "rmsnorm"):
- `fwd(x, weight?, eps, offset, llama, save_rstd) -> (y, rstd)`: differentiable.
- `add_fwd(x, residual, weight?, eps, offset, llama, save_rstd) -> (y, residual_out, rstd)`:
  the fused residual add; differentiable; x and residual both receive the gradient of
  residual_out.
- `fwd_into(x, residual?, weight?, y!, residual_out!?, eps, offset, llama)`: writes y (and
  the sum, residual_out, which may be residual itself) into caller-owned tensors; no autograd
  (out= and in-place).
- `bwd(dy, x, weight?, rstd, dresidual?, offset, llama, need_dw) -> (dx, dw)`.

Eager autograd takes EagerNorm/EagerAddNorm below instead: same kernels and formulas, less
host time. DTensor inputs always take the ops (fwd, add_fwd, bwd), whose sharding rules
rmsnorm.integrations.dtensor registers: the Functions call the launcher, which needs local tensors.
On both routes a backward that must itself be differentiable (create_graph=True: grad mode
is on inside it, and an input of it requires grad) computes the same contract with a
differentiable PyTorch formula instead of the kernels (`_differentiable_grads`), so double
backward (gradient penalties) is right, DTensor included; under AOTAutograd (torch.compile's
default backends) PyTorch itself refuses a double backward.
Being opaque custom ops with fake kernels, the ops trace under torch.compile(fullgraph=True)
without graph breaks, and Inductor's fp64 Python floats reach the kernels as fp32 (the kernels
cast eps and offset). rstd is only written when a backward will need it (save_rstd), which the
public functions decide from requires_grad.
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from rmsnorm.launch import contract, ops


def _mode(llama):
    return "llama" if llama else "gemma"


def _no_rstd(x):
    return x.new_empty((0,), dtype=contract.acc_dtype(x.dtype))


@torch.library.custom_op("rmsnorm::fwd", mutates_args=())
def fwd(x: Tensor, weight: Optional[Tensor], eps: float, offset: float, llama: bool,
        save_rstd: bool) -> Tuple[Tensor, Tensor]:
    y, _, rstd = ops.forward(x, weight, eps, offset=offset, casting_mode=_mode(llama),
                             return_rstd=save_rstd)
    return y, rstd if save_rstd else _no_rstd(x)


@fwd.register_fake
def _fwd_fake(x, weight, eps, offset, llama, save_rstd):
    y = x.new_empty(x.shape, dtype=contract.output_dtype(x.dtype, weight, _mode(llama)))
    return y, _rstd_fake(x, x.dtype, save_rstd)


def _rstd_fake(x, norm_dtype, save_rstd):
    shape = x.shape[:-1] if save_rstd else (0,)
    return x.new_empty(shape, dtype=contract.acc_dtype(norm_dtype))


@torch.library.custom_op("rmsnorm::add_fwd", mutates_args=())
def add_fwd(x: Tensor, residual: Tensor, weight: Optional[Tensor], eps: float, offset: float,
            llama: bool, save_rstd: bool) -> Tuple[Tensor, Tensor, Tensor]:
    y, residual_out, rstd = ops.forward(x, weight, eps, offset=offset,
                                        casting_mode=_mode(llama), residual=residual,
                                        return_rstd=save_rstd)
    return y, residual_out, rstd if save_rstd else _no_rstd(residual)


@add_fwd.register_fake
def _add_fwd_fake(x, residual, weight, eps, offset, llama, save_rstd):
    y = x.new_empty(x.shape,
                    dtype=contract.output_dtype(residual.dtype, weight, _mode(llama)))
    residual_out = x.new_empty(x.shape, dtype=residual.dtype)
    return y, residual_out, _rstd_fake(x, residual.dtype, save_rstd)


@torch.library.custom_op("rmsnorm::fwd_into", mutates_args=("y", "residual_out"))
def fwd_into(x: Tensor, residual: Optional[Tensor], weight: Optional[Tensor], y: Tensor,
             residual_out: Optional[Tensor], eps: float, offset: float, llama: bool) -> None:
    ops.forward(x, weight, eps, offset=offset, casting_mode=_mode(llama), residual=residual,
                out=y, residual_out=residual_out)


@fwd_into.register_fake
def _fwd_into_fake(x, residual, weight, y, residual_out, eps, offset, llama):
    return None


@torch.library.custom_op("rmsnorm::bwd", mutates_args=())
def bwd(dy: Tensor, x: Tensor, weight: Optional[Tensor], rstd: Tensor,
        dresidual: Optional[Tensor], offset: float, llama: bool,
        need_dw: bool) -> Tuple[Tensor, Tensor]:
    dx, dw = ops.backward(dy, x, weight, rstd, offset=offset, casting_mode=_mode(llama),
                          dresidual=dresidual, need_dw=need_dw)
    return dx, dw if dw is not None else x.new_empty((0,))


@bwd.register_fake
def _bwd_fake(dy, x, weight, rstd, dresidual, offset, llama, need_dw):
    dx = x.new_empty(x.shape)
    if need_dw and weight is not None:
        return dx, weight.new_empty(weight.shape)
    return dx, x.new_empty((0,))


def _grads(ctx, dy, dresidual, backward):
    """(the gradient of the norm's input, dw) for the saved forward; `backward` is the bwd
    custom op (traceable) or, in eager autograd, a direct call of the launcher."""
    norm_input, weight, rstd = ctx.saved_tensors
    if rstd.numel() == 0 and norm_input.numel() != 0:
        raise RuntimeError("rmsnorm: the forward ran without saving rstd (no input required "
                           "grad then); backward through it is not possible")
    need_dw = weight is not None and ctx.needs_input_grad[ctx.weight_index]
    if dy is None:
        dy = torch.zeros_like(norm_input, dtype=ctx.y_dtype)
    if _needs_graph(dy, dresidual, norm_input, weight):
        return _differentiable_grads(dy, norm_input, weight, dresidual, ctx.eps, ctx.offset,
                                     ctx.llama, need_dw)
    dnorm_input, dw = backward(dy, norm_input, weight, rstd, dresidual, ctx.offset, ctx.llama,
                               need_dw)
    return dnorm_input, dw if need_dw else None


def _needs_graph(*tensors):
    """Whether the backward must itself be differentiable: autograd runs it with grad mode on
    only for create_graph=True, and then a graph is needed if any of its inputs requires grad.
    Otherwise (every first-order backward) the kernels run."""
    return torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in tensors)


def _differentiable_grads(dy, x, weight, dresidual, eps, offset, llama, need_dw):
    """(dx, dw) of DESIGN.md's "Backward" in differentiable PyTorch ops, for double backward.

    As the kernels: fp32 math (fp64 for float64), dx in x's dtype plus `dresidual` (the fused
    add), dw in the weight's dtype. Unlike them, rstd is recomputed from x (not the saved
    one), so that the second-order terms in x are complete. "llama" rounds xhat to x's dtype
    for dw; that rounding is straight-through here (identity for the second-order terms), as
    the kernels' dx already treats it. Values: the kernels' within fp32 rounding (another
    reduction order, rstd recomputed). Plain tensor ops, so DTensor runs them too.
    """
    acc = contract.acc_dtype(x.dtype)
    v = x.to(acc)
    r = torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + contract.fp32(eps))
    xhat = v * r
    dy = dy.to(acc)
    g = dy if weight is None else dy * (weight.to(acc) + contract.fp32(offset))
    dx = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    if dresidual is not None:
        dx = dx + dresidual.to(acc)
    if not need_dw:
        return dx.to(x.dtype), None
    if llama:
        # round(xhat) in value, xhat's graph: round(xhat) - xhat is exact (Sterbenz: the two
        # are within a factor of 2), so adding it back gives the rounded value exactly.
        xhat = xhat + (xhat.to(x.dtype).to(acc) - xhat).detach()
    prod = dy * xhat
    dw = prod.sum(tuple(range(prod.dim() - 1))) if prod.dim() > 1 else prod
    return dx.to(x.dtype), dw.to(weight.dtype)


def _direct_bwd(dy, x, weight, rstd, dresidual, offset, llama, need_dw):
    return ops.backward(dy, x, weight, rstd, offset=offset, casting_mode=_mode(llama),
                        dresidual=dresidual, need_dw=need_dw)


def _setup(ctx, norm_input, weight, rstd, eps, offset, llama, y, weight_index):
    ctx.save_for_backward(norm_input, weight, rstd)
    ctx.offset, ctx.llama, ctx.y_dtype, ctx.weight_index = offset, llama, y.dtype, weight_index
    ctx.eps = eps  # only a differentiable backward (double backward) recomputes rstd


def _fwd_setup(ctx, inputs, output):
    x, weight, eps, offset, llama, _ = inputs
    y, rstd = output
    _setup(ctx, x, weight, rstd, eps, offset, llama, y, 1)


def _fwd_backward(ctx, dy, _drstd):
    dx, dw = _grads(ctx, dy, None, bwd)
    return dx, dw, None, None, None, None


def _add_fwd_setup(ctx, inputs, output):
    x, residual, weight, eps, offset, llama, _ = inputs
    y, residual_out, rstd = output
    _setup(ctx, residual_out, weight, rstd, eps, offset, llama, y, 2)
    ctx.x_dtype = x.dtype


def _add_fwd_backward(ctx, dy, dresidual, _drstd):
    return _add_grads(ctx, dy, dresidual, bwd) + (None,) * 4


def _add_grads(ctx, dy, dresidual, backward):
    dnorm_input, dw = _grads(ctx, dy, dresidual, backward)
    # One gradient for both addends; x only needs its own copy when its dtype differs
    # (bf16 activations on an fp32 residual stream).
    dx = dnorm_input if dnorm_input.dtype == ctx.x_dtype else dnorm_input.to(ctx.x_dtype)
    return dx, dnorm_input, dw


fwd.register_autograd(_fwd_backward, setup_context=_fwd_setup)
add_fwd.register_autograd(_add_fwd_backward, setup_context=_add_fwd_setup)


class EagerNorm(torch.autograd.Function):
    """rms_norm under eager autograd: the same kernels and formulas as the `fwd` op, without
    the custom-op dispatch (tens of microseconds of host time per call)."""

    @staticmethod
    def forward(ctx, x, weight, eps, offset, llama):
        y, _, rstd = ops.forward(x, weight, eps, offset=offset, casting_mode=_mode(llama),
                                 return_rstd=True)
        _setup(ctx, x, weight, rstd, eps, offset, llama, y, 1)
        return y

    @staticmethod
    def backward(ctx, dy):
        return _grads(ctx, dy, None, _direct_bwd) + (None,) * 3


class EagerAddNorm(torch.autograd.Function):
    """fused_add_rms_norm under eager autograd (see EagerNorm)."""

    @staticmethod
    def forward(ctx, x, residual, weight, eps, offset, llama):
        y, residual_out, rstd = ops.forward(x, weight, eps, offset=offset,
                                            casting_mode=_mode(llama), residual=residual,
                                            return_rstd=True)
        _setup(ctx, residual_out, weight, rstd, eps, offset, llama, y, 2)
        ctx.x_dtype = x.dtype
        return y, residual_out

    @staticmethod
    def backward(ctx, dy, dresidual):
        return _add_grads(ctx, dy, dresidual, _direct_bwd) + (None,) * 3
