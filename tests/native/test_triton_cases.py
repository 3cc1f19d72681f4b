"""status()["triton_cases"] is a specification, not prose: each CUDA call it lists reaches the
Python launcher, and the same call without the listed property takes librmsnorm's compiled
kernels, so each example isolates its case."""

import pytest
import torch

import rmsnorm
from rmsnorm.launch import configs, ops, quant
from rmsnorm.pytorch.status import TRITON_CASES

N = 256


def _inputs(rows=8, n=N, dtype=torch.bfloat16):
    x, r = (torch.randn(rows, n, device="cuda").to(dtype) for _ in range(2))
    return x, r, torch.randn(n, device="cuda").to(dtype)


def float64():
    x, _, w = _inputs()
    return (lambda: rmsnorm.rms_norm(x.double(), w.double()),
            lambda: rmsnorm.rms_norm(x, w))


def mixed_dtypes():
    x, _, w = _inputs()
    return lambda: rmsnorm.rms_norm(x, w.float()), lambda: rmsnorm.rms_norm(x, w)


def two_strides():
    # q/k-like heads: two of three heads of N + 64 columns (x[:, ::2] of 4 heads would be one
    # stride: its dims merge).
    base = torch.randn(8, 3, N + 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    return (lambda: rmsnorm.rms_norm(base[:, :2, :N], w),
            lambda: rmsnorm.rms_norm(base[:, 0, :N], w))


def negative_bit():
    x, _, w = _inputs()
    return lambda: rmsnorm.rms_norm(x._neg_view(), w), lambda: rmsnorm.rms_norm(-x, w)


def overlapping_out():
    x, _, w = _inputs(rows=9)
    fresh = torch.empty(8, N, device="cuda", dtype=torch.bfloat16)
    return (lambda: rmsnorm.rms_norm(x[:8], w, out=x[1:]),
            lambda: rmsnorm.rms_norm(x[:8], w, out=fresh))


def few_wide_rows():
    n = 131072  # a looped width for bf16: fewer rows than the split threshold
    below = configs.split_forward_below(
        "fwd", torch.cuda.get_device_properties(0).multi_processor_count)
    x, _, w = _inputs(rows=below - 1, n=n)
    more, _, _ = _inputs(rows=below, n=n)
    return lambda: rmsnorm.rms_norm(x, w), lambda: rmsnorm.rms_norm(more, w)


def huge_row_stride():
    # Two rows 2^31 elements apart: 4 GiB of storage, of which 2 x 64 elements are read.
    storage = torch.empty(2 ** 31 + 64, device="cuda", dtype=torch.bfloat16)
    x = storage.as_strided((2, 64), (2 ** 31, 1))
    x.copy_(torch.randn(2, 64, device="cuda"))
    near = storage.as_strided((2, 64), (2 ** 31 - 64, 1))
    near.copy_(torch.randn(2, 64, device="cuda"))
    return lambda: rmsnorm.rms_norm(x, None), lambda: rmsnorm.rms_norm(near, None)


def quantized_float32():
    x, _, w = _inputs()
    return (lambda: rmsnorm.rms_norm_quant(x.float(), w.float()),
            lambda: rmsnorm.rms_norm_quant(x, w))


def recipe_options():
    x, _, w = _inputs()
    return (lambda: rmsnorm.rms_norm_quant(x, w, quantizer="vllm_fused", casting_mode="gemma"),
            lambda: rmsnorm.rms_norm_quant(x, w, quantizer="vllm_fused"))


# Each case of status.TRITON_CASES, by its first words, with the function that makes its
# example and its control; None where this GPU cannot show it (named in the test's skip).
EXAMPLES = {
    "float64 tensors": float64,
    "mixed dtypes": mixed_dtypes,
    "rows that need two strides": two_strides,
    "tensors with the negative bit": negative_bit,
    "outputs (out=, residual_out) that partly overlap": overlapping_out,
    "forwards of rows wider than the widest tile": few_wide_rows,
    "n or a row stride of 2^31 elements or more": huge_row_stride,
    "GPUs this build compiled no kernel for": None,
    "the quantized forward (rms_norm_quant": quantized_float32,
    "recipe options in combinations no preset takes": recipe_options,
}


def example_of(case):
    keys = [k for k in EXAMPLES if case.startswith(k)]
    assert len(keys) == 1, f"no example (or more than one) for the Triton case {case!r}"
    return EXAMPLES[keys[0]]


def test_every_listed_case_has_one_example():
    for case in TRITON_CASES:
        example_of(case)
    assert len(EXAMPLES) == len(TRITON_CASES)


@pytest.fixture
def launcher_calls(monkeypatch):
    """The calls that reached the Python launcher (its forward, backward and quantized
    forward), by name."""
    calls = []
    for module, name in ((ops, "forward"), (ops, "backward"), (quant, "forward_quant")):
        fn = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _fn=fn, _name=name, **k:
                            calls.append(_name) or _fn(*a, **k))
    return calls


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("case", TRITON_CASES, ids=lambda c: c[:40])
def test_each_listed_case_is_the_python_launchers_and_its_control_is_compiled(
        case, launcher_calls):
    make = example_of(case)
    if not rmsnorm.status()["compiled_kernels_built"]:
        pytest.skip("this op library has no compiled kernels: the launcher serves every call")
    if make is None:
        pytest.skip("shown only on a GPU without compiled kernels: this one has them")
    previous = rmsnorm.use_compiled_kernels(True)
    try:
        example, control = make()
        torch.cuda.synchronize()
        launcher_calls.clear()
        try:
            example()
        except ValueError:
            pass  # the launcher may name the argument at fault instead: it got the call
        assert launcher_calls, "the example took the compiled kernels"
        launcher_calls.clear()
        control()
        assert launcher_calls == [], "the control reached the Python launcher"
    finally:
        rmsnorm.use_compiled_kernels(previous)


def test_the_quantized_case_is_worded_from_what_the_build_compiles(monkeypatch):
    from rmsnorm.aot import build as aot
    from rmsnorm.pytorch import status

    assert status._quantized_case() in TRITON_CASES
    monkeypatch.setattr(aot, "QUANT_DTYPES", ("bf16",))
    monkeypatch.setattr(aot, "QUANT_FORMATS", ("e4m3",))
    monkeypatch.setattr(aot, "QUANT_ALIGN", aot.ALIGN_PTR)
    case = status._quantized_case()
    assert "float32 tensors, float16 tensors, without a weight, to int8, to float8_e5m2" in case
    assert case.endswith("with any pointer not 16-byte aligned")
