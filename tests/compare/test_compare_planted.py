"""diagnose names every point of the space: each recipe, planted as a plain-PyTorch candidate,
is found exactly on the generated inputs, and the axes those inputs cannot separate are the
ones reported as undetermined, no more."""

import pytest
import torch

from rmsnorm import compare
from rmsnorm.compare import space

DTYPES = [torch.bfloat16, torch.float16, torch.float32]

# What no input can separate (space.py's module doc): fp32 has nothing to round; without a
# weight x * rstd rounds once either way and there is no w + offset to form.
FP32_UNSEPARABLE = {"upcast", "rounding", "weight", "residual", "store"}
NO_WEIGHT_UNSEPARABLE = {"rounding", "weight"}


def planted(r):
    def candidate(x, weight, eps, residual=None):
        ev = space.evaluate(r, x, weight, eps, residual=residual)
        return ev.y if residual is None else (ev.y, ev.residual_out)
    return candidate


def expected_undetermined(dtype, weight, residual):
    if dtype == torch.float32:
        return FP32_UNSEPARABLE if residual else FP32_UNSEPARABLE - {"residual"}
    return set() if weight else NO_WEIGHT_UNSEPARABLE


@pytest.mark.parametrize("weight", [True, False], ids=["weight", "no_weight"])
@pytest.mark.parametrize("residual", [True, False], ids=["residual", "no_residual"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_planted_recipe_is_named_exactly(dtype, residual, weight):
    x, w, r = compare.generate((40, 64), dtype, weight=weight, residual=residual, seed=9)
    undetermined = expected_undetermined(dtype, weight, residual)
    for point in space.all_points(residual):
        report = compare.diagnose(planted(point), x, w, 1e-6, residual=r)
        assert report.exact, f"{point}: {report.summary()}"
        assert set(report.undetermined) == undetermined, point
        want = point.as_dict(residual)
        got = {a: v for a, v in report.best.items() if a not in undetermined}
        assert got == {a: v for a, v in want.items() if a not in undetermined}, point
        # Per axis, not all 64: the search evaluates a fraction of the space.
        assert len(report.rows) <= 32


def test_gemma_offset_separates_the_weight_axis_with_a_weight_of_the_input_dtype():
    x, w, _ = compare.generate((40, 64), torch.bfloat16, weight_dtype=torch.bfloat16, seed=4)
    bug = space.recipe("gemma_weight_in_input_dtype")
    report = compare.diagnose(planted_with_offset(bug, 1.0), x, w, offset=1.0)
    assert report.exact and report.best == bug.as_dict(False)
    assert report.undetermined == []
    # With offset 0 the same weight cannot tell: reported, not guessed.
    report = compare.diagnose(planted(bug), x, w)
    assert report.exact and report.undetermined == ["weight"]
    assert "weight is undetermined" in report.summary()


def planted_with_offset(r, offset):
    def candidate(x, weight, eps):
        return space.evaluate(r, x, weight, eps, offset=offset).y
    return candidate
