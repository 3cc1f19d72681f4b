"""Every layout the functions accept gives the very bits of the same data laid out
contiguously: row strides (multiples of 16 or not), pointers off 16 bytes, 3-D head views,
outputs and in-place residuals that are such views, row strides of 2^31 elements and more
(GPU), for the forward, the fused add and the backward, on the tile and the looped path."""

import contextlib

import pytest
import torch

import rmsnorm
from rmsnorm.launch import configs, ops
import helpers
from helpers import assert_same_bits, randn, seed_of, weight_for

ON_GPU = torch.cuda.is_available()
KINDS = ["row_stride_16", "row_stride_odd", "misaligned", "heads", "two_levels_padded"]
# Row strides of 2^31 elements and more: Triton types such a stride as a 64-bit integer.
HUGE = ["stride_2^31", "stride_2^31+16", "stride_2^31+3"]
DTYPES = [torch.bfloat16, torch.float16, torch.float32] if ON_GPU else \
    [torch.bfloat16, torch.float32]
# (N, tile cap): the tile path, widths that are and are not multiples of 16, the loop.
WIDTHS = [(128, None), (300, None), (4096, None), (40000, None)] if ON_GPU else \
    [(48, None), (20, None), (200, 64)]


def laid_out(t, kind):
    """A tensor holding t's values ([M, N]) in layout `kind` (its shape may be [M // 4, 4,
    N] for head views)."""
    m, n = t.shape
    dev, dt = t.device, t.dtype
    if kind == "contiguous":
        v = torch.empty(m, n, device=dev, dtype=dt)
    elif kind == "row_stride_16":
        width = -(-n // 16) * 16 + 32
        v = torch.empty(m, width, device=dev, dtype=dt)[:, 16:16 + n]
    elif kind == "row_stride_odd":
        v = torch.empty(m, n + 3, device=dev, dtype=dt)[:, :n]
    elif kind == "misaligned":
        v = torch.empty(m * n + 1, device=dev, dtype=dt)[1:].view(m, n)
    elif kind == "heads":  # q/k heads of a fused QKV projection: [tokens, heads, head_dim]
        v = torch.empty(m // 4, 12, n, device=dev, dtype=dt)[:, 4:8]
    elif kind == "two_levels_padded":  # heads whose rows are padded to a multiple of 16
        width = -(-n // 16) * 16
        v = torch.empty(m // 4, 8, width, device=dev, dtype=dt)[:, 2:6, :n]
    else:  # "stride_2^31[+k]": rows 2^31 + k elements apart
        stride = 2 ** 31 + (int(kind.split("+")[1]) if "+" in kind else 0)
        v = torch.empty((m - 1) * stride + n, device=dev, dtype=dt).as_strided((m, n),
                                                                             (stride, 1))
    v.copy_(t.view(v.shape))
    return v


def poisoned(like, kind):
    return laid_out(torch.full(like.shape, float("nan"), dtype=like.dtype, device=like.device),
                    kind)


def flat(t):
    return t.reshape(-1, t.shape[-1])


def cap(limit):
    return helpers.max_tile(limit) if limit else contextlib.nullcontext()


def inputs(tag, dtype, device, m, n):
    seed = seed_of(tag, dtype, m, n)
    return (randn((m, n), dtype, device, seed, scale=2.0),
            randn((m, n), dtype, device, seed + 1),
            weight_for(n, dtype, device, seed),
            randn((m, n), dtype, device, seed + 2))


def forward_in(kind, x, residual, w, casting_mode, fused, inplace):
    """(y, s, rstd) of the forward with x, the residual and every output in layout kind."""
    lx = laid_out(x, kind)
    out = poisoned(x, kind)
    if not fused:
        y, _, rstd = ops.forward(lx, w, 1e-6, casting_mode=casting_mode, out=out,
                                 return_rstd=True)
        return flat(y), None, rstd.reshape(-1)
    lr = laid_out(residual, kind)
    s_out = lr if inplace else poisoned(residual, kind)
    y, s, rstd = ops.forward(lx, w, 1e-6, casting_mode=casting_mode, residual=lr,
                             inplace=inplace, out=out, residual_out=s_out,
                             return_rstd=True)
    assert s.data_ptr() == s_out.data_ptr()
    return flat(y), flat(s), rstd.reshape(-1)


def check_forward(kind, dtype, device, m, n, limit, casting_mode, fused, inplace):
    x, residual, w, _ = inputs(("fwd", kind, fused), dtype, device, m, n)
    with cap(limit):
        expected = forward_in("contiguous", x, residual, w, casting_mode, fused, inplace)
        got = forward_in(kind, x, residual, w, casting_mode, fused, inplace)
    for a, b in zip(got, expected):
        if b is not None:
            assert_same_bits(a, b)


def backward_in(kind, x, w, dy, dresidual, rstd):
    dx_out, lx = poisoned(x, kind), laid_out(x, kind)
    dx, dw = ops.backward(laid_out(dy, kind), lx, w, rstd.view(lx.shape[:-1]),
                          dresidual=None if dresidual is None else laid_out(dresidual, kind),
                          dx_out=dx_out)
    return flat(dx), dw


def check_backward(kind, dtype, device, m, n, limit, casting_mode, fused):
    x, dresidual, w, dy = inputs(("bwd", kind, fused), dtype, device, m, n)
    with cap(limit):
        _, _, rstd = ops.forward(x, w, 1e-6, casting_mode=casting_mode, return_rstd=True)
        dresidual = dresidual if fused else None
        expected = backward_in("contiguous", x, w, dy, dresidual, rstd)
        got = backward_in(kind, x, w, dy, dresidual, rstd)
    for a, b in zip(got, expected):
        assert_same_bits(a, b)


def rows_for(device):
    return 64 if device == "cuda" else 8  # the interpreter is slow


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,limit", WIDTHS)
@pytest.mark.parametrize("casting_mode", ["llama", "gemma"])
def test_forward_gives_the_contiguous_bits(device, kind, dtype, n, limit, casting_mode):
    check_forward(kind, dtype, device, rows_for(device), n, limit, casting_mode,
                  False, False)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,limit", WIDTHS)
@pytest.mark.parametrize("inplace", [False, True])
def test_fused_add_gives_the_contiguous_bits(device, kind, dtype, n, limit, inplace):
    check_forward(kind, dtype, device, rows_for(device), n, limit, "llama",
                  True, inplace)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,limit", WIDTHS)
@pytest.mark.parametrize("fused", [False, True])
def test_backward_gives_the_contiguous_bits(device, kind, dtype, n, limit, fused):
    check_backward(kind, dtype, device, rows_for(device), n, limit, "llama",
                   fused)


needs_big_gpu = pytest.mark.skipif(
    not ON_GPU or torch.cuda.get_device_properties(0).total_memory < 64 * 2 ** 30,
    reason="rows 2^31 elements apart need a GPU with 64 GiB")


@needs_big_gpu
@pytest.mark.big_gpu_memory
@pytest.mark.parametrize("kind", HUGE)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("op", ["fwd", "add", "add_inplace", "bwd", "bwd_fused"])
def test_rows_2_31_elements_apart_give_the_contiguous_bits(kind, dtype, op):
    try:
        if op.startswith("bwd"):
            check_backward(kind, dtype, "cuda", 2, 128, None, "llama", op == "bwd_fused")
        else:
            check_forward(kind, dtype, "cuda", 2, 128, None, "llama", op != "fwd",
                          op == "add_inplace")
    finally:
        torch.cuda.empty_cache()
