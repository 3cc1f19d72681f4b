"""librmsnorm (the C library) launches the same kernels as the Python path: its outputs are
bit-identical to rmsnorm.launch.ops for the same inputs. Needs a GPU and the built library
(scripts/test_cpp.sh builds it); skipped otherwise."""

import pytest
import torch

import clib
from helpers import assert_same_bits, nan_like
from rmsnorm.launch import ops

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU"),
    pytest.mark.skipif(not clib.available(), reason=f"librmsnorm: {clib.why_not()}"),
]

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# Tile widths from the narrowest to the widest, the looped paths, and n not a multiple of 16
# (the unvectorised kernels).
NS = [1, 16, 100, 1000, 4096, 5000, 8192, 20000, 40000]


def _data(rows, n, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(rows, n, device="cuda", dtype=torch.float32, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("mode", ["llama", "gemma"])
def test_forward_and_fused_add_match_the_python_path_bit_for_bit(dtype, n, mode):
    rows = 37
    x, res, w = _data(rows, n, dtype, 1), _data(rows, n, dtype, 2), _data(1, n, dtype, 3)[0]
    y, s, rstd = ops.forward(x, w, 1e-6, offset=0.5, casting_mode=mode, residual=res,
                             return_rstd=True)
    cy, cs, crstd = nan_like(y), nan_like(s), nan_like(rstd)
    clib.forward(x, w, 1e-6, 0.5, mode, cy, crstd, residual=res, residual_out=cs)
    torch.cuda.synchronize()
    assert_same_bits(cy, y)
    assert_same_bits(cs, s)
    assert_same_bits(crstd, rstd)

    y, _, rstd = ops.forward(x, w, 1e-6, casting_mode=mode, return_rstd=True)
    cy, crstd = nan_like(y), nan_like(rstd)
    clib.forward(x, w, 1e-6, 0.0, mode, cy, crstd)
    assert_same_bits(cy, y)
    assert_same_bits(crstd, rstd)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("mode", ["llama", "gemma"])
def test_the_fused_add_of_the_unrounded_sum_matches_the_python_path_bit_for_bit(dtype, n, mode):
    """normalized_sum="fp32" (FlashInfer's fused add, vLLM's fused quantizers): compiled for
    f16 and bf16 with a weight in vectorised layouts (n a multiple of 16); f32's unrounded sum
    is its rounded one. Other layouts are refused as not compiled (UNSUPPORTED), naming the
    option."""
    rows = 37
    x, res, w = _data(rows, n, dtype, 4), _data(rows, n, dtype, 5), _data(1, n, dtype, 6)[0]
    y, s, rstd = ops.forward(x, w, 1e-6, offset=0.5, casting_mode=mode, residual=res,
                             return_rstd=True, normalized_sum="fp32")
    cy, cs, crstd = nan_like(y), nan_like(s), nan_like(rstd)
    if n % 16 and dtype != torch.float32:
        with pytest.raises(clib.LibraryError, match="RMSNORM_SUM_FP32 is compiled for"):
            clib.forward(x, w, 1e-6, 0.5, mode, cy, crstd, residual=res, residual_out=cs,
                         normalized_sum="fp32")
        return
    clib.forward(x, w, 1e-6, 0.5, mode, cy, crstd, residual=res, residual_out=cs,
                 normalized_sum="fp32")
    torch.cuda.synchronize()
    assert_same_bits(cy, y)
    assert_same_bits(cs, s)
    assert_same_bits(crstd, rstd)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("fused", [False, True])
def test_backward_matches_the_python_path_bit_for_bit(dtype, n, fused):
    rows = 300
    x, dy, w = _data(rows, n, dtype, 4), _data(rows, n, dtype, 5), _data(1, n, dtype, 6)[0]
    dresidual = _data(rows, n, dtype, 7) if fused else None
    _, _, rstd = ops.forward(x, w, 1e-6, return_rstd=True)
    dx, dw = ops.backward(dy, x, w, rstd, dresidual=dresidual)
    cdx, cdw = nan_like(dx), nan_like(dw)
    clib.backward(dy, x, w, rstd, 0.0, "llama", cdx, cdw, dresidual=dresidual)
    torch.cuda.synchronize()
    assert_same_bits(cdx, dx)
    if n == 1 and dtype == torch.float32:
        # The one exception to bit-identity: Triton's JIT compiles n == 1 (and strides of 1)
        # as constants, a kernel of its own whose dw partials it lays out in another order.
        # (Not specializing n would cost its divisibility, which vectorises every other n.)
        torch.testing.assert_close(cdw, dw, rtol=1e-6, atol=0)
    else:
        assert_same_bits(cdw, dw)


def test_strided_and_misaligned_rows_match_the_python_path():
    base = _data(64, 4096 + 24, torch.bfloat16, 8)
    x = base[:, 1:4097]  # row stride 4120, base pointer 2 bytes off: the unvectorised kernel
    w = _data(1, 4096, torch.bfloat16, 9)[0]
    y, _, _ = ops.forward(x, w, 1e-6)
    cy = nan_like(y)
    clib.forward(x, w, 1e-6, 0.0, "llama", cy)
    torch.cuda.synchronize()
    assert_same_bits(cy, y)


def test_the_library_names_the_kernels_it_runs():
    major, minor = torch.cuda.get_device_capability()
    assert clib.kernels() in (f"sm_{major}{minor} cubins",
                              f"sm_80 PTX, JIT-compiled for sm_{major}{minor}")
