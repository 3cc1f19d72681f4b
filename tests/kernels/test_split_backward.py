"""The split backward (rmsnorm.kernels.backward_split, reached by Launch(path="split")): dx and
dw against float64 autograd, the contract's formulas and autograd through the recipes, every
element written, and dx batch invariant (a row's bits do not depend on M or its position)."""

import pytest
import torch

from rmsnorm import reference
from rmsnorm.launch import configs, ops
from helpers import assert_same_bits, nan_like, randn, seed_of, weight_for

from gradients import assert_gradients_match, expected_gradients, rel_err


def split(block_n=16, warps=1):
    # 8 tiles of 16 make a segment of 128: the widths below take one, two and three.
    return configs.Launch("split", block_n, 1, warps, 1, 2, False, False)


def split_backward(x, w, dy, dresidual=None, casting_mode="llama", offset=0.0, need_dw=True):
    _, _, rstd = ops.forward(x, w, return_rstd=True, offset=offset, casting_mode=casting_mode)
    dx = nan_like(x)
    _, dw = ops.backward(dy, x, w, rstd, offset=offset, casting_mode=casting_mode,
                         dresidual=dresidual, need_dw=need_dw, dx_out=dx, launch=split())
    return dx, dw, rstd


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("casting_mode,offset", [("llama", 0.0), ("gemma", 1.0)])
@pytest.mark.parametrize("n", [100, 200, 300])
def test_split_gradients_match_float64_the_contract_and_the_recipe(device, dtype, casting_mode,
                                                                   offset, n):
    seed = seed_of("split", dtype, casting_mode, offset, n)
    x, dy = randn((5, n), dtype, device, seed), randn((5, n), dtype, device, seed + 2)
    w = weight_for(n, dtype, device, seed) - offset
    dx, dw, rstd = split_backward(x, w, dy, casting_mode=casting_mode, offset=offset)
    assert not dx.isnan().any() and not dw.isnan().any()

    assert_gradients_match(dx, dw, expected_gradients(x, w, dy, rstd, casting_mode, offset),
                           dtype)


@pytest.mark.parametrize("with_weight", [True, False])
def test_split_fused_add_gradient_adds_dresidual(device, with_weight):
    seed = seed_of("split-dresidual", with_weight)
    x, dy = randn((4, 300), torch.float32, device, seed), randn((4, 300), torch.float32,
                                                                 device, seed + 1)
    dresidual = randn((4, 300), torch.float32, device, seed + 2)
    w = weight_for(300, torch.float32, device, seed) if with_weight else None
    dx, dw, rstd = split_backward(x, w, dy, dresidual=dresidual)
    dx_c, dw_c = reference.contract_rms_norm_backward(dy, x, w, rstd, dresidual=dresidual)
    assert rel_err(dx, dx_c) <= 1e-6
    if with_weight:
        assert rel_err(dw, dw_c) <= 1e-6
    else:
        assert dw is None


def test_split_dx_of_a_row_does_not_depend_on_the_batch(device):
    seed = seed_of("split-invariance")
    x, dy = randn((9, 300), torch.bfloat16, device, seed), randn((9, 300), torch.bfloat16,
                                                                  device, seed + 1)
    w = weight_for(300, torch.bfloat16, device, seed)
    full, _, _ = split_backward(x, w, dy)
    for rows in (slice(4, 5), slice(2, 9), slice(0, 3)):
        part, _, _ = split_backward(x[rows], w, dy[rows])
        assert_same_bits(part, full[rows])
    alone, dw_none, _ = split_backward(x[4:5], w, dy[4:5], need_dw=False)
    assert dw_none is None
    assert_same_bits(alone, full[4:5])


def test_split_two_level_rows_match_their_contiguous_copy(device):
    seed = seed_of("split-strided")
    base = randn((3, 4, 200), torch.float32, device, seed)
    dy = randn((3, 3, 200), torch.float32, device, seed + 1)
    w = weight_for(200, torch.float32, device, seed)
    view = base[:, 1:, :]  # two row strides
    dx_view, dw_view, _ = split_backward(view, w, dy)
    dx_copy, dw_copy, _ = split_backward(view.contiguous(), w, dy)
    assert_same_bits(dx_view, dx_copy)
    assert_same_bits(dw_view, dw_copy)
