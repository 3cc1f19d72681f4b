"""The "c" backend: PyTorch's eager inference calls through librmsnorm (the C library and its
C++ extension) give what the Python launcher gives, bit for bit, and fall back to it for what
the library's kernels do not cover."""

import pytest
import torch

import rmsnorm
from helpers import assert_same_bits
from rmsnorm.launch import ops
from rmsnorm.pytorch import backend, clib


def test_the_python_launcher_is_the_default():
    assert backend.active() == "triton"
    assert backend.ext is None


def test_an_unknown_backend_is_refused_by_name():
    with pytest.raises(ValueError, match="backend must be one of"):
        backend.use("cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_the_c_backend_says_why_it_cannot_start_without_a_gpu():
    with pytest.raises(RuntimeError, match="'c' backend needs"):
        backend.use("c")
    assert backend.active() == "triton"


@pytest.fixture
def c_backend():
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    if not clib.available():
        pytest.skip(f"librmsnorm: {clib.why_not()}")
    backend.use("c")
    yield backend.ext
    backend.use("triton")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("mode", ["llama", "gemma"])
@pytest.mark.parametrize("shape", [(3, 5, 4096), (1, 100), (257, 40000)])
def test_c_backend_outputs_equal_the_python_launchers(c_backend, dtype, mode, shape):
    # (1, 100): one row, which Triton's JIT would compile as a constant if the kernels let it
    # specialize the row count; they do not, and both paths run the same code.
    x = torch.randn(shape, device="cuda").to(dtype)
    r = torch.randn(shape, device="cuda").to(dtype)
    w = torch.randn(shape[-1], device="cuda").to(dtype)
    y = rmsnorm.rms_norm(x, w, 1e-5, casting_mode=mode, offset=0.25)
    ref, _, _ = ops.forward(x, w, 1e-5, casting_mode=mode, offset=0.25)
    assert_same_bits(y, ref)
    y, s = rmsnorm.fused_add_rms_norm(x, r, w, 1e-5, casting_mode=mode)
    ref_y, ref_s, _ = ops.forward(x, w, 1e-5, casting_mode=mode, residual=r)
    assert_same_bits(y, ref_y)
    assert_same_bits(s, ref_s)
    r2 = r.clone()
    y, s = rmsnorm.fused_add_rms_norm(x, r2, w, 1e-5, casting_mode=mode, inplace=True)
    assert s is r2
    assert_same_bits(r2, ref_s)
    assert_same_bits(y, ref_y)


def test_c_backend_takes_strided_rows_and_leaves_the_rest_to_the_python_launcher(c_backend):
    base = torch.randn(64, 3, 160, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(128, device="cuda", dtype=torch.bfloat16)
    one_stride = base[:, 0, :128]  # rows 480 elements apart
    assert c_backend.forward(one_stride, w, 1e-6, 0.0, "llama") is not None
    two_strides = base[:, :2, :128]  # q/k-like heads: two row strides, the Python launcher's
    assert c_backend.forward(two_strides, w, 1e-6, 0.0, "llama") is None
    mixed = w.float()  # an fp32 weight on bf16 input: the Python launcher's
    assert c_backend.forward(one_stride, mixed, 1e-6, 0.0, "llama") is None
    for x, weight in ((one_stride, w), (two_strides, w), (one_stride, mixed)):
        y = rmsnorm.rms_norm(x, weight)
        ref, _, _ = ops.forward(x, weight, 1e-6)
        assert_same_bits(y, ref)


def test_c_backend_errors_name_the_argument(c_backend):
    x = torch.randn(4, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="eps"):
        rmsnorm.rms_norm(x, None, -1.0)
    with pytest.raises(ValueError, match="casting_mode"):
        rmsnorm.rms_norm(x, None, casting_mode="llam")
    with pytest.raises(ValueError, match="offset"):
        rmsnorm.rms_norm(x, None, offset=1.0)


def test_tensor_subclasses_are_left_to_the_python_routes(c_backend):
    # A subclass (DTensor, FakeTensor) holds no data of its own at its data_ptr.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(4, 64, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(64, device="cuda", dtype=torch.bfloat16)
    real = torch.randn(4, 64, device="cuda", dtype=torch.bfloat16)
    assert c_backend.forward(x, None, 1e-6, 0.0, "llama") is None
    assert c_backend.forward(real, w, 1e-6, 0.0, "llama") is None
    assert c_backend.fused_add_forward(real, x, None, 1e-6, 0.0, "llama", False) is None


def test_c_backend_gives_hostile_inputs_the_python_routes_answers(c_backend):
    x = torch.randn(40, 320, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(320, device="cuda", dtype=torch.bfloat16)
    # Negative views are read with their sign (the extension leaves them to the launcher).
    assert c_backend.forward(x._neg_view(), w, 1e-6, 0.0, "llama") is None
    assert_same_bits(rmsnorm.rms_norm(x._neg_view(), w), rmsnorm.rms_norm(-x, w))
    # Sparse and nested tensors: TypeErrors naming the argument, not torch's internal errors.
    with pytest.raises(TypeError, match="x has layout torch.sparse_coo"):
        rmsnorm.rms_norm(x.float().to_sparse(), None)
    nested = torch.nested.nested_tensor([x[:3], x[3:7]], layout=torch.jagged)
    with pytest.raises(TypeError, match="residual is a nested tensor"):
        rmsnorm.fused_add_rms_norm(x, nested, w)
    # Scalars the Python routes refuse by type are refused by type here too.
    for eps in (True, torch.tensor(1e-6), "1e-6"):
        with pytest.raises(TypeError, match="eps must be a real number"):
            rmsnorm.rms_norm(x, w, eps)
    with pytest.raises(ValueError, match="eps must be"):
        rmsnorm.rms_norm(x, w, 1e39)  # inf in fp32
    # An in-place residual partially overlapping x is refused; interleaved disjoint views
    # give the contiguous bits.
    b = torch.randn(41, 320, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="overlaps x"):
        rmsnorm.fused_add_rms_norm(b[:40], b[1:], w, inplace=True)
    both = torch.randn(40, 640, device="cuda", dtype=torch.bfloat16)
    ref_y, ref_s, _ = ops.forward(both[:, :320].clone(), w, residual=both[:, 320:].clone())
    y, s = rmsnorm.fused_add_rms_norm(both[:, :320], both[:, 320:], w, inplace=True)
    assert_same_bits(y, ref_y)
    assert_same_bits(both[:, 320:], ref_s)
