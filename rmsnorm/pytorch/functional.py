"""The public functions: rms_norm and fused_add_rms_norm.

Routes, all ending in the same kernels and launches (so results are bit-identical):
- a DTensor x (eager or compiled): the differentiable custom ops, which DTensor runs on each
  rank's shard by the rules of rmsnorm.integrations.dtensor; out= and in-place are copies there;
- under torch.compile: the custom ops of rmsnorm.pytorch.autograd (opaque to the compiler, no graph
  breaks; differentiable, or writing into caller-owned tensors for out= and in-place);
- eager autograd (an input requires grad): autograd.Functions calling the launcher;
- plain eager inference: straight to the launcher, which costs the least host time; with the
  "c" backend (rmsnorm.pytorch.backend) first to librmsnorm, for what its kernels cover.
"""

import sys

import torch

from rmsnorm.launch import contract, ops, validation
from rmsnorm.pytorch import autograd, backend


def rms_norm(x, weight=None, eps=1e-6, *, offset=0.0, casting_mode="llama", out=None):
    """RMSNorm over the last dimension: x * rsqrt(mean(x^2) + eps) * (weight + offset).

    casting_mode "llama" rounds x * rsqrt(...) to x.dtype before the weight and returns
    promote_types(x.dtype, weight.dtype) (HF LlamaRMSNorm); "gemma" rounds once and returns
    x.dtype (HF GemmaRMSNorm, torch.nn.functional.rms_norm). `out` may alias x; it is not
    differentiable.
    """
    ext = backend.ext
    if ext is not None and out is None and not torch.compiler.is_compiling():
        # The extension checks the rest (inputs requiring grad included) and returns None
        # for what it does not take.
        try:
            y = ext.forward(x, weight, eps, offset, casting_mode)
        except TypeError:  # not tensors or numbers: the launcher's checks name the argument
            y = None
        if y is not None:
            return y
    grad, compiling = _needs_grad(x, weight), torch.compiler.is_compiling()
    sharded = type(x) is not torch.Tensor and _is_dtensor(x)
    if grad or compiling or sharded:
        # The ops take a bool and any float; the errors must still name the argument. (The
        # plain route below leaves the checks to ops.forward.)
        validation.check_scalars(eps, offset, casting_mode, weight, values=not compiling)
    llama = casting_mode == "llama"
    if sharded:
        return _dtensor().rms_norm(x, weight, eps, offset, llama, grad, out)
    if grad:
        _no_out_under_autograd(out=out)
        if compiling:
            return autograd.fwd(x, weight, eps, offset, llama, True)[0]
        return autograd.EagerNorm.apply(x, weight, eps, offset, llama)
    if compiling:
        if out is None:
            return autograd.fwd(x, weight, eps, offset, llama, False)[0]
        autograd.fwd_into(x, None, weight, out, None, eps, offset, llama)
        return out
    y, _, _ = ops.forward(x, weight, eps, offset=offset, casting_mode=casting_mode, out=out)
    return y


def fused_add_rms_norm(x, residual, weight=None, eps=1e-6, *, offset=0.0,
                       casting_mode="llama", inplace=False, out=None):
    """residual_out = x + residual (rounded to residual.dtype); returns
    (rms_norm(residual_out), residual_out).

    With inplace=True the sum is written into `residual` itself, which is returned as the
    second element. `out` may alias x. Under autograd x and residual both receive the
    gradient of residual_out; inplace=True then costs one extra copy into residual (autograd
    must see the update), and `out` is not supported.
    """
    if not isinstance(residual, torch.Tensor):
        raise TypeError(f"residual must be a torch.Tensor, got {type(residual).__name__} "
                        "(for the norm alone call rms_norm)")
    ext = backend.ext
    if ext is not None and out is None and not torch.compiler.is_compiling():
        try:
            ys = ext.fused_add_forward(x, residual, weight, eps, offset, casting_mode, inplace)
        except TypeError:
            ys = None
        if ys is not None:
            return ys
    grad, compiling = _needs_grad(x, residual, weight), torch.compiler.is_compiling()
    sharded = type(x) is not torch.Tensor and _is_dtensor(x)
    if grad or compiling or sharded:
        validation.check_scalars(eps, offset, casting_mode, weight, values=not compiling)
    llama = casting_mode == "llama"
    if sharded:
        return _dtensor().fused_add_rms_norm(x, residual, weight, eps, offset, llama,
                                             inplace, grad, out)
    if grad:
        _no_out_under_autograd(out=out)
        if compiling:
            y, residual_out, _ = autograd.add_fwd(x, residual, weight, eps, offset, llama, True)
        else:
            y, residual_out = autograd.EagerAddNorm.apply(x, residual, weight, eps, offset, llama)
        if inplace:
            residual.copy_(residual_out)
            return y, residual
        return y, residual_out
    if compiling:
        if out is None and not inplace:
            y, residual_out, _ = autograd.add_fwd(x, residual, weight, eps, offset, llama, False)
            return y, residual_out
        if out is None:
            out = torch.empty(x.shape, device=x.device, dtype=contract.output_dtype(
                residual.dtype, weight, casting_mode))
        residual_out = residual if inplace else torch.empty_like(
            residual, memory_format=torch.contiguous_format)
        autograd.fwd_into(x, residual, weight, out, residual_out, eps, offset, llama)
        return out, residual_out
    y, residual_out, _ = ops.forward(x, weight, eps, offset=offset, casting_mode=casting_mode,
                                     residual=residual, inplace=inplace, out=out)
    return y, residual_out


def _is_dtensor(x):
    # Only tensor subclasses get here. A DTensor can only exist once torch.distributed.tensor
    # is imported; importing it for every user of rmsnorm would cost about half a second.
    return "torch.distributed.tensor" in sys.modules and _dtensor().is_dtensor(x)


def _dtensor():
    from rmsnorm.integrations import dtensor  # registers the sharding rules on first import
    return dtensor


def _needs_grad(*tensors):
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def _no_out_under_autograd(out):
    if out is not None:
        raise RuntimeError("out= is not differentiable: an input requires grad; call without "
                           "out (or under torch.no_grad())")
