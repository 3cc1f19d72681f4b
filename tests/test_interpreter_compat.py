"""rmsnorm.launch.interpreter_compat: Triton 3.6's interpreter with numpy 2.4 and newer, where int()
of a 1-element array fails and with it every loop whose bound is a kernel argument."""

import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import triton.language as tl

import rmsnorm
from rmsnorm import reference
from rmsnorm.launch import configs, interpreter_compat as compat, ops

import helpers
from helpers import assert_close_float64, randn, seed_of, weight_for

interpreted = pytest.mark.skipif(not ops.INTERPRETED, reason="Triton's interpreter is off")


def _tensor_of(data):
    return SimpleNamespace(handle=SimpleNamespace(data=data))


def test_needed_only_for_the_versions_that_fail():
    assert compat._needed(True, "2.4.0", "3.6.0")
    assert compat._needed(True, "2.5.1", "3.6.0")
    assert not compat._needed(True, "2.3.5", "3.6.0")
    assert not compat._needed(False, "2.5.1", "3.6.0")  # compiled kernels: no numpy involved
    assert not compat._needed(True, "2.5.1", "3.7.0")
    assert compat._needed(True, "2.5.0rc1", "3.6.0+git1234")
    assert not compat._needed(True, "unknown", "3.6.0")


def test_index_is_the_one_element_as_an_int_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for data in (np.array([7], dtype=np.int32), np.array(7, dtype=np.int64),
                     np.int32(7)):
            value = compat._index(_tensor_of(data))
            assert value == 7 and type(value) is int
    with pytest.raises(TypeError):  # several elements: as int() of them
        compat._index(_tensor_of(np.array([1, 2], dtype=np.int32)))


@interpreted
def test_installed_on_import_exactly_where_needed():
    from triton.runtime import interpreter

    installed = interpreter._patch_lang_tensor
    assert getattr(installed, compat._MARK, False) == compat.needed()
    assert compat.apply() == compat.needed()
    assert interpreter._patch_lang_tensor is installed  # once


@interpreted
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_loops_with_a_runtime_bound_run(dtype):
    # The looped path's `range(0, n, BLOCK_N)` and the persistent loop over rows both take
    # their bound from kernel arguments.
    m, n = 5, 200
    seed = seed_of("interpreter_compat", dtype)
    x = randn((m, n), dtype, "cpu", seed)
    w = weight_for(n, dtype, "cpu", seed)
    dy = randn((m, n), dtype, "cpu", seed + 2)
    index_before = getattr(tl.tensor, "__index__", None)
    with helpers.max_tile(64):
        y, _, rstd = ops.forward(x, w, 1e-6, return_rstd=True)
        dx, dw = ops.backward(dy, x, w, rstd)
    assert getattr(tl.tensor, "__index__", None) is index_before  # undone after the run
    assert_close_float64(y, reference.float64_rms_norm(x, w))
    dx_ref, dw_ref = reference.contract_rms_norm_backward(dy, x, w, rstd)
    tol = 1e-4 if dtype == torch.float32 else 2 ** -6
    for got, want in ((dx, dx_ref), (dw, dw_ref)):
        torch.testing.assert_close(got.float(), want.to(dtype).float(), rtol=tol, atol=tol)
    assert_close_float64(rmsnorm.rms_norm(x, w), reference.float64_rms_norm(x, w))  # one tile
