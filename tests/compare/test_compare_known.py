"""Real implementations are diagnosed as the recipes they are: rmsnorm's kernels (the
interpreter on the CPU, the GPU when there is one) as their casting mode, HF's norm modules as
their named points; and a candidate that is not any recipe is reported as such."""

import pytest
import torch

import rmsnorm
from rmsnorm import compare
from rmsnorm.compare import adapters, space

SIXTEEN = [torch.bfloat16, torch.float16]


@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
@pytest.mark.parametrize("dtype", SIXTEEN, ids=str)
def test_rmsnorm_kernels_are_their_casting_mode(device, dtype, casting_mode):
    # Tiny rows: on the CPU the kernel runs in Triton's interpreter.
    x, w, _ = compare.generate((10, 64), dtype, seed=1, device=device)

    def kernel(x, weight, eps):
        return rmsnorm.rms_norm(x, weight, eps, offset=0.5, casting_mode=casting_mode)

    report = compare.diagnose(kernel, x, w, 1e-6, offset=0.5)
    assert report.exact, report.summary()
    assert f"rmsnorm_{casting_mode}" in report.names and report.undetermined == []


@pytest.mark.parametrize("dtype", SIXTEEN, ids=str)
def test_rmsnorm_fused_add_is_the_rounded_sum_recipe(device, dtype):
    x, w, r = compare.generate((10, 64), dtype, residual=True, seed=2, device=device)
    fused = adapters.inplace(rmsnorm.fused_add_rms_norm)  # returns (y, residual_out)
    report = compare.diagnose(fused, x, w, 1e-6, residual=r)
    assert report.exact, report.summary()
    assert report.best["residual"] == "rounded" and "rmsnorm_llama" in report.names


@pytest.mark.parametrize("recipe", ["vllm", "flashinfer"])
@pytest.mark.parametrize("dtype", SIXTEEN, ids=str)
def test_rmsnorm_presets_are_their_named_points(device, dtype, recipe):
    x, w, r = compare.generate((10, 64), dtype, residual=True, weight_dtype=dtype, seed=7,
                               device=device)

    def fused(x, weight, eps, residual):
        return rmsnorm.fused_add_rms_norm(x, residual, weight, eps, recipe=recipe)

    report = compare.diagnose(fused, x, w, 1e-6, residual=r)
    assert report.exact, report.summary()
    assert f"rmsnorm_{recipe}" in report.names and report.undetermined == ["weight"]
    plain = compare.diagnose(lambda x, weight, eps: rmsnorm.rms_norm(x, weight, eps,
                                                                    recipe=recipe), x, w)
    assert plain.exact and "rmsnorm_gemma" in plain.names, plain.summary()


@pytest.mark.parametrize("residual", [False, True], ids=["plain", "hf_residual_add"])
@pytest.mark.parametrize("dtype", SIXTEEN, ids=str)
def test_hf_llama_and_gemma_modules_are_their_named_points(dtype, residual):
    # Here only: the kernels' tests above must not skip where transformers is missing.
    pytest.importorskip("transformers")
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    x, w, r = compare.generate((40, 64), dtype, residual=residual, weight_dtype=dtype,
                               seed=3)
    llama = compare.diagnose(adapters.hf(LlamaRMSNorm), x, w, 1e-6, residual=r)
    assert llama.exact and "hf_llama" in llama.names
    # Gemma's stored weights are small (the module scales by 1 + w, formed in fp32): 1 + w
    # then has bits the input dtype drops, which separates the weight axis.
    gemma_w = (torch.randn(64, generator=torch.Generator().manual_seed(4)) * 0.1).to(dtype)
    gemma = compare.diagnose(adapters.hf(GemmaRMSNorm), x, gemma_w, 1e-6, residual=r,
                             offset=1.0)
    assert gemma.exact and "hf_gemma" in gemma.names and gemma.undetermined == []


def test_one_ulp_noise_on_one_percent_is_not_exact_and_counted():
    x, w, _ = compare.generate((64, 128), torch.bfloat16, seed=5)
    g = torch.Generator().manual_seed(6)
    noisy = torch.rand(x.shape, generator=g) < 0.01
    step = torch.where(torch.rand(x.shape, generator=g) < 0.5, 1, -1).to(torch.int16)

    def candidate(x, weight, eps):
        y = space.evaluate(space.Recipe(rounding="gemma"), x, weight, eps).y
        return torch.where(noisy, y.view(torch.int16) + step, y.view(torch.int16)) \
            .view(y.dtype)

    report = compare.diagnose(candidate, x, w)
    assert not report.exact and report.best == space.Recipe(rounding="gemma").as_dict(False)
    assert report.best_row.identical == pytest.approx(1 - noisy.float().mean().item())
    assert report.best_row.max_ulp == 1
    assert "one ulp off" in report.summary()
    assert "no rounding rule of the space explains them" in report.summary()


def test_a_last_bit_change_of_rstd_is_located_on_the_rounding_midpoints():
    # An rstd a few fp32 ulps off (another order of the sum, an approximate rsqrt) flips
    # llama's intermediate rounding exactly where x * rstd sits on a midpoint: the report must
    # say so, and find the rows' rstd otherwise in agreement.
    x, w, _ = compare.generate((64, 64), torch.float16, kinds=("normal", "midpoints"), seed=8,
                               weight_dtype=torch.float16)

    def nudged_rstd(x, weight, eps):
        v = x.float()
        rstd = torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * (1 + 2 ** -21)
        return (v * rstd).to(x.dtype) * weight

    report = compare.diagnose(nudged_rstd, x, w)
    assert not report.exact and "hf_llama" in report.names
    assert 0.8 < report.best_row.identical < 1
    assert "All of them are where x * rstd lands on a fp16 rounding midpoint" in \
        report.summary(), report.summary()


def test_an_unrelated_formula_is_reported_as_far_from_every_recipe():
    x, w, _ = compare.generate((40, 64), torch.bfloat16, seed=10)

    def layer_norm(x, weight, eps):  # subtracts the mean: not an RMSNorm at all
        return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), weight.float(),
                                              eps=eps).to(x.dtype)

    report = compare.diagnose(layer_norm, x, w)
    assert not report.exact and "No recipe of the space is close" in report.summary()
