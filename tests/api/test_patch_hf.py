"""rmsnorm.patch_hf on tiny, randomly initialised Hugging Face models (no downloads)."""

import os
import warnings

import pytest
import torch
from torch import nn

import rmsnorm
from helpers import assert_matches_recipe, llama_slack, randn, seed_of, weight_for

if os.environ.get("CI"):
    import transformers  # CI installs it: a missing package must fail, not skip.
else:
    transformers = pytest.importorskip("transformers")

LAYERS = 2
# family -> (config class, model class, norms per layer, (offset, casting_mode)).
# Qwen3 and Gemma3 also normalize q and k per head; Gemma2/3 have four norms around each block.
LLAMA, GEMMA = (0.0, "llama"), (1.0, "gemma")
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", 2, LLAMA),
    "mistral": ("MistralConfig", "MistralForCausalLM", 2, LLAMA),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", 2, LLAMA),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", 4, LLAMA),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", 2, GEMMA),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", 4, GEMMA),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", 6, GEMMA),
}
VOCAB, BATCH, SEQ = 64, 2, 8


def tiny(family, device, dtype=torch.float32):
    config_cls, model_cls, _, (offset, _) = FAMILIES[family]
    config = getattr(transformers, config_cls)(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        max_position_embeddings=64, rms_norm_eps=1e-5, attn_implementation="eager")
    torch.manual_seed(seed_of("tiny", family))
    model = getattr(transformers, model_cls)(config)
    # HF starts norm weights at 1 (or 0 for Gemma's 1 + w), which would hide weight bugs.
    with torch.no_grad():
        for i, (name, p) in enumerate(model.named_parameters()):
            if "norm" in name:
                p.copy_(weight_for(p.shape[0], torch.float32, "cpu", seed_of(family, i))
                        - offset)
    return model.to(device=device, dtype=dtype)


def batch(device, seed):
    g = torch.Generator().manual_seed(seed)
    ids, labels = torch.randint(0, VOCAB, (2, BATCH, SEQ), generator=g)
    return ids.to(device), labels.to(device)


def logits_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids).logits
    # A sum, not a mean: gradients of order 1 make the absolute tolerance below meaningful.
    logits.float().square().sum().backward()
    return logits.detach(), {n: p.grad for n, p in model.named_parameters()}


def snapshot(model):
    return {k: (v.data_ptr(), v.clone()) for k, v in model.state_dict().items()}


def assert_same_state(model, before):
    after = model.state_dict()
    assert list(after) == list(before)
    for k, v in after.items():
        assert v.data_ptr() == before[k][0] and torch.equal(v, before[k][1]), k


@pytest.mark.parametrize("family", FAMILIES)
def test_patched_model_matches_hf(family, device):
    model = tiny(family, device)
    ids, _ = batch(device, seed_of(family))
    logits0, grads0 = logits_and_grads(model, ids)
    assert logits0.dtype == torch.float32
    before = snapshot(model)
    originals = dict(model.named_modules())

    replaced = rmsnorm.patch_hf(model)

    _, _, per_layer, (offset, mode) = FAMILIES[family]
    assert len(replaced) == per_layer * LAYERS + 1
    for name, original in replaced:
        assert originals[name] is original
        ours = model.get_submodule(name)
        assert type(ours) is rmsnorm.RMSNorm
        assert ours.weight is original.weight
        assert (ours.offset, ours.casting_mode) == (offset, mode)
        assert ours.variance_epsilon == 1e-5
    assert_same_state(model, before)

    logits1, grads1 = logits_and_grads(model, ids)
    torch.testing.assert_close(logits1, logits0, rtol=1e-4, atol=1e-5)
    assert grads1.keys() == grads0.keys()
    for name, g in grads0.items():
        torch.testing.assert_close(grads1[name], g, rtol=1e-4, atol=1e-5, msg=name)

    rmsnorm.unpatch(model, replaced)
    assert {n: type(m) for n, m in model.named_modules()} == \
        {n: type(m) for n, m in originals.items()}
    assert_same_state(model, before)
    assert rmsnorm.patch_hf(model) and rmsnorm.patch_hf(model) == []  # patching is idempotent


@pytest.mark.parametrize("family", FAMILIES)
def test_each_norm_rounds_as_hf_in_bf16(family, device):
    """fp32 cannot tell the casting modes apart; bf16 module by module can."""
    model = tiny(family, device, torch.bfloat16)
    llama_recipe = FAMILIES[family][3] == LLAMA
    replaced = rmsnorm.patch_hf(model)
    assert replaced
    with torch.no_grad():
        for name, original in replaced:
            n = original.weight.shape[0]
            x = randn((BATCH, SEQ, n), torch.bfloat16, device, seed_of(family, name), scale=3)
            # Llama's intermediate rounding may flip by one ulp (see assert_matches_recipe).
            slack = llama_slack(x, original.weight, original.variance_epsilon) \
                if llama_recipe else None
            assert_matches_recipe(model.get_submodule(name)(x), original(x), slack)


def test_bf16_llama_logits(device):
    model = tiny("llama", device, torch.bfloat16)
    ids, _ = batch(device, seed_of("bf16"))
    with torch.no_grad():
        ref = model(input_ids=ids).logits.float()
        with rmsnorm.patched(model) as replaced:
            assert len(replaced) == 5
            got = model(input_ids=ids).logits.float()
    assert all(type(m) is not rmsnorm.RMSNorm for m in model.modules())
    torch.testing.assert_close(got, ref, rtol=2e-2, atol=2e-2 * ref.abs().max().item())


def test_training_with_optimizer_made_before_patching(device):
    model = tiny("llama", device)
    ids, labels = batch(device, seed_of("train"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    norm_weight = model.model.norm.weight.detach().clone()
    assert len(rmsnorm.patch_hf(model)) == 5
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    # The optimizer only knows the original Parameters: they must be the ones being trained.
    assert not torch.equal(model.model.norm.weight.detach(), norm_weight)


def test_nothing_to_patch():
    model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), rmsnorm.GemmaRMSNorm(8),
                          rmsnorm.RMSNorm(8))
    assert rmsnorm.patch_hf(model) == []
    with rmsnorm.patched(model) as replaced:
        assert replaced == []


def test_shared_norm_replaced_everywhere_by_one_module():
    norm = transformers.models.llama.modeling_llama.LlamaRMSNorm(8)
    model = nn.ModuleDict({"a": norm, "b": nn.ModuleDict({"c": norm})})
    replaced = rmsnorm.patch_hf(model)
    assert replaced == [("a", norm), ("b.c", norm)]
    assert model["a"] is model["b"]["c"] and model["a"].weight is norm.weight
    rmsnorm.unpatch(model, replaced)
    assert model["a"] is norm and model["b"]["c"] is norm


def test_norm_with_hooks_is_left_alone():
    model = tiny("llama", "cpu")
    model.model.norm.register_forward_hook(lambda *args: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        replaced = rmsnorm.patch_hf(model)
    assert len(replaced) == 4 and "model.norm" not in dict(replaced)
    assert any("model.norm" in str(w.message) and "hooks" in str(w.message) for w in caught)


def test_the_public_tests_say_what_patch_hf_swaps_and_why_it_leaves_one():
    from rmsnorm.integrations import hf

    norm = transformers.models.llama.modeling_llama.LlamaRMSNorm(8)
    assert hf.is_hf_norm(norm) and hf.why_not_patched(norm) is None
    assert not hf.is_hf_norm(rmsnorm.RMSNorm(8)) and not hf.is_hf_norm(nn.LayerNorm(8))
    norm.register_forward_pre_hook(lambda *args: None)
    assert hf.why_not_patched(norm) == "it has hooks"


@pytest.mark.parametrize("fn", [rmsnorm.patch_hf, lambda m: rmsnorm.unpatch(m, [])])
def test_model_must_be_a_module(fn):
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got dict"):
        fn({"weight": torch.ones(4)})
