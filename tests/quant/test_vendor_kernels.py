"""vLLM's and FlashInfer's real kernels (rmsnorm_tools.vendors: build/peers or RMSNORM_PEERS)
against the vendors' recipes in PyTorch ops and against rmsnorm's kernels under the vendor's
preset (recipe="vllm", recipe="flashinfer"), row by row. Every row of every output, the
vendor's and the preset's, is the recipe's bits or the recipe's bits with rstd a few units
in the last place off (vendor_bits.MAX_ULPS: each kernel sums the squares in its own order).
A vendor row that is neither means the recipe misreads the kernel; a preset row that is
neither means the preset does not compute the vendor's recipe. The residual written back
has no reduction in it: it is the vendor's, bit for bit. Skipped without a GPU or without
the vendor libraries."""

import zlib

import pytest
import torch

from rmsnorm_tools import vendor_bits as vb
from rmsnorm_tools import vendors

VLLM, FLASHINFER, WHY = vendors.available() if torch.cuda.is_available() else \
    (None, None, "no CUDA device")
SHAPES = [(1, 4096), (16, 2048), (33, 5120), (5, 4099), (2048, 4096)]  # decode to prefill; odd N


def check(case, lib, op, dtype, shape, kind):
    x, r, w = vb.inputs(kind, shape, dtype, seed=zlib.crc32(repr((op, shape, kind)).encode()) % 1000)
    vendor, preset, recipe = case(lib, op, x, r, w)
    got = vb.classify(vendor, preset, recipe)
    assert got["rows_unexplained"] == 0.0, got
    assert got["preset.rows_unexplained"] == 0.0, got
    if "residual" in vendor:
        assert vb.same_bits(vendor["residual"], recipe(0)["residual"]).all()
        assert vb.same_bits(vendor["residual"], preset["residual"]).all()


@pytest.mark.skipif(VLLM is None, reason=f"vLLM's kernels: {WHY}")
@pytest.mark.parametrize("kind", vb.KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=vb.m_n)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("op", vb.VLLM_OPS)
def test_vllm_kernels_follow_their_recipes(op, dtype, shape, kind):
    if "grp" in op and shape[1] % 128:
        pytest.skip("vLLM's group kernels need N divisible by 128 here")
    check(vb.vllm_case, VLLM, op, dtype, shape, kind)


@pytest.mark.skipif(FLASHINFER is None, reason=f"FlashInfer's kernels: {WHY}")
@pytest.mark.parametrize("kind", vb.KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=vb.m_n)
@pytest.mark.parametrize("op", vb.FI_OPS)
def test_flashinfer_kernels_follow_their_recipes(op, shape, kind):
    check(vb.flashinfer_case, FLASHINFER, op, torch.bfloat16, shape, kind)
