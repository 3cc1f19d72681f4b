"""Row strides, 3-D views, aliasing, and the looped path for rows longer than one tile."""

import pytest
import torch

import rmsnorm
from rmsnorm import reference
from rmsnorm.launch import configs
import helpers
from helpers import (assert_close_float64, assert_matches_recipe, nan_like, randn,
                     recipe_rms_norm, seed_of, weight_for)


def check(x, w, y, casting_mode="llama", offset=0.0):
    assert_close_float64(y, reference.float64_rms_norm(x, w, 1e-6, offset), x.dtype)
    assert_matches_recipe(y, *recipe_rms_norm(x, w, 1e-6, offset, casting_mode))


def test_rows_with_a_stride_from_a_2d_slice(device):
    seed = seed_of("2d-slice")
    big = randn((65, 3000), torch.bfloat16, device, seed)
    x = big[:, 1000:2000]  # row stride 3000, no copy
    w = weight_for(1000, torch.bfloat16, device, seed)
    check(x, w, rmsnorm.rms_norm(x, w))


@pytest.mark.parametrize("part", [0, 1, 2])
def test_q_k_v_heads_sliced_from_a_fused_qkv_tensor(device, part):
    # [tokens, 3 * heads * head_dim] viewed as [tokens, 3 * heads, head_dim]; q, k or v is a
    # [tokens, heads, head_dim] view with token stride 3 * heads * head_dim.
    tokens, heads, head_dim = 9, 4, 128
    seed = seed_of("qkv", part)
    qkv = randn((tokens, 3 * heads * head_dim), torch.bfloat16, device, seed, scale=3.0)
    x = qkv.view(tokens, 3 * heads, head_dim)[:, part * heads:(part + 1) * heads]
    assert not x.is_contiguous()
    w = weight_for(head_dim, torch.bfloat16, device, seed)
    check(x, w, rmsnorm.rms_norm(x, w))


def test_strided_view_written_in_place_through_out(device):
    tokens, heads, head_dim = 5, 3, 64
    seed = seed_of("qkv-out")
    qkv = randn((tokens, 3 * heads, head_dim), torch.float16, device, seed)
    q = qkv[:, :heads]
    before = qkv.clone()
    w = weight_for(head_dim, torch.float16, device, seed)
    y = rmsnorm.rms_norm(q, w, out=q)
    assert y.data_ptr() == q.data_ptr()
    check(before[:, :heads], w, y)
    assert torch.equal(qkv[:, heads:], before[:, heads:]), "wrote outside the q view"


def test_out_may_alias_x(device):
    seed = seed_of("alias")
    x = randn((65, 4096), torch.bfloat16, device, seed)
    x0 = x.clone()
    w = weight_for(4096, torch.bfloat16, device, seed)
    y = rmsnorm.rms_norm(x, w, out=x)
    assert y is x
    check(x0, w, y)


def test_four_level_strides_are_read_through_a_copy(device):
    seed = seed_of("4d")
    base = randn((3, 4, 5, 6, 64), torch.float32, device, seed)
    x = base[:, ::2, :, ::2]  # cannot merge into two row strides
    w = weight_for(64, torch.float32, device, seed)
    check(x, w, rmsnorm.rms_norm(x, w))


def test_strided_last_dimension_is_read_through_a_copy(device):
    seed = seed_of("last-strided")
    x = randn((65, 256), torch.bfloat16, device, seed)[:, ::2]
    w = weight_for(128, torch.bfloat16, device, seed)
    check(x, w, rmsnorm.rms_norm(x, w))


def test_fused_add_with_strided_inputs_and_outputs(device):
    seed = seed_of("fused-strided")
    x = randn((3, 6, 96), torch.bfloat16, device, seed)[:, ::2]
    residual_base = randn((3, 8, 96), torch.bfloat16, device, seed + 7)
    residual = residual_base[:, 1:4]
    r0 = residual.clone()
    w = weight_for(96, torch.bfloat16, device, seed)
    y, s = rmsnorm.fused_add_rms_norm(x, residual, w, inplace=True)
    assert s is residual
    s_ref = reference.residual_add(x, r0)
    assert torch.equal(s.cpu(), s_ref.cpu())
    check(s_ref, w, y)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32,
                                   torch.float64])
@pytest.mark.parametrize("n", [33, 100, 256])
@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
def test_looped_path_for_rows_longer_than_one_tile(device, dtype, n, casting_mode):
    seed = seed_of("loop", dtype, n, casting_mode)
    x = randn((7, n), dtype, device, seed, scale=2.0)
    w = weight_for(n, dtype, device, seed)
    with helpers.max_tile(32):
        assert configs.forward_launch(n, x.element_size(), False).path == "loop"
        y, _, rstd = rmsnorm.launch.ops.forward(x, w, casting_mode=casting_mode, out=nan_like(x),
                                         return_rstd=True)
    check(x, w, y, casting_mode)
    torch.testing.assert_close(rstd, reference.contract_rms_norm(x, None)[1].squeeze(-1),
                               rtol=2e-6 if dtype != torch.float64 else 1e-13, atol=0)


@pytest.mark.parametrize("dtypes", [(torch.bfloat16, torch.bfloat16),
                                    (torch.float16, torch.float32)])
@pytest.mark.parametrize("inplace", [False, True])
def test_looped_path_fused_add(device, dtypes, inplace):
    xd, rd = dtypes
    seed = seed_of("loop-fused", dtypes, inplace)
    x = randn((5, 300), xd, device, seed)
    residual = randn((5, 300), rd, device, seed + 7)
    x0, r0 = x.clone(), residual.clone()
    w = weight_for(300, xd, device, seed)
    out = x if xd == rd else None  # an fp32 stream normalizes to fp32: x cannot hold y
    with helpers.max_tile(64):
        y, s = rmsnorm.fused_add_rms_norm(x, residual, w, inplace=inplace, out=out)
    s_ref = reference.residual_add(x0, r0)
    assert torch.equal(s.cpu(), s_ref.cpu())
    check(s_ref, w, y)


def test_looped_path_strided_rows(device):
    seed = seed_of("loop-strided")
    x = randn((4, 6, 200), torch.float32, device, seed)[:, 1:5]
    w = weight_for(200, torch.float32, device, seed)
    with helpers.max_tile(64):
        y = rmsnorm.rms_norm(x, w)
    check(x, w, y)


def test_a_capped_tile_is_honoured_after_the_same_call_ran_uncapped(device, monkeypatch):
    # Launch decisions are cached per call signature; the cap must still reach the kernel.
    # Capped rows are looped: by fwd_loop_kernel, or for fewer rows than SMs by the split
    # forward, whose first grid is fwd_sumsq_kernel.
    x = randn((3, 77), torch.float16, device, seed_of("cap-after-cache"))
    rmsnorm.rms_norm(x)
    launched = []

    def spy_on(name):
        real = getattr(rmsnorm.launch.specs, name)

        class Spy:
            arg_names = real.arg_names

            def __getitem__(self, grid):
                launched.append(name)
                return real[grid]

        monkeypatch.setattr(rmsnorm.launch.specs, name, Spy())

    spy_on("fwd_loop_kernel")
    spy_on("fwd_sumsq_kernel")
    with helpers.max_tile(32):
        y = rmsnorm.rms_norm(x)
    assert launched, "no looped kernel ran under max_tile(32)"
    check(x, None, y)
