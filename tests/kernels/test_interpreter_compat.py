"""rmsnorm.launch.interpreter_compat: the fixes of Triton's interpreter, each installed only
where it is needed. Triton 3.6 with numpy 2.4 and newer: int() of a 1-element array fails, and
with it every loop whose bound is a kernel argument. Triton 3.9: a store refuses the mask that
a block and-ed with a run-time flag makes (the quantized forward's store of y)."""

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
    assert compat._needed(True, "2.4.0", "3.6.0") == ("index",)
    assert compat._needed(True, "2.5.1", "3.6.0") == ("index",)
    assert compat._needed(True, "2.3.5", "3.6.0") == ()
    assert compat._needed(False, "2.5.1", "3.6.0") == ()  # compiled kernels: no numpy involved
    assert compat._needed(True, "2.5.1", "3.7.0") == ()  # 3.7 converts the array itself
    assert compat._needed(True, "2.5.1", "3.8.0") == ()
    assert compat._needed(True, "2.4.6", "3.9.0") == ("splat",)
    assert compat._needed(False, "2.4.6", "3.9.0") == ()
    assert compat._needed(True, "2.5.0rc1", "3.6.0+git1234") == ("index",)
    assert compat._needed(True, "unknown", "3.6.0") == ()


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

    index = interpreter._patch_lang_tensor
    splat = interpreter.InterpreterBuilder.create_splat
    assert getattr(index, compat._MARK, False) == ("index" in compat.needed())
    assert getattr(splat, compat._MARK, False) == ("splat" in compat.needed())
    assert compat.apply() == compat.needed()
    assert interpreter._patch_lang_tensor is index  # once
    assert interpreter.InterpreterBuilder.create_splat is splat


@interpreted
@pytest.mark.parametrize("flag", [0, 1])
def test_a_block_masked_by_a_run_time_flag_stores_what_the_flag_says(flag):
    # The quantized forward's `mask & (store_unq != 0)`: a scalar comparison splat over a
    # block, then a store with it as the mask.
    import triton

    @triton.jit(do_not_specialize=["flag"])
    def copy_if(X, Y, n, flag, BLOCK: tl.constexpr):
        c = tl.arange(0, BLOCK)
        mask = c < n
        tl.store(Y + c, tl.load(X + c, mask=mask), mask=mask & (flag != 0))

    x = torch.randn(8, generator=torch.Generator().manual_seed(seed_of("splat", flag)))
    y = torch.full((8,), float("nan"))
    copy_if[(1,)](x, y, 6, flag, BLOCK=8)
    assert torch.equal(y[:6], x[:6]) if flag else y[:6].isnan().all()
    assert y[6:].isnan().all()


def test_a_splat_of_a_bool_scalar_is_int1_and_nothing_else_changes():
    from triton.runtime import interpreter

    calls = []
    splat = compat._splat_of(lambda self, ret_ty, arg: calls.append(arg) or arg, tl,
                             interpreter.TensorHandle)
    flag = interpreter.TensorHandle(np.array([True]), tl.int32)  # a comparison's handle
    as_int1 = splat(None, None, flag)
    assert as_int1.dtype == tl.int1 and as_int1.data.tolist() == [True]
    number = interpreter.TensorHandle(np.array([3], dtype=np.int32), tl.int32)
    assert splat(None, None, number) is number
    assert len(calls) == 2


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
