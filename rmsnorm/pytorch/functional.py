"""The public functions: rms_norm and fused_add_rms_norm.

One route: each call is a call of an rmsnorm op (rmsnorm/pytorch/csrc, registered with PyTorch's
dispatcher from C++), which PyTorch dispatches as it does its own ops: autograd (the C++
formulas), torch.compile (Inductor calls the op; fake kernels in fake.py), DTensor (the sharding
rules of rmsnorm.integrations.dtensor), then the device's kernel. On CUDA that is librmsnorm's
compiled kernels where they cover the call and the Python launcher (rmsnorm.launch.ops) for
the rest; on the CPU the launcher (Triton's interpreter, or the contract's PyTorch recipe).
rmsnorm.status() says which serves what.

Python checks here only what the ops' schemas cannot carry (argument types, which the errors
must name); the values are checked where the kernels run.
"""

import sys

import torch
from torch import Tensor

from rmsnorm.launch import validation
from rmsnorm.pytorch import native, recipes

_fwd = native.op("fwd")
_add_fwd = native.op("add_fwd")
_add_fwd_inplace = native.op("add_fwd_inplace")
_fwd_into = native.op("fwd_into")

# What the schemas take as `float` without a Python-level check (bool is refused: type(True)
# is bool).
_NUMBERS = (float, int)


def rms_norm(x, weight=None, eps=1e-6, *, offset=0.0, casting_mode=None, recipe=None,
             out=None):
    """RMSNorm over the last dimension: x * rsqrt(mean(x^2) + eps) * (weight + offset).

    casting_mode "llama" (the default) rounds x * rsqrt(...) to x.dtype before the weight and
    returns promote_types(x.dtype, weight.dtype) (HF LlamaRMSNorm); "gemma" rounds once and
    returns x.dtype (HF GemmaRMSNorm, torch.nn.functional.rms_norm). recipe ("vllm",
    "flashinfer"; rmsnorm.pytorch.recipes) sets casting_mode as that engine's kernel computes
    it. `out` may alias x; it is not differentiable.
    """
    if recipe is None:
        casting_mode = "llama" if casting_mode is None else casting_mode
    else:
        casting_mode = recipes.resolve(recipe, casting_mode).casting_mode
    # Inline, not a helper: a Python call here is a measurable share of the call's host time.
    if (type(eps) not in _NUMBERS or type(offset) not in _NUMBERS or
            type(casting_mode) is not str or not isinstance(x, Tensor) or
            (weight is not None and not isinstance(weight, Tensor))):
        eps, offset = _checked(x, weight, eps, offset, casting_mode)
    sharded = type(x) is not Tensor and _is_dtensor(x)
    if sharded:
        # Before DTensor's sharding propagation, which would wrap the error.
        _dtensor().check_rows_whole("x", x)
    if out is None:
        try:
            return _fwd(x, weight, eps, offset, casting_mode, False)[0]
        except NotImplementedError:  # a layout no kernel is registered for: say which
            _name_the_layout(x=x, weight=weight)
            raise
    _check_out(out)
    if sharded:
        # rmsnorm::fwd_into has no sharding rule: DTensor's out= is a copy.
        _no_out_under_autograd(x, weight)
        return out.copy_(_fwd(x, weight, eps, offset, casting_mode, False)[0])
    _fwd_into(x, None, weight, out, None, eps, offset, casting_mode, "rounded")
    return out


def fused_add_rms_norm(x, residual, weight=None, eps=1e-6, *, offset=0.0,
                       casting_mode=None, normalized_sum=None, recipe=None, inplace=False,
                       out=None):
    """residual_out = x + residual (rounded to residual.dtype); returns
    (rms_norm(residual_out), residual_out).

    normalized_sum "fp32" normalizes the unrounded sum instead (residual_out is still the
    rounded one; its backward, in PyTorch ops, keeps that sum in fp32); recipe sets
    casting_mode and normalized_sum as rms_norm's does.

    With inplace=True the sum is written into `residual` itself, which is returned as the
    second element. `out` may alias x. Under autograd x and residual both receive the
    gradient of residual_out; inplace=True then costs one extra copy into residual (autograd
    must see the update), and `out` is not supported.
    """
    if not isinstance(residual, Tensor):
        raise TypeError(f"residual must be a torch.Tensor, got {type(residual).__name__} "
                        "(for the norm alone call rms_norm)")
    if type(inplace) is not bool:  # a truthy "no" would update the residual
        raise TypeError(f"inplace must be a bool, got {type(inplace).__name__}")
    casting_mode, normalized_sum, _ = recipes.resolve(recipe, casting_mode, normalized_sum,
                                                      fused=True)
    if type(normalized_sum) is not str:
        validation.check_normalized_sum(normalized_sum, True)
    if (type(eps) not in _NUMBERS or type(offset) not in _NUMBERS or
            type(casting_mode) is not str or not isinstance(x, Tensor) or
            (weight is not None and not isinstance(weight, Tensor))):
        eps, offset = _checked(x, weight, eps, offset, casting_mode)
    sharded = type(x) is not Tensor and _is_dtensor(x)
    if sharded:
        _dtensor().check_rows_whole("x", x)
        if _is_dtensor(residual):
            _dtensor().check_rows_whole("residual", residual)
    if out is None and not inplace:
        try:
            y, residual_out, _ = _add_fwd(x, residual, weight, eps, offset, casting_mode,
                                          normalized_sum, False)
        except NotImplementedError:
            _name_the_layout(x=x, residual=residual, weight=weight)
            raise
        return y, residual_out
    if out is None and not sharded:
        return _add_fwd_inplace(x, residual, weight, eps, offset, casting_mode,
                                normalized_sum), residual
    _check_out(out)
    if sharded:
        # No sharding rule writes into caller-owned tensors: DTensor's in place and out= are
        # copies.
        if out is not None:
            _no_out_under_autograd(x, residual, weight)
        y, residual_out, _ = _add_fwd(x, residual, weight, eps, offset, casting_mode,
                                      normalized_sum, False)
        if inplace:
            residual_out = residual.copy_(residual_out)
        return (y if out is None else out.copy_(y)), residual_out
    residual_out = residual if inplace else torch.empty_like(
        residual, memory_format=torch.contiguous_format)
    _fwd_into(x, residual, weight, out, residual_out, eps, offset, casting_mode, normalized_sum)
    return out, residual_out


def _checked(x, weight, eps, offset, casting_mode):
    """The argument checks the schemas cannot make with the errors' names; returns eps and
    offset as the ops take them."""
    validation.check_x(x)
    if weight is not None:
        validation.check_tensor("weight", weight)
    compiling = torch.compiler.is_compiling()
    validation.check_scalars(eps, offset, casting_mode, weight, values=not compiling)
    symbolic = (torch.SymFloat, torch.SymInt)  # traced values stay as they are
    return tuple(v if isinstance(v, symbolic) else float(v) for v in (eps, offset))


def _check_out(out):
    # Off the calls without out=; the op's schema would name its own parameter (y).
    if out is not None and not isinstance(out, Tensor):
        raise TypeError(f"out must be a torch.Tensor or None, got {type(out).__name__}")


def _name_the_layout(**tensors):
    """Sparse and nested tensors reach no kernel (the dispatcher has none for them): the
    error names the argument instead of the dispatch key."""
    for name, t in tensors.items():
        if t is not None:
            validation.check_tensor(name, t)


def _is_dtensor(x):
    # Only tensor subclasses get here. A DTensor can only exist once torch.distributed.tensor
    # is imported; importing it for every user of rmsnorm would cost about half a second.
    return "torch.distributed.tensor" in sys.modules and _dtensor().is_dtensor(x)


def _dtensor():
    from rmsnorm.integrations import dtensor  # registers the sharding rules on first import
    return dtensor


def _no_out_under_autograd(*tensors):
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        raise RuntimeError("out= is not differentiable: an input requires grad; call without "
                           "out (or under torch.no_grad())")
