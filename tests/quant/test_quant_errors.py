"""Bad arguments of the quantized forward: a clear error naming the argument, before any
kernel runs."""

import pytest
import torch

import rmsnorm


def x_and_w(n=256):
    return torch.randn(4, n, dtype=torch.bfloat16), torch.randn(n, dtype=torch.bfloat16)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(group_size=96), ValueError, "group_size must be one of"),
    (dict(group_size=128.0), TypeError, "group_size must be an int, one of"),
    (dict(quant_dtype=torch.float16), TypeError, "quant_dtype torch.float16 is not supported"),
    (dict(quant_dtype="fp8"), TypeError, "quant_dtype must be a torch.dtype"),
    (dict(scale=0.5), TypeError, "scale must be a float32 torch.Tensor"),
    (dict(scale=torch.tensor([0.5], dtype=torch.float64)), ValueError,
     "scale must be a float32 tensor of one element"),
    (dict(scale=torch.tensor([0.5, 0.5])), ValueError, "scale must be a float32 tensor of one"),
    # Only float32: not the norm's dtypes, which other tensors' messages list.
    (dict(scale=torch.tensor([1], dtype=torch.int32)), ValueError,
     r"^scale must be a float32 tensor of one element, got torch.int32 of shape \(1,\)$"),
    (dict(scale_ub=torch.tensor([1], dtype=torch.int32)), ValueError,
     r"^scale_ub must be a float32 tensor of one element, got torch.int32"),
    (dict(scale_ub=torch.tensor([1.0]), quant_dtype=torch.int8), ValueError,
     "scale_ub bounds dynamic fp8 scales; int8"),
    (dict(scale_ub=torch.tensor([1.0]), group_size=64), ValueError,
     "scale_ub with group_size bounds per-group scales as vLLM's fused"),
    (dict(scale_ub=torch.tensor([1.0]), scale=torch.tensor([1.0])), ValueError,
     r"scale_ub bounds dynamic scales; static quantization \(scale\) takes none"),
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


@pytest.mark.parametrize("name", ["scale", "scale_ub"])
def test_an_in_place_residual_may_not_hold_the_scale(name):
    """Every row reads the scale (or its bound) while the rows write the residual: a race on
    the GPU, scales that disagree with out on the CPU. Refused, naming both."""
    x, w = x_and_w()
    x, w = x.float(), w.float()
    residual = torch.randn(4, 256)
    residual[1, 3] = 0.5
    before = residual.clone()
    with pytest.raises(ValueError, match=rf"^residual \(updated in place\) overlaps {name}, "
                                         "which every row reads"):
        rmsnorm.fused_add_rms_norm_quant(x, residual, w, inplace=True,
                                         **{name: residual[1, 3:4]})
    assert torch.equal(residual, before), "the refused call wrote the residual"
    # Read only, the same element may serve: the sum goes to a tensor of its own.
    r = rmsnorm.fused_add_rms_norm_quant(x, residual, w, **{name: residual[1, 3:4]})
    assert r.residual_out is not residual
