"""The vendors' recipes in PyTorch ops (rmsnorm.reference): the fused add that normalizes the
unrounded fp32 sum (vLLM's fused quantized kernels, FlashInfer's fused add) and the scale
and quotient formulas of vLLM's fused norm-quant kernels. tests/quant/test_vendor_kernels.py holds
them to the vendors' real kernels on the GPU."""

import pytest
import torch

from rmsnorm import reference
from rmsnorm.launch import quant_contract

FLT_EPSILON = torch.finfo(torch.float32).eps
E4M3 = torch.float8_e4m3fn


def bits(t):
    return t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int16)


def test_the_fp32_sum_is_normalized_and_the_rounded_sum_written():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(16, 512, generator=g).bfloat16()
    r = torch.randn(16, 512, generator=g).bfloat16()
    w = (1 + 0.1 * torch.randn(512, generator=g)).bfloat16()
    y, r_out, rstd = reference.contract_fused_add_rms_norm(x, r, w, 1e-6,
                                                           normalized_sum="fp32")
    s = x.float() + r.float()
    want_rstd = torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert torch.equal(rstd, want_rstd)
    assert torch.equal(bits(y), bits(((s * want_rstd).bfloat16().float() * w.float())
                                     .bfloat16()))
    assert torch.equal(bits(r_out), bits(s.bfloat16()))
    # The default normalizes the rounded sum: the two recipes are not the same function.
    y_rounded, r_out_rounded, _ = reference.contract_fused_add_rms_norm(x, r, w, 1e-6)
    assert torch.equal(bits(r_out_rounded), bits(r_out))
    assert not torch.equal(bits(y_rounded), bits(y))


def test_fused_per_token_int8_floors_the_scale_and_multiplies_by_its_reciprocal():
    y = torch.tensor([[254.0, 5.0, -7.0, float("nan")], [0.0, 0.0, -0.0, 0.0]])
    q, s = quant_contract.quantize(y, torch.int8, quantizer="vllm_fused")
    assert s[0, 0] == torch.tensor(254.0) / 127.0
    assert s[1, 0] == FLT_EPSILON  # an all-zero row: the floor, not 0
    inverse = torch.tensor(1.0) / s[0, 0]
    want = (y[0, :3] * inverse).round()
    assert torch.equal(q[0, :3], want.to(torch.int8))
    assert q[0, 3] == 0  # NaN: cvt.rni.sat makes it 0
    assert torch.equal(q[1], torch.zeros(4, dtype=torch.int8))


def test_fused_per_token_fp8_is_the_standalone_quantizer():
    g = torch.Generator().manual_seed(5)
    y = torch.randn(8, 256, generator=g).bfloat16()
    for ub in (None, torch.tensor([1.5])):
        a = quant_contract.quantize(y, E4M3, scale_ub=ub)
        b = quant_contract.quantize(y, E4M3, scale_ub=ub, quantizer="vllm_fused")
        assert torch.equal(bits(a[0]), bits(b[0])) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("quant_dtype", [E4M3, torch.int8])
def test_fused_groups_floor_the_scale_and_multiply_by_its_reciprocal(quant_dtype):
    qmax = 448.0 if quant_dtype == E4M3 else 127.0
    floor = 1.0 / (448.0 * 512.0) if quant_dtype == E4M3 else FLT_EPSILON
    g = torch.Generator().manual_seed(7)
    y = torch.randn(4, 256, generator=g)
    y[1, :64] = 1e-9  # a group whose max over qmax is under the floor
    y[2, 70] = float("nan")
    q, s = quant_contract.quantize(y, quant_dtype, group_size=64, quantizer="vllm_fused")
    groups = y.reshape(4, 4, 64)
    amax = torch.where(groups.isnan(), 0.0, groups.abs()).amax(-1)
    want_s = torch.maximum(amax / torch.tensor(qmax), torch.tensor(floor))
    assert torch.equal(s, want_s)
    assert s[1, 0] == torch.tensor(floor)
    v = groups * (torch.ones_like(want_s) / want_s)[..., None]
    v = torch.where(v.isnan(), 0.0 if quant_dtype == torch.int8 else qmax, v)
    v = v.clamp(-128.0 if quant_dtype == torch.int8 else -qmax, qmax)
    if quant_dtype == torch.int8:
        v = v.round()
    assert torch.equal(bits(q), bits(v.reshape(4, 256).to(quant_dtype)))
    # The NaN goes to the top (fp8) or to 0 (int8), where the standalone group quantizer
    # sends it to the bottom.
    assert q[2, 70].float() == (0.0 if quant_dtype == torch.int8 else qmax)


def test_a_reciprocal_is_not_a_division():
    """A group where y * (1 / s) and y / s round to different e4m3 codes (found by search):
    the fused formulas take the product."""
    y = torch.zeros(1, 64)
    y[0, 0] = float.fromhex("0x1.0811cp+3")  # the group's max
    y[0, 1] = float.fromhex("0x1.fd46ccp-2")
    q, s = quant_contract.quantize(y, E4M3, group_size=64, quantizer="vllm_fused")
    divided = (y[0, 1] / s[0, 0]).to(E4M3)
    multiplied = (y[0, 1] * (torch.tensor(1.0) / s[0, 0])).to(E4M3)
    assert bits(divided) != bits(multiplied)
    assert bits(q[0, 1]) == bits(multiplied)
    # The standalone group quantizer divides.
    q_standalone, _ = quant_contract.quantize(y, E4M3, group_size=64)
    assert bits(q_standalone[0, 1]) == bits(divided)


def test_an_unknown_quantizer_or_sum_is_refused():
    with pytest.raises(ValueError, match="quantizer must be one of"):
        quant_contract.quantize(torch.ones(1, 64), E4M3, quantizer="fbgemm")
    x = torch.ones(1, 64)
    with pytest.raises(ValueError, match="normalized_sum must be"):
        reference.contract_fused_add_rms_norm(x, x, normalized_sum="bf16")
