"""What a caller sees of the kernels' launches besides their results: concurrent calls from
threads are each correct (Triton's interpreter is not re-entrant: rmsnorm serializes its
launches), and no warning reaches the caller (numpy's, from the interpreter computing the
masked-off lanes of a tile; numpy scalars as eps)."""

import threading
import warnings

import numpy as np
import pytest
import torch

import rmsnorm
from rmsnorm import reference
from helpers import (assert_close_float64, assert_matches_recipe, assert_same_bits, nan_like,
                     randn, recipe_rms_norm, seed_of, weight_for)


def test_calls_from_eight_threads_are_each_correct(device):
    inputs = []
    for i in range(8):
        x = randn((4, 200), torch.bfloat16, device, seed_of("threads", i))
        inputs.append((x, weight_for(200, torch.bfloat16, device, seed_of("threads", i))))
    # One thread's answers, held to the float64 reference and the recipe.
    alone = [rmsnorm.rms_norm(x, w) for x, w in inputs]
    for (x, w), y in zip(inputs, alone):
        assert_close_float64(y, reference.float64_rms_norm(x, w), torch.bfloat16)
        assert_matches_recipe(y, *recipe_rms_norm(x, w, 1e-6, 0.0, "llama"))
    errors, results = [], {}
    start = threading.Barrier(8)

    def work(i):
        try:
            x, w = inputs[i]
            start.wait(timeout=60)  # all in at once: the interpreter's state is shared
            results[i] = [rmsnorm.rms_norm(x, w, out=nan_like(x)) for _ in range(10)]
        except Exception as e:  # noqa: BLE001 - the test reports whatever a thread raised
            errors.append(f"thread {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors[:3]
    assert sorted(results) == list(range(8))
    for i, ys in results.items():
        for y in ys:
            assert_same_bits(y, alone[i])


def _special_rows(device, dtype, n=100):
    """Rows with inf, NaN and zeros, of a width that leaves masked lanes in every tile."""
    x = randn((4, n), dtype, device, seed_of("warnings", dtype), scale=3.0)
    x[0, 5] = float("inf")
    x[1, 7] = float("nan")
    x[2] = 0.0
    return x


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_special_values_raise_no_warning(device, dtype):
    x = _special_rows(device, dtype)
    w = weight_for(x.shape[-1], dtype, device, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rmsnorm.rms_norm(x, w)
        rmsnorm.fused_add_rms_norm(x, x.flip(0).clone(), w)
        for quant_dtype in (torch.float8_e4m3fn, torch.int8):
            rmsnorm.rms_norm_quant(x, w, quant_dtype=quant_dtype)
            rmsnorm.rms_norm_quant(x[:, :64].contiguous(), w[:64], quant_dtype=quant_dtype,
                                   group_size=64)
            rmsnorm.rms_norm_quant(x, w, quant_dtype=quant_dtype,
                                   scale=torch.tensor([0.0], device=device))


@pytest.mark.parametrize("eps", [np.float32(1e-6), np.float64(1e-5), np.float16(1e-3)],
                         ids=lambda e: type(e).__name__)
def test_numpy_scalars_as_eps_raise_no_warning(device, eps):
    x = randn((2, 64), torch.float32, device, seed_of("numpy-eps", str(eps)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = rmsnorm.rms_norm(x, None, eps=eps)
    assert_same_bits(y, rmsnorm.rms_norm(x, None, eps=float(eps)))
    assert_close_float64(y, reference.float64_rms_norm(x, None, float(eps)))
