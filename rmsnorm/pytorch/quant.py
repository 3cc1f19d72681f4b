"""The public quantized forward: rms_norm_quant and fused_add_rms_norm_quant.

One route, as rms_norm's: a call of an rmsnorm op (rmsnorm::quant_fwd, quant_add_fwd_inplace;
schemas and kernels in rmsnorm/pytorch/csrc, fake kernels in fake.py), which torch.compile
traces and CUDA graphs capture; the kernels are the forward's, with a quantized epilogue
(rmsnorm.kernels.quantize). docs/USAGE.md, "Quantized output", states the semantics.
"""

import typing

import torch
from torch import Tensor

from rmsnorm.launch import quant_contract, validation
from rmsnorm.pytorch import native, recipes
from rmsnorm.pytorch.functional import _checked

_quant_fwd = native.op("quant_fwd")
_quant_add_fwd_inplace = native.op("quant_add_fwd_inplace")


class QuantOutput(typing.NamedTuple):
    """out: the quantized y (quant_dtype); scales: fp32 dequantization scales (static: the
    `scale` given; per token: x.shape[:-1] + (1,); per group: x.shape[:-1] + (N // group_size,),
    column-major with transposed_scales); residual_out: the fused add's sum (None for
    rms_norm_quant); unquantized: y as rms_norm returns it, with return_unquantized=True."""
    out: Tensor
    scales: Tensor
    residual_out: typing.Optional[Tensor]
    unquantized: typing.Optional[Tensor]


def rms_norm_quant(x, weight=None, eps=1e-6, *, quant_dtype=torch.float8_e4m3fn, scale=None,
                   group_size=None, scale_ub=None, ue8m0=False, transposed_scales=False,
                   offset=0.0, casting_mode=None, quantizer=None, recipe=None,
                   return_unquantized=False):
    """rms_norm(x, weight, eps, offset=offset, casting_mode=casting_mode), quantized to
    quant_dtype (torch.float8_e4m3fn, torch.float8_e5m2 or torch.int8) in the same kernel,
    bit-identical to quantizing rms_norm's output with vLLM's quantizer of the mode
    (quantizer "vllm", the default; "vllm_fused": the formulas of vLLM's fused norm-quant
    kernels; recipe="vllm" sets casting_mode and quantizer as vLLM's kernel of the mode):

    - static: `scale` (a float32 tensor of one element on x's device, the dequantization
      scale);
    - dynamic per token (no scale, no group_size), its max |y| bounded by `scale_ub` (fp8);
    - dynamic per group of `group_size` (64 or 128) columns, `ue8m0` rounding the scales up
      to powers of two, `transposed_scales` storing them column-major; under "vllm_fused"
      each group's max bounded by `scale_ub` (fp8).

    Returns a QuantOutput. Not differentiable.
    """
    casting_mode, _, quantizer = _options(recipe, casting_mode, None, quantizer, False, scale)
    eps, offset = _scalars(x, weight, eps, offset, casting_mode)
    _check_kinds(scale, scale_ub, quant_dtype, ue8m0=ue8m0, transposed_scales=transposed_scales,
                 return_unquantized=return_unquantized)
    out, scales, _, unquantized = _quant_fwd(
        x, None, weight, scale, scale_ub, eps, offset, casting_mode, "rounded", quantizer,
        quant_dtype, _group(group_size), ue8m0, transposed_scales, return_unquantized)
    return QuantOutput(out, scale if scale is not None else scales, None,
                       unquantized if return_unquantized else None)


def fused_add_rms_norm_quant(x, residual, weight=None, eps=1e-6, *, inplace=False,
                             quant_dtype=torch.float8_e4m3fn, scale=None, group_size=None,
                             scale_ub=None, ue8m0=False, transposed_scales=False, offset=0.0,
                             casting_mode=None, normalized_sum=None, quantizer=None,
                             recipe=None, return_unquantized=False):
    """fused_add_rms_norm (the sum written as it writes it: into `residual` with inplace=True;
    normalized_sum as there) with its y quantized as rms_norm_quant quantizes it. Returns a
    QuantOutput whose residual_out is the sum (`residual` itself with inplace=True)."""
    if not isinstance(residual, Tensor):
        raise TypeError(f"residual must be a torch.Tensor, got {type(residual).__name__} "
                        "(for the norm alone call rms_norm_quant)")
    if type(inplace) is not bool:
        raise TypeError(f"inplace must be a bool, got {type(inplace).__name__}")
    casting_mode, normalized_sum, quantizer = _options(recipe, casting_mode, normalized_sum,
                                                       quantizer, True, scale)
    eps, offset = _scalars(x, weight, eps, offset, casting_mode)
    _check_kinds(scale, scale_ub, quant_dtype, ue8m0=ue8m0, transposed_scales=transposed_scales,
                 return_unquantized=return_unquantized)
    args = (weight, scale, scale_ub, eps, offset, casting_mode, normalized_sum, quantizer,
            quant_dtype, _group(group_size), ue8m0, transposed_scales, return_unquantized)
    if inplace:
        out, scales, unquantized = _quant_add_fwd_inplace(x, residual, *args)
        residual_out = residual
    else:
        out, scales, residual_out, unquantized = _quant_fwd(x, residual, *args)
    return QuantOutput(out, scale if scale is not None else scales, residual_out,
                       unquantized if return_unquantized else None)


def _options(recipe, casting_mode, normalized_sum, quantizer, fused, scale):
    """(casting_mode, normalized_sum, quantizer) of the call, their types checked here (the
    schema's own error would not name them)."""
    options = recipes.resolve(recipe, casting_mode, normalized_sum, quantizer, fused=fused,
                              quantized=True, dynamic=scale is None)
    if fused and type(options.normalized_sum) is not str:
        validation.check_normalized_sum(options.normalized_sum, True)
    if type(options.quantizer) is not str:
        validation.check_quantizer(options.quantizer)
    return options


def _scalars(x, weight, eps, offset, casting_mode):
    return _checked(x, weight, eps, offset, casting_mode)


def _check_kinds(scale, scale_ub, quant_dtype, **flags):
    """What the schemas would refuse in their own words: here the error names the argument."""
    for name, t in (("scale", scale), ("scale_ub", scale_ub)):
        if t is not None and not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a float32 torch.Tensor of one element or None, "
                            f"got {type(t).__name__}")
    if not isinstance(quant_dtype, torch.dtype):
        raise TypeError(f"quant_dtype must be a torch.dtype (torch.float8_e4m3fn, "
                        f"torch.float8_e5m2 or torch.int8), got {quant_dtype!r}")
    for name, flag in flags.items():
        if type(flag) is not bool:
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")


def _group(group_size):
    """group_size as the schema takes it (0: per token); values are checked by the launcher."""
    if group_size is None:
        return 0
    if type(group_size) is not int:
        raise TypeError(f"group_size must be an int, one of {quant_contract.GROUP_SIZES}, or "
                        f"None, got {type(group_size).__name__}")
    if group_size not in quant_contract.GROUP_SIZES:
        raise ValueError(f"group_size must be one of {quant_contract.GROUP_SIZES} or None, "
                         f"got {group_size!r}")
    return group_size
