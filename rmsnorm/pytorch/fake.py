"""The rmsnorm ops' fake kernels: the shapes and dtypes of their outputs (the contract's dtype
rules), for torch.compile and FakeTensor tracing, and the meta kernels (meta tensors give meta
outputs: shape inference, models built on the meta device)."""

import torch

from rmsnorm.launch import contract, quant


def _one_device(x, **tensors):
    # The fake kernels are the meta kernels too: a meta weight with a CPU x lands here.
    for name, t in tensors.items():
        if t is not None and t.device != x.device:
            raise ValueError(f"{name} is on {t.device} but x is on {x.device}; all tensors "
                             "must be on one device")


def _rstd(x, norm_dtype, return_rstd):
    # The autograd kernel always asks for rstd; a plain call only when return_rstd.
    return x.new_empty(x.shape[:-1] if return_rstd else (0,),
                       dtype=contract.acc_dtype(norm_dtype))


@torch.library.register_fake("rmsnorm::fwd")
def _fwd(x, weight, eps, offset, casting_mode, return_rstd):
    _one_device(x, weight=weight)
    y = x.new_empty(x.shape, dtype=contract.output_dtype(x.dtype, weight, casting_mode))
    return y, _rstd(x, x.dtype, return_rstd)


@torch.library.register_fake("rmsnorm::add_fwd")
def _add_fwd(x, residual, weight, eps, offset, casting_mode, normalized_sum, return_rstd):
    _one_device(x, residual=residual, weight=weight)
    y = x.new_empty(x.shape, dtype=contract.output_dtype(residual.dtype, weight, casting_mode))
    residual_out = x.new_empty(x.shape, dtype=residual.dtype)
    return y, residual_out, _rstd(x, residual.dtype, return_rstd)


@torch.library.register_fake("rmsnorm::add_fwd_inplace")
def _add_fwd_inplace(x, residual, weight, eps, offset, casting_mode, normalized_sum):
    _one_device(x, residual=residual, weight=weight)
    return x.new_empty(x.shape, dtype=contract.output_dtype(residual.dtype, weight,
                                                            casting_mode))


@torch.library.register_fake("rmsnorm::fwd_into")
def _fwd_into(x, residual, weight, y, residual_out, eps, offset, casting_mode, normalized_sum):
    _one_device(x, residual=residual, weight=weight, out=y, residual_out=residual_out)
    return None


@torch.library.register_fake("rmsnorm::bwd")
def _bwd(dy, x, weight, rstd, dresidual, offset, casting_mode, need_dw):
    _one_device(x, dy=dy, weight=weight, rstd=rstd, dresidual=dresidual)
    dx = x.new_empty(x.shape)
    if need_dw and weight is not None:
        return dx, weight.new_empty(weight.shape)
    return dx, x.new_empty((0,))


def _quant_outputs(x, residual, weight, scale, casting_mode, quant_dtype, group_size,
                   transposed_scales, return_unquantized):
    """(out, scales, unquantized) as the launcher (rmsnorm.launch.quant) allocates them."""
    norm_dtype = residual.dtype if residual is not None else x.dtype
    out = x.new_empty(x.shape, dtype=quant_dtype)
    if scale is not None:
        scales = x.new_empty((0,), dtype=torch.float32)
    else:
        groups = x.shape[-1] // group_size if group_size else 1
        scales = _scales(x, groups, transposed_scales)
    unquantized = x.new_empty(x.shape if return_unquantized else (0,),
                              dtype=contract.output_dtype(norm_dtype, weight, casting_mode))
    return out, scales, unquantized


def _scales(x, groups, transposed):
    return quant.scales_like(
        x, groups, transposed, lambda shape, dtype, device: x.new_empty(shape, dtype=dtype))


@torch.library.register_fake("rmsnorm::quant_fwd")
def _quant_fwd(x, residual, weight, scale, scale_ub, eps, offset, casting_mode, normalized_sum,
               quantizer, quant_dtype, group_size, ue8m0, transposed_scales, return_unquantized):
    _one_device(x, residual=residual, weight=weight, scale=scale, scale_ub=scale_ub)
    out, scales, unquantized = _quant_outputs(x, residual, weight, scale, casting_mode,
                                              quant_dtype, group_size, transposed_scales,
                                              return_unquantized)
    residual_out = x.new_empty(x.shape if residual is not None else (0,),
                               dtype=residual.dtype if residual is not None else x.dtype)
    return out, scales, residual_out, unquantized


@torch.library.register_fake("rmsnorm::quant_add_fwd_inplace")
def _quant_add_fwd_inplace(x, residual, weight, scale, scale_ub, eps, offset, casting_mode,
                           normalized_sum, quantizer, quant_dtype, group_size, ue8m0,
                           transposed_scales, return_unquantized):
    _one_device(x, residual=residual, weight=weight, scale=scale, scale_ub=scale_ub)
    return _quant_outputs(x, residual, weight, scale, casting_mode, quant_dtype, group_size,
                          transposed_scales, return_unquantized)
