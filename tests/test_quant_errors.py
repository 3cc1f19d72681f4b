"""Bad arguments of the quantized forward: a clear error naming the argument, before any
kernel runs."""

import pytest
import torch

import rmsnorm


def x_and_w(n=256):
    return torch.randn(4, n, dtype=torch.bfloat16), torch.randn(n, dtype=torch.bfloat16)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(group_size=96), ValueError, "group_size must be one of"),
    (dict(group_size=128.0), ValueError, "group_size must be one of"),
    (dict(quant_dtype=torch.float16), TypeError, "quant_dtype torch.float16 is not supported"),
    (dict(quant_dtype="fp8"), TypeError, "quant_dtype must be a torch.dtype"),
    (dict(scale=0.5), TypeError, "scale must be a float32 torch.Tensor"),
    (dict(scale=torch.tensor([0.5], dtype=torch.float64)), ValueError,
     "scale must be a float32 tensor of one element"),
    (dict(scale=torch.tensor([0.5, 0.5])), ValueError, "scale must be a float32 tensor of one"),
    (dict(scale_ub=torch.tensor([1.0]), quant_dtype=torch.int8), ValueError,
     "scale_ub bounds dynamic fp8 scales; int8"),
    (dict(scale_ub=torch.tensor([1.0]), group_size=64), ValueError,
     "scale_ub bounds dynamic per-token"),
    (dict(scale=torch.tensor([1.0]), group_size=64), ValueError, "exclude each other"),
    (dict(ue8m0=True), ValueError, "ue8m0=True is for per-group scales"),
    (dict(transposed_scales=True), ValueError, "transposed_scales=True is for per-group"),
    (dict(ue8m0=1, group_size=64), TypeError, "ue8m0 must be a bool"),
    (dict(return_unquantized="yes"), TypeError, "return_unquantized must be a bool"),
    (dict(casting_mode="fast"), ValueError, "casting_mode"),
])
def test_bad_arguments_are_named(kwargs, error, match):
    x, w = x_and_w()
    with pytest.raises(error, match=match):
        rmsnorm.rms_norm_quant(x, w, **kwargs)


def test_group_size_must_divide_the_row():
    x, w = x_and_w(192)
    with pytest.raises(ValueError, match="group_size 128 does not divide the last dimension"):
        rmsnorm.rms_norm_quant(x, w, group_size=128)


def test_inputs_of_other_dtypes_are_refused():
    with pytest.raises(TypeError, match="x has dtype torch.float64"):
        rmsnorm.rms_norm_quant(torch.randn(2, 64, dtype=torch.float64))
    with pytest.raises(TypeError, match="x has dtype torch.int8"):
        rmsnorm.rms_norm_quant(torch.ones(2, 64, dtype=torch.int8))


def test_scale_on_another_device_is_named():
    x, w = x_and_w()
    scale = torch.tensor([0.5], device="meta")
    with pytest.raises(ValueError, match="scale is on meta but x is on cpu"):
        rmsnorm.rms_norm_quant(x, w, scale=scale)


def test_fused_add_needs_a_residual_tensor():
    x, w = x_and_w()
    with pytest.raises(TypeError, match="residual must be a torch.Tensor"):
        rmsnorm.fused_add_rms_norm_quant(x, None, w)
    with pytest.raises(ValueError, match="residual has shape"):
        rmsnorm.fused_add_rms_norm_quant(x, x[:2].clone(), w)
    with pytest.raises(TypeError, match="inplace must be a bool"):
        rmsnorm.fused_add_rms_norm_quant(x, x.clone(), w, inplace=1)
