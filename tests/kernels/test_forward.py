"""rms_norm: every dtype, size and option against float64 and the recipe it claims."""

import pytest
import torch

import rmsnorm
from rmsnorm import reference
from helpers import (assert_close_float64, assert_matches_recipe, nan_like, randn,
                     recipe_rms_norm, seed_of, weight_for)

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64]
SIZES_N = [1, 7, 64, 127, 128, 1000, 4096, 5000]
SIZES_M = [0, 1, 3, 65]


def run_and_check(x, weight, eps=1e-6, offset=0.0, casting_mode="llama"):
    out_dtype = reference.output_dtype(x.dtype, weight, casting_mode)
    out = nan_like(x, out_dtype)
    y = rmsnorm.rms_norm(x, weight, eps, offset=offset, casting_mode=casting_mode, out=out)
    assert y is out
    assert_close_float64(y, reference.float64_rms_norm(x, weight, eps, offset), x.dtype)
    assert_matches_recipe(y, *recipe_rms_norm(x, weight, eps, offset, casting_mode))
    return y


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES_N)
@pytest.mark.parametrize("m", SIZES_M)
def test_every_dtype_and_size_matches_float64_and_hf_llama(device, dtype, n, m):
    seed = seed_of("fwd", dtype, n, m)
    x = randn((m, n), dtype, device, seed, scale=2.0)
    run_and_check(x, weight_for(n, dtype, device, seed))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [7, 128, 1000, 5000])
def test_gemma_mode_matches_torch_rms_norm(device, dtype, n):
    seed = seed_of("gemma", dtype, n)
    x = randn((65, n), dtype, device, seed)
    run_and_check(x, weight_for(n, dtype, device, seed), casting_mode="gemma")


@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
@pytest.mark.parametrize("with_weight,offset", [(True, 0.0), (True, 1.0), (False, 0.0)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [64, 1000])
def test_weight_offset_and_casting_modes(device, casting_mode, with_weight, offset, dtype, n):
    seed = seed_of("opts", casting_mode, with_weight, offset, dtype, n)
    x = randn((3, 5, n), dtype, device, seed)
    w = weight_for(n, dtype, device, seed) - offset if with_weight else None
    run_and_check(x, w, offset=offset, casting_mode=casting_mode)


def test_gemma_offset_one_matches_hf_gemma_with_fp32_one_plus_w(device):
    # Gemma's (1 + w) must be formed in fp32: with w in bf16, 1 + w rounds badly.
    seed = seed_of("gemma-hf")
    x = randn((33, 1000), torch.bfloat16, device, seed)
    w = randn((1000,), torch.bfloat16, device, seed + 1, scale=0.01)
    y = rmsnorm.rms_norm(x, w, offset=1.0, casting_mode="gemma")
    assert_matches_recipe(y, reference.hf_gemma_rms_norm(x, w))
    assert_close_float64(y, reference.float64_rms_norm(x, w, offset=1.0))


@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float16])
def test_fp32_weight_with_16_bit_input(device, casting_mode, x_dtype):
    seed = seed_of("mixed-w", casting_mode, x_dtype)
    x = randn((65, 1000), x_dtype, device, seed)
    w = weight_for(1000, torch.float32, device, seed)
    y = run_and_check(x, w, casting_mode=casting_mode)
    # llama promotes like HF (fp32 weights give fp32 output); gemma keeps x's dtype.
    assert y.dtype == (torch.float32 if casting_mode == "llama" else x_dtype)


@pytest.mark.parametrize("eps", [0.0, 1e-6, 1e-2])
def test_eps_is_added_to_the_mean_square(device, eps):
    seed = seed_of("eps", eps)
    x = randn((65, 128), torch.float32, device, seed, scale=0.1)
    run_and_check(x, weight_for(128, torch.float32, device, seed), eps=eps)


def test_allocated_output_has_input_shape_and_dtype(device):
    seed = seed_of("alloc")
    x = randn((2, 3, 4, 96), torch.bfloat16, device, seed)
    y = rmsnorm.rms_norm(x, weight_for(96, torch.bfloat16, device, seed))
    assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device
    assert not torch.isnan(y).any()


def test_empty_rows_return_empty_output_without_launch(device):
    x = torch.empty((0, 3, 64), dtype=torch.float16, device=device)
    y = rmsnorm.rms_norm(x, torch.ones(64, dtype=torch.float16, device=device))
    assert y.shape == (0, 3, 64)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rstd_output_is_the_fp32_inverse_rms_per_row(device, dtype):
    seed = seed_of("rstd", dtype)
    x = randn((4, 16, 1000), dtype, device, seed, scale=3.0)
    _, _, rstd = rmsnorm.launch.ops.forward(x, weight_for(1000, dtype, device, seed),
                                     return_rstd=True)
    assert rstd.dtype == torch.float32 and rstd.shape == (4, 16)
    expected = reference.contract_rms_norm(x, None)[1].squeeze(-1)
    torch.testing.assert_close(rstd, expected, rtol=2e-6, atol=0)


def test_rstd_is_float64_for_float64_input(device):
    x = randn((5, 33), torch.float64, device, seed_of("rstd64"))
    _, _, rstd = rmsnorm.launch.ops.forward(x, return_rstd=True)
    expected = torch.rsqrt(x.pow(2).mean(-1) + reference.fp32(1e-6))
    assert rstd.dtype == torch.float64
    torch.testing.assert_close(rstd, expected, rtol=1e-13, atol=0)


def test_eps_is_an_fp32_scalar_also_for_float64(device):
    # Where x^2 is comparable to eps, fp32(1e-6) and 1e-6 give visibly different float64 rows.
    x = torch.tensor([[1e-3], [2e-3]], dtype=torch.float64, device=device)
    y = rmsnorm.rms_norm(x, eps=1e-6)
    v = x.cpu()
    torch.testing.assert_close(y.cpu(), v * torch.rsqrt(v * v + reference.fp32(1e-6)),
                               rtol=1e-15, atol=0)
    assert (y.cpu() - v * torch.rsqrt(v * v + 1e-6)).abs().max() > 1e-10
