"""Bad input to diagnose gets an error naming the argument; a failing candidate is reported,
not swallowed."""

import pytest
import torch

import rmsnorm
from rmsnorm import compare
from rmsnorm.compare import CandidateError, space


def llama(x, weight, eps, residual=None):
    return space.evaluate(space.Recipe(), x, weight, eps).y


@pytest.fixture
def inputs():
    return compare.generate((4, 16), torch.bfloat16, seed=1)


def test_weight_of_the_wrong_shape(inputs):
    x, w, _ = inputs
    with pytest.raises(ValueError, match=r"weight must have shape \(16,\)"):
        compare.diagnose(llama, x, w[:8])


def test_residual_of_the_wrong_shape(inputs):
    x, w, _ = inputs
    with pytest.raises(ValueError, match="residual must have x's shape"):
        compare.diagnose(llama, x, w, residual=x[:2])


def test_unsupported_dtype(inputs):
    x, w, _ = inputs
    with pytest.raises(TypeError, match="x must be bfloat16, float16 or float32"):
        compare.diagnose(llama, x.double(), w)


def test_y_of_the_wrong_shape(inputs):
    x, w, _ = inputs
    with pytest.raises(CandidateError, match=r"y has shape \(4, 8\)"):
        compare.diagnose(None, x, w, y=llama(x, w, 1e-6)[:, :8])
    with pytest.raises(CandidateError, match="y has shape"):
        compare.diagnose(lambda x, w, e: x[0], x, w)


NOT_A_NORMS_DTYPE = [torch.float64, torch.int32, torch.float8_e4m3fn, torch.complex64]


@pytest.mark.parametrize("dtype", NOT_A_NORMS_DTYPE, ids=str)
def test_a_y_of_a_dtype_no_recipe_rounds_to_is_the_candidates_failure(inputs, dtype):
    x, w, _ = inputs
    y = llama(x, w, 1e-6).to(dtype)
    with pytest.raises(CandidateError, match=f"y is {dtype}"):
        compare.diagnose(lambda x, w, e: y, x, w)
    with pytest.raises(CandidateError, match=f"y is {dtype}"):
        compare.diagnose(None, x, w, y=y)


@pytest.mark.parametrize("dtype", NOT_A_NORMS_DTYPE, ids=str)
def test_a_residual_out_of_another_dtype_is_the_candidates_failure(dtype):
    x, w, r = compare.generate((4, 16), torch.bfloat16, residual=True, seed=2)
    ev = space.evaluate(space.Recipe(), x, w, residual=r)
    with pytest.raises(CandidateError, match=f"residual_out is {dtype}"):
        compare.diagnose(lambda x, w, e, r: (ev.y, ev.residual_out.to(dtype)), x, w,
                         residual=r)


def test_a_candidate_that_raises_is_reported(inputs):
    x, w, _ = inputs

    def broken(x, weight, eps):
        raise RuntimeError("no kernel for sm_00")

    with pytest.raises(CandidateError, match="candidate raised RuntimeError: no kernel"):
        compare.diagnose(broken, x, w)


def test_candidate_and_outputs_are_exclusive(inputs):
    x, w, _ = inputs
    with pytest.raises(ValueError, match="either candidate"):
        compare.diagnose(llama, x, w, y=llama(x, w, 1e-6))
    with pytest.raises(ValueError, match="candidate is None"):
        compare.diagnose(None, x, w)
    with pytest.raises(TypeError, match="candidate must be callable"):
        compare.diagnose("hf_llama", x, w)


@pytest.mark.parametrize("eps, offset", [
    (1e39, 0.0),            # infinite in fp32: every recipe would give y = 0
    (3.5e38, 0.0),          # finite in float64, past fp32's largest value
    (float("inf"), 0.0), (float("nan"), 0.0), (-1e-6, 0.0),
    (1e-6, 1e39), (1e-6, float("-inf")), (1e-6, float("nan")),
])
def test_eps_and_offset_are_refused_as_rms_norm_refuses_them(inputs, eps, offset):
    x, w, _ = inputs
    with pytest.raises(ValueError) as library:
        rmsnorm.rms_norm(x, w, eps, offset=offset)
    with pytest.raises(ValueError) as ours:
        compare.diagnose(llama, x, w, eps, offset=offset)
    assert str(ours.value) == str(library.value)


def test_offset_without_weight(inputs):
    x, _, _ = inputs
    with pytest.raises(ValueError, match="added to the weight, but weight is None"):
        compare.diagnose(llama, x, None, offset=1.0)


def test_residual_out_of_another_dtype_is_named():
    x, w, r = compare.generate((4, 16), torch.bfloat16, residual=True, seed=2)
    ev = space.evaluate(space.Recipe(), x, w, residual=r)
    with pytest.raises(CandidateError, match="residual_out is torch.float32"):
        compare.diagnose(None, x, w, residual=r, y=ev.y, residual_out=ev.residual_out.float())


def test_the_candidate_works_on_copies(inputs):
    x, w, _ = inputs
    before = x.clone()

    def in_place(x, weight, eps):
        x.copy_(space.evaluate(space.Recipe(), x, weight, eps).y.to(x.dtype))
        return x

    compare.diagnose(in_place, x, w.bfloat16())
    assert torch.equal(x, before)
