"""Forward tiles kept in their storage dtype between the passes (configs.Launch.keep_stored):
every 16-bit value widens to the very fp32 that `.to` gives, so a kept tile gives the bits of
the same tile held in fp32 (plain and fused add, every dtype and mode, chunked and masked),
and launches that cannot keep a tile are refused by name."""

import pytest
import torch
import triton
import triton.language as tl

from rmsnorm import reference
from rmsnorm.kernels.forward import _widen
from rmsnorm.launch import configs, ops
from rmsnorm_tools import sweep
from helpers import (assert_close_float64, assert_matches_recipe, assert_same_bits, randn,
                     recipe_rms_norm, seed_of, weight_for)


@triton.jit
def _widen_kernel(SRC, DST, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    tl.store(DST + offs, _widen(tl.load(SRC + offs, mask=mask), tl.float32), mask=mask)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_16_bit_value_widens_to_what_to_gives(device, dtype):
    # All 65536 bit patterns: zeros, subnormals, normals, infinities and NaNs of both signs.
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    src = bits.view(dtype).to(device)
    dst = torch.full(src.shape, float("nan"), dtype=torch.float32, device=device)
    _widen_kernel[(triton.cdiv(src.numel(), 4096),)](src, dst, src.numel(), BLOCK=4096)
    want = src.cpu().to(torch.float32)
    got = dst.cpu()
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan)
    assert_same_bits(got[~nan], want[~nan])


def kept(block_n, chunks=1, rows=2, keep=True, w_resident=True):
    return configs.Launch("tile", block_n, rows, 1, 1, 4, w_resident, chunks=chunks,
                          keep_stored=keep)


# width -> tile shapes: one tile, a masked tail, chunks (the last half masked), the weight
# streamed rather than held.
SHAPES = {64: [(64, 1, 2, True)], 100: [(128, 1, 1, True), (32, 4, 2, False)],
          40: [(16, 3, 1, True)]}


def _forward(x, w, launch, casting_mode, residual=None):
    # Outputs allocated by ops start as NaN (conftest): an element never written fails.
    return ops.forward(x, w, 1e-6, casting_mode=casting_mode, residual=residual,
                       return_rstd=True, launch=launch)


@pytest.mark.parametrize("n", sorted(SHAPES))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
def test_a_kept_tile_gives_the_bits_of_the_tile_held_in_fp32(device, n, dtype, casting_mode):
    seed = seed_of("kept", n, dtype, casting_mode)
    x = randn((5, n), dtype, device, seed, scale=2.0)
    w = weight_for(n, dtype, device, seed)
    for block_n, chunks, rows, w_resident in SHAPES[n]:
        y, _, rstd = _forward(x, w, kept(block_n, chunks, rows, True, w_resident), casting_mode)
        assert_close_float64(y, reference.float64_rms_norm(x, w, 1e-6), dtype)
        assert_matches_recipe(y, *recipe_rms_norm(x, w, 1e-6, 0.0, casting_mode))
        y_fp32, _, rstd_fp32 = _forward(x, w, kept(block_n, chunks, rows, False, w_resident),
                                        casting_mode)
        assert_same_bits(y, y_fp32)
        assert_same_bits(rstd, rstd_fp32)


@pytest.mark.parametrize("n", sorted(SHAPES))
@pytest.mark.parametrize("dtypes", [(torch.bfloat16, torch.bfloat16),
                                    (torch.float16, torch.float16),
                                    (torch.bfloat16, torch.float32)])
def test_a_kept_fused_add_tile_keeps_the_rounded_sum(device, n, dtypes):
    x_dtype, r_dtype = dtypes
    seed = seed_of("kept-add", n, x_dtype, r_dtype)
    x = randn((4, n), x_dtype, device, seed)
    r = randn((4, n), r_dtype, device, seed + 1)
    w = weight_for(n, x_dtype, device, seed)
    s_want = reference.residual_add(x, r)
    for block_n, chunks, rows, w_resident in SHAPES[n]:
        y, s, _ = _forward(x, w, kept(block_n, chunks, rows, True, w_resident), "llama", r)
        assert_same_bits(s, s_want)
        assert_close_float64(y, reference.float64_rms_norm(s_want, w, 1e-6), x_dtype)
        y_fp32, s_fp32, _ = _forward(x, w, kept(block_n, chunks, rows, False, w_resident),
                                     "llama", r)
        assert_same_bits(y, y_fp32)
        assert_same_bits(s, s_fp32)


def test_a_looped_launch_cannot_keep_its_row(device):
    x = randn((2, 64), torch.bfloat16, device, seed_of("kept-loop"))
    loop = configs.Launch("loop", 32, 1, 1, 1, 1, False, keep_stored=True)
    with pytest.raises(ValueError, match="keep_stored is for tile launches"):
        ops.forward(x, None, launch=loop)


def test_the_backward_refuses_a_kept_launch(device):
    x = randn((2, 64), torch.bfloat16, device, seed_of("kept-bwd"))
    _, _, rstd = ops.forward(x, None, return_rstd=True)
    with pytest.raises(ValueError, match="keep_stored is a forward tile's"):
        ops.backward(x, x, None, rstd, launch=kept(64))


def test_rows_too_long_for_an_fp32_tile_are_swept_as_kept_tiles_up_to_65536():
    assert sweep.kept_tilings(65536, 2) == [(32768, 2), (16384, 4)]
    assert sweep.kept_tilings(40000, 2) == [(8192, 5), (16384, 3)]
    assert sweep.kept_tilings(32768, 2) == []  # an fp32 tile holds it
    assert sweep.kept_tilings(65537, 2) == []  # longer rows loop
    assert sweep.kept_tilings(40000, 4) == []  # fp32 rows are not 16-bit
    kept_ones = [c for c in sweep.first_round("fwd", 65536, torch.bfloat16) if c.keep_stored]
    assert kept_ones and all(c.path == "tile" and c.block_n * c.chunks == 65536
                             for c in kept_ones)
    assert not any(c.keep_stored for c in sweep.first_round("add", 65536, torch.bfloat16))
