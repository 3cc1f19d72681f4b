"""Recipes: recipe="vllm" and recipe="flashinfer" set the options under which each public
function computes what that engine's kernel of the call computes, and the options they set
(normalized_sum="fp32", quantizer="vllm_fused") hold on every path: the fused add normalizes
the unrounded sum while it writes the rounded one, and the quantized forward equals that
fused add followed by the quantizer of its formulas. tests/quant/test_vendor_kernels.py holds the
presets to the vendors' real kernels on the GPU."""

import pytest
import torch

import rmsnorm
from rmsnorm import reference
from rmsnorm.launch import configs, ops, quant
from rmsnorm.pytorch import recipes
from gradients import grads, rel_err
from helpers import (assert_close_float64, assert_matches_recipe, assert_same, assert_same_bits,
                     llama_slack, randn, seed_of, weight_for)

E4M3 = torch.float8_e4m3fn
DTYPES = (torch.bfloat16, torch.float16)


@pytest.mark.parametrize("recipe,fused,quantized,dynamic,want", [
    # vLLM: rms_norm, fused_add_rms_norm and their static fp8 forms round once and normalize
    # the rounded sum; rms_norm_dynamic_per_token_quant and rms_norm_per_block_quant round as
    # Llama, normalize the unrounded sum and use their own scale formulas.
    ("vllm", False, False, False, ("gemma", "rounded", "vllm")),
    ("vllm", True, False, False, ("gemma", "rounded", "vllm")),
    ("vllm", False, True, False, ("gemma", "rounded", "vllm")),
    ("vllm", True, True, False, ("gemma", "rounded", "vllm")),
    ("vllm", False, True, True, ("llama", "rounded", "vllm_fused")),
    ("vllm", True, True, True, ("llama", "fp32", "vllm_fused")),
    # FlashInfer: rmsnorm rounds once; fused_add_rmsnorm normalizes the unrounded sum.
    ("flashinfer", False, False, False, ("gemma", "rounded", "vllm")),
    ("flashinfer", True, False, False, ("gemma", "fp32", "vllm")),
    # rmsnorm's own: the defaults.
    ("rmsnorm", True, True, True, ("llama", "rounded", "vllm")),
    (None, True, True, True, ("llama", "rounded", "vllm")),
])
def test_each_recipe_sets_its_engines_options(recipe, fused, quantized, dynamic, want):
    got = recipes.resolve(recipe, None, None, None, fused=fused, quantized=quantized,
                          dynamic=dynamic)
    assert tuple(got) == want


def test_a_recipe_and_the_options_it_sets_exclude_each_other():
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="recipe='vllm' sets casting_mode"):
        rmsnorm.rms_norm(x, torch.ones(8), recipe="vllm", casting_mode="gemma")
    with pytest.raises(ValueError, match="sets normalized_sum"):
        rmsnorm.fused_add_rms_norm(x, x.clone(), recipe="flashinfer", normalized_sum="fp32")
    with pytest.raises(ValueError, match="sets quantizer"):
        rmsnorm.rms_norm_quant(x, torch.ones(8), recipe="vllm", quantizer="vllm")


def test_unknown_recipes_and_options_are_refused_by_name():
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="recipe must be one of"):
        rmsnorm.rms_norm(x, recipe="sglang")
    with pytest.raises(TypeError, match="^recipe must be a str"):
        rmsnorm.rms_norm(x, recipe=1)
    with pytest.raises(ValueError, match="normalized_sum must be one of"):
        rmsnorm.fused_add_rms_norm(x, x.clone(), normalized_sum="fp64")
    with pytest.raises(ValueError, match="quantizer must be one of"):
        rmsnorm.rms_norm_quant(x, torch.ones(8), quantizer="triton")
    with pytest.raises(ValueError, match="'flashinfer' has no quantized form"):
        rmsnorm.rms_norm_quant(x, torch.ones(8), recipe="flashinfer")


@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
@pytest.mark.parametrize("x_dtype,r_dtype", [(torch.bfloat16, torch.bfloat16),
                                             (torch.float16, torch.float16),
                                             (torch.bfloat16, torch.float32)], ids=str)
def test_the_unrounded_sum_is_differentiable(device, x_dtype, r_dtype, casting_mode):
    # The norm of x + residual in fp32: its gradient reaches x and residual as the rounded
    # sum's does (DESIGN.md, "Backward", with the unrounded sum as the norm input).
    seed = seed_of("fp32-sum-grad", x_dtype, r_dtype, casting_mode)
    x, r = randn((13, 320), x_dtype, device, seed), randn((13, 320), r_dtype, device, seed + 1)
    w = weight_for(320, x_dtype, device, seed)
    y, _ = rmsnorm.fused_add_rms_norm(x, r, w, casting_mode=casting_mode,
                                      normalized_sum="fp32")
    dy = randn(y.shape, y.dtype, device, seed + 2)
    d_sum = randn((13, 320), r_dtype, device, seed + 3)
    dx, dr, dw = grads(lambda a, b, c: rmsnorm.fused_add_rms_norm(
        a, b, c, casting_mode=casting_mode, normalized_sum="fp32"), (x, r, w), (dy, d_sum))
    assert (dx.dtype, dr.dtype, dw.dtype) == (x_dtype, r_dtype, w.dtype)
    assert torch.equal(dx, dr.to(x_dtype))
    h = r.float() + x.float()
    # The contract's formulas on the unrounded sum, from the forward's rstd.
    _, _, rstd = reference.contract_fused_add_rms_norm(x, r, w, casting_mode=casting_mode,
                                                       normalized_sum="fp32")
    dr_c, dw_c = reference.contract_rms_norm_backward(
        dy, h, w, rstd.squeeze(-1), casting_mode=casting_mode, dresidual=d_sum,
        norm_dtype=r_dtype)
    assert rel_err(dr, dr_c) <= 4e-3 and rel_err(dw, dw_c) <= 4e-3
    # float64's gradient of the norm of the exact sum.
    ds64, dw64 = grads(lambda a, c: (reference.float64_rms_norm(a, c), a * 1.0),
                        (x.double() + r.double(), w.double()), (dy.double(), d_sum.double()))
    assert rel_err(dr, ds64) <= 1e-2 and rel_err(dw, dw64) <= 1e-2
    if r_dtype != torch.float32:  # an fp32 residual's rounded sum is the unrounded one
        # Not the rounded sum's gradient: the option changes the function's derivative too.
        dx_rounded, _, _ = grads(lambda a, b, c: rmsnorm.fused_add_rms_norm(
            a, b, c, casting_mode=casting_mode), (x, r, w), (dy, d_sum))
        assert not torch.equal(dx, dx_rounded)


def test_the_unrounded_sums_llama_dw_sees_it_rounded_to_the_residuals_dtype(device):
    # An fp32 weight makes dw fp32, fine enough to tell xhat rounded to bf16 (as the forward
    # rounds it) from xhat unrounded, and the contract's dx from the fp32 sum's.
    seed = seed_of("fp32-sum-llama-dw")
    x, r = (randn((40, 256), torch.bfloat16, device, seed + k) for k in (0, 1))
    w = weight_for(256, torch.float32, device, seed)
    dy = randn((40, 256), torch.float32, device, seed + 2)
    _, _, dw = grads(lambda a, b, c: rmsnorm.fused_add_rms_norm(
        a, b, c, normalized_sum="fp32")[0], (x, r, w), dy)
    _, _, rstd = reference.contract_fused_add_rms_norm(x, r, w, normalized_sum="fp32")
    h = r.float() + x.float()
    _, dw_c = reference.contract_rms_norm_backward(dy, h, w, rstd.squeeze(-1),
                                                   norm_dtype=torch.bfloat16)
    _, dw_unrounded = reference.contract_rms_norm_backward(dy, h, w, rstd.squeeze(-1))
    assert rel_err(dw_c, dw_unrounded) > 1e-4  # the test can tell them apart
    assert rel_err(dw, dw_c) <= 1e-6


def test_the_unrounded_sum_in_place_under_autograd_matches_the_out_of_place_one(device):
    # In place, the residual is overwritten with the rounded sum after the forward: the
    # backward must still see the unrounded one.
    x, r, w = _inputs((6, 256), torch.bfloat16, device, "fp32-sum-grad-inplace")
    dy = randn((6, 256), torch.bfloat16, device, seed_of("fp32-sum-grad-inplace-dy"))
    want = grads(lambda a, b, c: rmsnorm.fused_add_rms_norm(
        a, b, c, normalized_sum="fp32")[0], (x, r, w), dy)
    leaves = [t.detach().clone().requires_grad_() for t in (x, r, w)]
    residual = leaves[1] * 1.0  # a non-leaf may be updated in place under autograd
    y, s = rmsnorm.fused_add_rms_norm(leaves[0], residual, leaves[2], normalized_sum="fp32",
                                      inplace=True)
    assert s is residual
    y.backward(dy)
    for got, expected in zip([t.grad for t in leaves], want):
        assert_same_bits(got, expected)


def test_the_unrounded_sum_passes_gradcheck_and_gradgradcheck(device):
    # float64: the sum is exact either way, but the node keeps the unrounded sum's graph, so
    # second-order terms must reach x and residual through it.
    seed = seed_of("fp32-sum-ggc")
    shape = (3, 8)
    inputs = [randn(shape, torch.float64, device, seed).requires_grad_(),
              randn(shape, torch.float64, device, seed + 1).requires_grad_(),
              weight_for(8, torch.float64, device, seed).requires_grad_()]

    def fn(a, b, c):
        return rmsnorm.fused_add_rms_norm(a, b, c, normalized_sum="fp32")

    assert torch.autograd.gradcheck(fn, inputs, fast_mode=device == "cpu")
    assert torch.autograd.gradgradcheck(fn, inputs, fast_mode=device == "cpu")


def _inputs(shape, dtype, device, *parts):
    seed = seed_of(*parts)
    x = randn(shape, dtype, device, seed, scale=3.0)
    r = randn(shape, dtype, device, seed + 7, scale=3.0)
    return x, r, weight_for(shape[-1], dtype, device, seed)


@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(7, 96), (5, 1024), (3, 3000)], ids=str)
def test_the_fused_add_can_normalize_the_unrounded_sum(device, shape, dtype, casting_mode):
    x, r, w = _inputs(shape, dtype, device, "fp32-sum", shape, dtype, casting_mode)
    y, r_out = rmsnorm.fused_add_rms_norm(x, r, w, casting_mode=casting_mode,
                                          normalized_sum="fp32")
    y_ref, r_out_ref, _ = reference.contract_fused_add_rms_norm(
        x, r, w, 1e-6, casting_mode=casting_mode, normalized_sum="fp32")
    assert_same_bits(r_out, r_out_ref)  # the sum written is still the rounded one
    slack = llama_slack(x.float() + r.float(), w) if casting_mode == "llama" else None
    assert_matches_recipe(y, y_ref, slack)
    s64 = x.double() + r.double()
    assert_close_float64(y, reference.float64_rms_norm(s64, w, 1e-6, 0.0))
    # Not the rounded sum's norm: the option changes the function.
    y_rounded, _ = rmsnorm.fused_add_rms_norm(x, r, w, casting_mode=casting_mode)
    assert not torch.equal(y, y_rounded)


@pytest.mark.parametrize("how", ["inplace", "out"])
def test_the_unrounded_sum_in_place_and_into_out(device, how):
    x, r, w = _inputs((6, 512), torch.bfloat16, device, "fp32-sum", how)
    y_ref, r_out_ref = rmsnorm.fused_add_rms_norm(x, r, w, normalized_sum="fp32")
    target = r.clone()
    if how == "inplace":
        y, r_out = rmsnorm.fused_add_rms_norm(x, target, w, normalized_sum="fp32", inplace=True)
        assert r_out is target
    else:
        out = torch.empty_like(x)
        y, r_out = rmsnorm.fused_add_rms_norm(x, target, w, normalized_sum="fp32", out=out)
        assert y is out
    assert_same_bits(y, y_ref)
    assert_same_bits(r_out, r_out_ref)


@pytest.mark.parametrize("inplace", [False, True])
def test_looped_rows_normalize_the_unrounded_sum_as_tiles_do(device, inplace):
    # A looped launch re-reads x and the residual for its later passes; in place, the
    # residual it re-reads must not yet hold the rounded sum.
    x, r, w = _inputs((4, 1000), torch.float16, device, "fp32-sum-loop")
    y_tile, r_tile, _ = ops.forward(x, w, residual=r, normalized_sum="fp32")
    loop = configs.Launch("loop", 256, 1, 4, 1, 1, False)
    target = r.clone()
    y_loop, r_loop, _ = ops.forward(x, w, residual=target, inplace=inplace, launch=loop,
                                    normalized_sum="fp32")
    assert_same_bits(r_loop, r_tile)
    y_ref, _, _ = reference.contract_fused_add_rms_norm(x, r, w, 1e-6, normalized_sum="fp32")
    assert_matches_recipe(y_loop, y_ref, llama_slack(x.float() + r.float(), w))


QUANT_CASES = [  # (quant_dtype, group_size)
    (E4M3, None), (torch.int8, None), (E4M3, 64), (E4M3, 128), (torch.int8, 128),
    (torch.int8, 64),
]


@pytest.mark.parametrize("fused", [False, True], ids=["norm", "fused-add"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("quant_dtype,group_size", QUANT_CASES, ids=str)
def test_the_vllm_recipe_quantizes_as_its_fused_kernels(device, quant_dtype, group_size,
                                                        dtype, fused):
    x, r, w = _inputs((9, 256), dtype, device, "vllm-quant", quant_dtype, group_size, fused)
    x[1, 3] = float("nan")  # a NaN row: left out of the max, quantized as vLLM's clamp does
    x[2] = 0.0
    if fused:
        r[2] = 0.0  # an all-zero row: the scale's floor
        got = rmsnorm.fused_add_rms_norm_quant(x, r.clone(), w, quant_dtype=quant_dtype,
                                               group_size=group_size, recipe="vllm",
                                               return_unquantized=True)
        y, r_out = rmsnorm.fused_add_rms_norm(x, r.clone(), w, normalized_sum="fp32")
        assert_same(got.residual_out, r_out, "residual_out")
    else:
        got = rmsnorm.rms_norm_quant(x, w, quant_dtype=quant_dtype, group_size=group_size,
                                     recipe="vllm", return_unquantized=True)
        y = rmsnorm.rms_norm(x, w)
    assert_same(got.unquantized, y, "y")
    q, scales = reference.quantize(y, quant_dtype, group_size=group_size,
                                   quantizer="vllm_fused")
    assert_same(got.out, q, "codes")
    assert_same(got.scales, scales, "scales")


@pytest.mark.parametrize("quant_dtype,group_size", [(torch.int8, None), (E4M3, 128)], ids=str)
def test_looped_quantized_rows_follow_the_vllm_recipe(device, quant_dtype, group_size):
    x, r, w = _inputs((3, 1024), torch.bfloat16, device, "vllm-quant-loop", quant_dtype)
    loop = configs.Launch("loop", 256, 1, 4, 1, 1, False)
    out, scales, r_out, y = quant.forward_quant(
        x, w, residual=r, quant_dtype=quant_dtype, group_size=group_size, launch=loop,
        normalized_sum="fp32", quantizer="vllm_fused", return_unquantized=True)
    y_tile, r_tile, _ = ops.forward(x, w, residual=r, normalized_sum="fp32")
    assert_same(r_out, r_tile, "residual_out")
    y_ref, _, _ = reference.contract_fused_add_rms_norm(x, r, w, 1e-6, normalized_sum="fp32")
    assert_matches_recipe(y, y_ref, llama_slack(x.float() + r.float(), w))
    q, s = reference.quantize(y, quant_dtype, group_size=group_size, quantizer="vllm_fused")
    assert_same(out, q, "codes")
    assert_same(scales, s, "scales")


@pytest.mark.parametrize("path", ["tile", "loop"])
@pytest.mark.parametrize("bound", ["saturating", "nan"])
@pytest.mark.parametrize("fused", [False, True], ids=["norm", "fused-add"])
@pytest.mark.parametrize("group_size", [64, 128])
def test_the_vllm_recipe_bounds_group_scales_by_scale_ub(device, group_size, fused, bound,
                                                         path):
    # vLLM's rms_norm_per_block_quant: each group's max is bounded by min(amax, *scale_ub)
    # (fminf: a NaN bound bounds nothing) before its scale is formed; its groups saturate.
    x, r, w = _inputs((5, 512), torch.bfloat16, device, "vllm-group-ub", group_size, fused)
    x[3, 7] = float("nan")
    ub = torch.tensor([2.0 if bound == "saturating" else float("nan")], device=device)
    launch = configs.Launch("loop", 256, 1, 4, 1, 1, False) if path == "loop" else None
    out, scales, r_out, y = quant.forward_quant(
        x, w, residual=r if fused else None, group_size=group_size, scale_ub=ub,
        launch=launch, normalized_sum="fp32" if fused else "rounded", quantizer="vllm_fused",
        return_unquantized=True)
    q, s = reference.quantize(y, E4M3, group_size=group_size, scale_ub=ub,
                              quantizer="vllm_fused")
    assert_same(out, q, "codes")
    assert_same(scales, s, "scales")
    free_q, free_s = reference.quantize(y, E4M3, group_size=group_size,
                                        quantizer="vllm_fused")
    if bound == "nan":
        assert_same(scales, free_s, "scales under a NaN bound")
    else:
        bounded = free_s > ub.item() / 448.0
        assert bounded.any() and (scales[bounded] == ub.item() / 448.0).all()
        assert (out.float().abs().amax(-1) == 448.0).all(), "bounded groups saturate"
        assert torch.equal(scales[~bounded], free_s[~bounded])


def test_a_bound_on_group_scales_is_the_vllm_fused_quantizers(device):
    # The default quantizer (vLLM's group quantizer) has no bound: refused, naming the fix.
    x, r, w = _inputs((2, 128), torch.bfloat16, device, "group-ub-refused")
    ub = torch.tensor([2.0], device=device)
    with pytest.raises(ValueError, match="give quantizer='vllm_fused'"):
        rmsnorm.rms_norm_quant(x, w, group_size=64, scale_ub=ub)
    got = rmsnorm.fused_add_rms_norm_quant(x, r, w, group_size=64, scale_ub=ub, recipe="vllm")
    want = quant.forward_quant(x, w, residual=r, group_size=64, scale_ub=ub,
                               normalized_sum="fp32", quantizer="vllm_fused")
    assert_same(got.out, want[0], "codes")
    assert_same(got.scales, want[1], "scales")


def test_the_flashinfer_recipe_is_gemma_on_the_unrounded_sum(device):
    x, r, w = _inputs((5, 512), torch.bfloat16, device, "flashinfer")
    y, r_out = rmsnorm.fused_add_rms_norm(x, r, w, recipe="flashinfer")
    y_want, r_want = rmsnorm.fused_add_rms_norm(x, r, w, casting_mode="gemma",
                                                normalized_sum="fp32")
    assert_same_bits(y, y_want)
    assert_same_bits(r_out, r_want)
    assert_same_bits(rmsnorm.rms_norm(x, w, recipe="flashinfer"),
                     rmsnorm.rms_norm(x, w, casting_mode="gemma"))
