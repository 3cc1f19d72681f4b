"""RMSNorm and GemmaRMSNorm modules: drop-ins for HF's norms, state dicts included."""

import torch

import rmsnorm
from rmsnorm import reference
from helpers import assert_matches_recipe, llama_slack, randn, seed_of


def test_rmsnorm_has_hf_llama_attributes_and_state_dict():
    norm = rmsnorm.RMSNorm(64, eps=1e-5)
    assert norm.variance_epsilon == 1e-5
    assert list(norm.state_dict()) == ["weight"]
    assert torch.equal(norm.weight, torch.ones(64))
    norm.load_state_dict({"weight": torch.full((64,), 2.0)})
    assert torch.equal(norm.weight, torch.full((64,), 2.0))


def test_gemma_rmsnorm_starts_at_zero_with_offset_one():
    norm = rmsnorm.GemmaRMSNorm(32, dtype=torch.bfloat16)
    assert torch.equal(norm.weight, torch.zeros(32, dtype=torch.bfloat16))
    assert norm.offset == 1.0 and norm.casting_mode == "gemma"


def test_without_affine_weight():
    norm = rmsnorm.RMSNorm(16, elementwise_affine=False)
    assert norm.weight is None and list(norm.state_dict()) == []


@torch.no_grad()
def test_llama_module_matches_hf_llama_recipe(device):
    seed = seed_of("mod-llama")
    norm = rmsnorm.RMSNorm(1000, device=device, dtype=torch.bfloat16)
    norm.weight.copy_(randn((1000,), torch.bfloat16, device, seed, 0.5, 1.0))
    x = randn((3, 5, 1000), torch.bfloat16, device, seed + 1)
    assert_matches_recipe(norm(x), reference.hf_llama_rms_norm(x, norm.weight, 1e-6),
                          llama_slack(x, norm.weight))


@torch.no_grad()
def test_gemma_module_matches_hf_gemma_recipe(device):
    seed = seed_of("mod-gemma")
    norm = rmsnorm.GemmaRMSNorm(1000, eps=1e-6, device=device, dtype=torch.bfloat16)
    norm.weight.copy_(randn((1000,), torch.bfloat16, device, seed, 0.1))
    x = randn((7, 1000), torch.bfloat16, device, seed + 1)
    assert_matches_recipe(norm(x), reference.hf_gemma_rms_norm(x, norm.weight, 1e-6))


@torch.no_grad()
def test_forward_with_residual_is_the_fused_add(device):
    seed = seed_of("mod-fused")
    norm = rmsnorm.RMSNorm(256, device=device, dtype=torch.float16)
    x = randn((9, 256), torch.float16, device, seed)
    residual = randn((9, 256), torch.float16, device, seed + 1)
    y, s = norm(x, residual)
    s_ref = reference.residual_add(x, residual)
    assert torch.equal(s.cpu(), s_ref.cpu())
    assert_matches_recipe(y, reference.hf_llama_rms_norm(s_ref, norm.weight, 1e-6),
                          llama_slack(s_ref, norm.weight))


def test_module_forward_with_grad_enabled_trains_the_weight():
    norm = rmsnorm.RMSNorm(8)
    norm(torch.randn(2, 8)).sum().backward()
    assert norm.weight.grad is not None and norm.weight.grad.shape == (8,)
