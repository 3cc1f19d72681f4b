"""The recipe space: its named points are the library recipes they claim, bit for bit, and a
truncating store rounds toward zero."""

import pytest
import torch

from rmsnorm import reference
from rmsnorm.compare import space
from rmsnorm.compare.space import Recipe
from helpers import randn, seed_of, weight_for

DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def assert_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize("dtype", DTYPES)
def test_named_points_are_the_library_recipes(dtype):
    seed = seed_of("space", dtype)
    x = randn((33, 96), dtype, "cpu", seed, scale=2.0)
    w = weight_for(96, dtype, "cpu", seed)
    named = space.recipes()
    assert_bits(space.evaluate(named["hf_llama"], x, w).y, reference.hf_llama_rms_norm(x, w))
    assert_bits(space.evaluate(named["hf_gemma"], x, w, offset=1.0).y,
                reference.hf_gemma_rms_norm(x, w))
    assert_bits(space.evaluate(named["torch"], x, w).y, reference.torch_rms_norm(x, w))
    for mode in ("llama", "gemma"):
        assert_bits(space.evaluate(named[f"rmsnorm_{mode}"], x, w, offset=0.5).y,
                    reference.contract_rms_norm(x, w, offset=0.5, casting_mode=mode)[0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_fused_add_point_is_the_unfused_hf_add_then_norm(dtype):
    seed = seed_of("space-add", dtype)
    x, res = randn((17, 64), dtype, "cpu", seed), randn((17, 64), dtype, "cpu", seed + 7)
    w = weight_for(64, dtype, "cpu", seed)
    ev = space.evaluate(Recipe(), x, w, residual=res)
    y, s, _ = reference.contract_fused_add_rms_norm(x, res, w)
    assert_bits(ev.y, y)
    assert_bits(ev.residual_out, s)
    assert_bits(ev.residual_out, reference.residual_add(x, res))


def test_fp32_weight_promotes_llama_output_as_hf_does():
    x = randn((5, 64), torch.bfloat16, "cpu", 3)
    w = randn((64,), torch.float32, "cpu", 4) * 1.001
    y = space.evaluate(Recipe(), x, w).y
    assert y.dtype == torch.float32
    assert_bits(y, reference.hf_llama_rms_norm(x, w))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_truncating_conversion_is_the_largest_magnitude_not_above(dtype):
    g = torch.Generator().manual_seed(1)
    t = torch.randn(20000, generator=g) * torch.exp(torch.randn(20000, generator=g) * 4)
    t = torch.cat([t, torch.tensor([1e9, -1e9, 1e-12, -1e-12])])
    tz = space.convert(t, dtype, "truncate")
    assert (tz.double().abs() <= t.double().abs()).all()
    # The next value away from zero is above |t|: nothing representable was skipped.
    up = (tz.view(torch.int16) + 1).view(dtype).double().abs()
    assert (up > t.double().abs()).all()
    assert (space.convert(t, dtype, "rne") != tz).float().mean() > 0.3
    if dtype == torch.bfloat16:  # truncating bf16 is dropping the low 16 bits of fp32
        dropped = (t.view(torch.int32) & ~0xFFFF).view(torch.float32)
        assert_bits(tz[:-4].float(), dropped[:-4])


def test_recipe_specs_and_their_errors():
    assert space.recipe("hf_gemma") == Recipe(rounding="gemma")
    assert space.recipe("upcast=none, store=truncate") == Recipe(upcast="none", store="truncate")
    assert Recipe().flip("eps").eps == "outside"
    with pytest.raises(ValueError, match="axis 'store'"):
        Recipe(store="stochastic")
    with pytest.raises(ValueError, match="unknown recipe axes"):
        space.recipe({"casting": "llama"})
    with pytest.raises(ValueError, match="neither a name"):
        space.recipe("llama3")
    assert len(space.all_points()) == 64 and len(space.all_points(residual=False)) == 32
