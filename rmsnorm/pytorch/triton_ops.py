"""The Python launcher (rmsnorm.launch.ops: Triton's kernels, or on the CPU its interpreter or
the contract's PyTorch ops) as kernels of the op library: the rmsnorm::triton_* ops (CPU and
CUDA), which the C++ CUDA kernels of the rmsnorm ops call for what the compiled kernels do not
cover, and the rmsnorm ops' own CPU kernels, so that a CPU call goes from the dispatcher
straight to Python. Their errors are the launcher's, which name the argument at fault."""

import torch

from rmsnorm.launch import contract, ops, quant

_lib = torch.library.Library("rmsnorm", "IMPL")


def _no_rstd(x, norm_dtype):
    return x.new_empty((0,), dtype=contract.acc_dtype(norm_dtype))


def _fwd(x, weight, eps, offset, casting_mode, return_rstd):
    y, _, rstd = ops.forward(x, weight, eps, offset=offset, casting_mode=casting_mode,
                             return_rstd=return_rstd)
    return y, rstd if return_rstd else _no_rstd(x, x.dtype)


def _add_fwd(x, residual, weight, eps, offset, casting_mode, normalized_sum, return_rstd):
    y, residual_out, rstd = ops.forward(x, weight, eps, offset=offset,
                                        casting_mode=casting_mode, residual=residual,
                                        return_rstd=return_rstd, normalized_sum=normalized_sum)
    return y, residual_out, rstd if return_rstd else _no_rstd(x, residual.dtype)


def _add_fwd_inplace(x, residual, weight, eps, offset, casting_mode, normalized_sum):
    y, _, _ = ops.forward(x, weight, eps, offset=offset, casting_mode=casting_mode,
                          residual=residual, inplace=True, normalized_sum=normalized_sum)
    return y


def _fwd_into(x, residual, weight, y, residual_out, eps, offset, casting_mode, normalized_sum):
    ops.forward(x, weight, eps, offset=offset, casting_mode=casting_mode, residual=residual,
                out=y, residual_out=residual_out, normalized_sum=normalized_sum)


def _bwd(dy, x, weight, rstd, dresidual, offset, casting_mode, need_dw):
    dx, dw = ops.backward(dy, x, weight, rstd, offset=offset, casting_mode=casting_mode,
                          dresidual=dresidual, need_dw=need_dw)
    return dx, dw if dw is not None else x.new_empty((0,))


def _quant_outputs(x, residual, weight, casting_mode, out, scales, residual_out, unquantized,
                   static):
    """The op's outputs, with an empty tensor (of the dtype the fake kernel gives it) for each
    the caller did not ask for."""
    norm_dtype = residual.dtype if residual is not None else x.dtype
    if static:
        scales = x.new_empty((0,), dtype=torch.float32)
    if residual_out is None:
        residual_out = x.new_empty((0,))
    if unquantized is None:
        unquantized = x.new_empty((0,), dtype=contract.output_dtype(norm_dtype, weight,
                                                                    casting_mode))
    return out, scales, residual_out, unquantized


def _quant_fwd(x, residual, weight, scale, scale_ub, eps, offset, casting_mode, normalized_sum,
               quantizer, quant_dtype, group_size, ue8m0, transposed_scales, return_unquantized):
    out, scales, residual_out, unquantized = quant.forward_quant(
        x, weight, eps, offset=offset, casting_mode=casting_mode, residual=residual,
        normalized_sum=normalized_sum, quantizer=quantizer,
        quant_dtype=quant_dtype, scale=scale, group_size=group_size or None, scale_ub=scale_ub,
        ue8m0=ue8m0, transposed_scales=transposed_scales, return_unquantized=return_unquantized)
    return _quant_outputs(x, residual, weight, casting_mode, out, scales, residual_out,
                          unquantized, scale is not None)


def _quant_add_fwd_inplace(x, residual, weight, scale, scale_ub, eps, offset, casting_mode,
                           normalized_sum, quantizer, quant_dtype, group_size, ue8m0,
                           transposed_scales, return_unquantized):
    out, scales, _, unquantized = quant.forward_quant(
        x, weight, eps, offset=offset, casting_mode=casting_mode, residual=residual,
        normalized_sum=normalized_sum, quantizer=quantizer,
        inplace=True, quant_dtype=quant_dtype, scale=scale, group_size=group_size or None,
        scale_ub=scale_ub, ue8m0=ue8m0, transposed_scales=transposed_scales,
        return_unquantized=return_unquantized)
    out, scales, _, unquantized = _quant_outputs(x, residual, weight, casting_mode, out, scales,
                                                 None, unquantized, scale is not None)
    return out, scales, unquantized


KERNELS = {"fwd": _fwd, "add_fwd": _add_fwd, "add_fwd_inplace": _add_fwd_inplace,
           "fwd_into": _fwd_into, "bwd": _bwd, "quant_fwd": _quant_fwd,
           "quant_add_fwd_inplace": _quant_add_fwd_inplace}

for _name, _fn in KERNELS.items():
    _lib.impl("triton_" + _name, _fn, "CPU")
    _lib.impl("triton_" + _name, _fn, "CUDA")
    _lib.impl(_name, _fn, "CPU")
