"""The generated inputs separate the space: on them, every two recipes one axis apart give
different outputs in bf16 and fp16, and each row kind does what it is there for."""

import pytest
import torch

from rmsnorm.compare import inputs, space

SIXTEEN = [torch.bfloat16, torch.float16]


@pytest.mark.parametrize("residual", [True, False])
@pytest.mark.parametrize("dtype", SIXTEEN)
def test_every_pair_of_recipes_one_axis_apart_differs(dtype, residual):
    x, w, r = inputs.generate((40, 64), dtype, residual=residual, seed=21)
    outs = {p: space.evaluate(p, x, w, residual=r, out_dtype=dtype)
            for p in space.all_points(residual)}
    axes = [a for a in space.AXES if residual or a != "residual"]
    for p, ev in outs.items():
        for axis in axes:
            other = outs[p.flip(axis)]
            differs = not torch.equal(ev.y.view(torch.int16), other.y.view(torch.int16))
            if residual:
                differs = differs or not torch.equal(ev.residual_out.view(torch.int16),
                                                     other.residual_out.view(torch.int16))
            assert differs, f"{p} and its {axis} flip give the same bits"


@pytest.mark.parametrize("dtype", SIXTEEN + [torch.float32])
def test_tiny_rows_have_a_mean_square_near_eps(dtype):
    x, _, _ = inputs.generate((4, 64), dtype, kinds="tiny", seed=2, eps=1e-6)
    ms = x.double().pow(2).mean(-1)
    assert ((ms > 1e-8) & (ms < 1e-4)).all(), ms


@pytest.mark.parametrize("dtype", SIXTEEN)
def test_midpoint_rows_put_x_times_rstd_near_rounding_midpoints(dtype):
    x, _, _ = inputs.generate((6, 64), dtype, kinds="midpoints", seed=3)
    ev = space.evaluate(space.Recipe(), x)
    dist = space.midpoint_distance(ev.first_rounding, dtype)[:, 1:]  # column 0 is the anchor
    chance = 0.25  # mean distance of values spread evenly between grid points
    assert dist.mean() < chance / 5, dist.mean()


def test_rows_are_fresh_nonzero_and_reproducible():
    a = inputs.generate((10, 32), torch.bfloat16, residual=True, seed=5)
    b = inputs.generate((10, 32), torch.bfloat16, residual=True, seed=5)
    c = inputs.generate((10, 32), torch.bfloat16, residual=True, seed=6)
    for t, u in zip(a, b):
        assert torch.equal(t, u)
    assert not torch.equal(a[0], c[0])
    assert (a[0] != 0).float().mean() > 0.95 and (a[2] != 0).float().mean() > 0.95
    # The weight has bits below bf16's precision: forming it in bf16 changes it.
    assert a[1].dtype == torch.float32 and not torch.equal(a[1].bfloat16().float(), a[1])


def test_bad_shapes_and_kinds_are_refused():
    with pytest.raises(ValueError, match="shape"):
        inputs.generate((4, 1))
    with pytest.raises(ValueError, match="kinds"):
        inputs.generate((4, 8), kinds="gaussian")
