"""Batch invariance: a row's y, rstd, residual sum and dx are the same bits whatever the batch
around it: any number of rows M, any position of the row, and so whatever grid and persistent
loop M gives the launch (the launch table picks the kernel by N alone). Serving engines need
it: a request's logprobs must not change with the batch it was scheduled in."""

import contextlib

import pytest
import torch

from rmsnorm.launch import configs, ops
import helpers
from helpers import assert_same_bits, randn, seed_of, weight_for

ON_GPU = torch.cuda.is_available()
# (N, tile cap, largest M): the tile path at widths that are and are not multiples of 16, a row
# held as chunks of a narrower tile (10240: 5 x 2048 forward, 3 x 4096 backward), and the
# looped path (40000: split in two grids below half the SMs).
WIDTHS = [(128, None, 65536), (300, None, 65536), (4096, None, 65536), (10240, None, 4096),
          (40000, None, 4096)] if ON_GPU else [(48, None, 33), (20, None, 33), (200, 64, 9)]
ROWS = [1, 2, 3, 16, 17, 255, 256, 1000, 4096, 65536] if ON_GPU else [1, 2, 3, 9, 16, 17, 33]
DTYPES = [torch.bfloat16, torch.float32]


def cap(limit):
    return helpers.max_tile(limit) if limit else contextlib.nullcontext()


def batch_holding(row, m, position, seed):
    """m random rows with `row` at `position`."""
    batch = randn((m, row.shape[-1]), row.dtype, row.device, seed)
    batch[position] = row
    return batch


def positions(m):
    return sorted({0, m // 2, m - 1})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,limit,largest", WIDTHS)
@pytest.mark.parametrize("fused", [False, True])
def test_a_rows_forward_does_not_depend_on_its_batch(device, dtype, n, limit, largest, fused):
    seed = seed_of("invariance-fwd", dtype, n, fused)
    x_row = randn((1, n), dtype, device, seed, scale=2.0)
    r_row = randn((1, n), dtype, device, seed + 1)
    w = weight_for(n, dtype, device, seed)
    with cap(limit):
        alone = ops.forward(x_row, w, residual=r_row if fused else None, return_rstd=True)
        for m in (m for m in ROWS if m <= largest):
            for p in positions(m):
                x = batch_holding(x_row[0], m, p, seed + 2 + m)
                r = batch_holding(r_row[0], m, p, seed + 3 + m) if fused else None
                y, s, rstd = ops.forward(x, w, residual=r, return_rstd=True)
                assert_same_bits(y[p:p + 1], alone[0])
                assert_same_bits(rstd[p:p + 1], alone[2])
                if fused:
                    assert_same_bits(s[p:p + 1], alone[1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,limit,largest", WIDTHS)
def test_a_rows_dx_does_not_depend_on_its_batch(device, dtype, n, limit, largest):
    seed = seed_of("invariance-bwd", dtype, n)
    x_row = randn((1, n), dtype, device, seed, scale=2.0)
    dy_row = randn((1, n), dtype, device, seed + 1)
    w = weight_for(n, dtype, device, seed)
    with cap(limit):
        rstd_row = ops.forward(x_row, w, return_rstd=True)[2]
        alone, _ = ops.backward(dy_row, x_row, w, rstd_row)
        for m in (m for m in ROWS if m <= largest):
            for p in positions(m):
                x = batch_holding(x_row[0], m, p, seed + 2 + m)
                dy = batch_holding(dy_row[0], m, p, seed + 3 + m)
                rstd = ops.forward(x, w, return_rstd=True)[2]
                dx, _ = ops.backward(dy, x, w, rstd)
                assert_same_bits(dx[p:p + 1], alone)
