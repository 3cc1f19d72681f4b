"""CUDA tensors through the op library's C++ kernels: librmsnorm's compiled kernels serve the
calls they cover, bit-identical to the Python launcher (rmsnorm.launch.ops), and hand the rest
to it, which then computes them or names the argument at fault."""

import os
import subprocess
import sys

import pytest
import torch

import rmsnorm
from rmsnorm.launch import configs, ops
from helpers import assert_same_bits

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


@pytest.fixture(autouse=True)
def compiled_kernels_on():
    """These tests are about the compiled kernels: on also in a run of the suite with
    RMSNORM_KERNELS=triton (which sends every other test's CUDA calls to the launcher)."""
    previous = rmsnorm.use_compiled_kernels(True)
    yield
    rmsnorm.use_compiled_kernels(previous)


@pytest.fixture
def launcher_calls(monkeypatch):
    """The calls that reached the Python launcher, by name (the compiled kernels served the
    rest)."""
    calls = []
    for name in ("forward", "backward"):
        fn = getattr(ops, name)
        monkeypatch.setattr(ops, name, lambda *a, _fn=fn, _name=name, **k:
                            calls.append(_name) or _fn(*a, **k))
    return calls


@pytest.fixture
def launcher_only():
    previous = rmsnorm.use_compiled_kernels(False)
    yield
    rmsnorm.use_compiled_kernels(previous)


def test_status_names_the_compiled_kernels_of_this_gpu():
    report = rmsnorm.status()
    assert report["ops"].startswith("loaded")
    assert report["compiled_kernels_built"] is True
    assert report["compiled_kernels_enabled"] is True
    assert "cubins" in report["cuda"]["cuda:0"] or "PTX" in report["cuda"]["cuda:0"]


def run_all(x, r, w, mode, dy):
    """Every op on one set of inputs: outputs, then gradients through autograd."""
    y = rmsnorm.rms_norm(x, w, 1e-5, casting_mode=mode, offset=0.25)
    y2, s = rmsnorm.fused_add_rms_norm(x, r, w, 1e-5, casting_mode=mode)
    r_inplace = r.clone()
    y3, _ = rmsnorm.fused_add_rms_norm(x, r_inplace, w, 1e-5, casting_mode=mode, inplace=True)
    out = torch.empty_like(x)
    rmsnorm.rms_norm(x, w, 1e-5, casting_mode=mode, out=out)
    xg, rg, wg = (t.detach().clone().requires_grad_() for t in (x, r, w))
    yg, sg = rmsnorm.fused_add_rms_norm(xg, rg, wg, 1e-5, casting_mode=mode)
    torch.autograd.backward((yg, sg), (dy, dy))
    xn, wn = (t.detach().clone().requires_grad_() for t in (x, w))
    rmsnorm.rms_norm(xn, wn, casting_mode=mode).backward(dy)
    return [y, y2, s, y3, r_inplace, out, yg, sg, xg.grad, rg.grad, wg.grad, xn.grad, wn.grad]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["llama", "gemma"])
@pytest.mark.parametrize("shape", [(3, 5, 4096), (1, 100), (257, 40000), (64, 300)])
def test_compiled_kernels_serve_every_op_bit_identical_to_the_python_launcher(
        launcher_calls, dtype, mode, shape):
    # (1, 100): one row, which Triton's JIT would compile as a constant if the kernels let it
    # specialize the row count; they do not, and both paths run the same code.
    x, r, dy = (torch.randn(shape, device="cuda").to(dtype) for _ in range(3))
    w = torch.randn(shape[-1], device="cuda").to(dtype)
    compiled = run_all(x, r, w, mode, dy)
    assert launcher_calls == []
    previous = rmsnorm.use_compiled_kernels(False)
    try:
        launched = run_all(x, r, w, mode, dy)
    finally:
        rmsnorm.use_compiled_kernels(previous)
    assert "forward" in launcher_calls and "backward" in launcher_calls
    for a, b in zip(compiled, launched):
        assert_same_bits(a, b)


def test_strided_rows_take_the_compiled_kernels_and_the_rest_the_python_launcher(
        launcher_calls):
    base = torch.randn(64, 3, 160, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(128, device="cuda", dtype=torch.bfloat16)
    one_stride = base[:, 0, :128]  # rows 480 elements apart
    two_strides = base[:, :2, :128]  # q/k-like heads: two row strides
    mixed = w.float()  # an fp32 weight on bf16 input
    served = []
    for x, weight in ((one_stride, w), (two_strides, w), (one_stride, mixed),
                      (one_stride.double(), mixed.double())):
        launcher_calls.clear()
        y = rmsnorm.rms_norm(x, weight)
        served.append(bool(launcher_calls))
        ref, _, _ = ops.forward(x, weight, 1e-6)
        assert_same_bits(y, ref)
    assert served == [False, True, True, True]


@pytest.mark.parametrize("fused", [False, True])
def test_few_rows_of_looped_width_take_the_launchers_split_forward(launcher_calls, fused):
    # Rows of 131072 bf16 values take the looped kernel; fewer of them than half the SMs (a
    # quarter for the fused add) are faster in the launcher's split forward, which librmsnorm
    # lacks. From the threshold on the compiled kernels serve them. Both give the same bits.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    below = configs.split_forward_below("add" if fused else "fwd", sms)
    served = []
    for rows in (below - 1, below):
        x, r = (torch.randn(rows, 131072, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        w = torch.randn(131072, device="cuda", dtype=torch.bfloat16)
        launcher_calls.clear()
        got = rmsnorm.fused_add_rms_norm(x, r, w) if fused else (rmsnorm.rms_norm(x, w),)
        served.append(launcher_calls == ["forward"])
        want = ops.forward(x, w, residual=r if fused else None)[:2 if fused else 1]
        for g, e in zip(got, want):
            assert_same_bits(g, e)
    assert served == [True, False]


def test_errors_name_the_argument():
    x = torch.randn(4, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="eps"):
        rmsnorm.rms_norm(x, None, -1.0)
    with pytest.raises(ValueError, match="casting_mode"):
        rmsnorm.rms_norm(x, None, casting_mode="llam")
    with pytest.raises(ValueError, match="offset"):
        rmsnorm.rms_norm(x, None, offset=1.0)
    with pytest.raises(ValueError, match="weight has shape"):
        rmsnorm.rms_norm(x, torch.ones(63, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="residual has shape"):
        rmsnorm.fused_add_rms_norm(x, x[:2])


def test_tensor_subclasses_are_traced_not_read():
    # A FakeTensor holds no data at its data_ptr: the fake kernels answer for it.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(4, 64, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(64, device="cuda", dtype=torch.bfloat16)
        y, s = rmsnorm.fused_add_rms_norm(x, x, w)
    assert y.shape == s.shape == (4, 64)


def test_hostile_inputs_get_the_python_launchers_answers():
    x = torch.randn(40, 320, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(320, device="cuda", dtype=torch.bfloat16)
    # Negative views are read with their sign (the C++ kernels leave them to the launcher).
    assert_same_bits(rmsnorm.rms_norm(x._neg_view(), w), rmsnorm.rms_norm(-x, w))
    # Sparse and nested tensors: TypeErrors naming the argument, not torch's internal errors.
    with pytest.raises(TypeError, match="x has layout torch.sparse_coo"):
        rmsnorm.rms_norm(x.float().to_sparse(), None)
    nested = torch.nested.nested_tensor([x[:3], x[3:7]], layout=torch.jagged)
    with pytest.raises(TypeError, match="residual is a nested tensor"):
        rmsnorm.fused_add_rms_norm(x, nested, w)
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


def test_cuda_graphs_replay_the_compiled_kernels():
    x = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16)
    r = torch.randn_like(x)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    expected = rmsnorm.fused_add_rms_norm(x, r, w)
    rmsnorm.fused_add_rms_norm(x, r, w)  # warm-up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y, s = rmsnorm.fused_add_rms_norm(x, r, w)
    y.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert_same_bits(y, expected[0])
    assert_same_bits(s, expected[1])


# A fresh process: its first backward runs on autograd's device thread, which has made no CUDA
# runtime call yet (its memory comes from the allocator's cache) and so has no current context;
# a new Python thread's first call is the same case. Both are served by the compiled kernels,
# bit-identical to the Python launcher.
_FRESH_THREADS = """
import threading, torch, rmsnorm
from rmsnorm.launch import ops
launched = []
for name in ("forward", "backward"):
    fn = getattr(ops, name)
    setattr(ops, name, lambda *a, _fn=fn, _name=name, **k: launched.append(_name) or _fn(*a, **k))

def step(x, w, dy):
    xg, wg = (t.detach().requires_grad_() for t in (x, w))
    y = rmsnorm.rms_norm(xg, wg, 1e-5)
    y.backward(dy)
    return y.detach(), xg.grad, wg.grad

x = torch.randn(8, 512, device="cuda", dtype=torch.bfloat16)
w = torch.randn(512, device="cuda", dtype=torch.bfloat16)
dy = torch.randn_like(x)
compiled = step(x, w, dy)
on_thread = []
thread = threading.Thread(target=lambda: on_thread.append(rmsnorm.fused_add_rms_norm(x, dy, w)))
thread.start()
thread.join()
assert len(on_thread) == 1, "the thread's call raised"
assert not launched, launched
rmsnorm.use_compiled_kernels(False)
expected_add = rmsnorm.fused_add_rms_norm(x, dy, w)
assert launched
for got, expected in zip(compiled + on_thread[0], step(x, w, dy) + expected_add):
    assert torch.equal(got.view(torch.int16), expected.view(torch.int16))
print("ok")
"""


def test_threads_without_a_cuda_context_are_served_by_the_compiled_kernels():
    env = {k: v for k, v in os.environ.items() if k != "RMSNORM_KERNELS"}
    done = subprocess.run([sys.executable, "-c", _FRESH_THREADS], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def run_recipes(x, r, w):
    """The vendor presets (docs/USAGE.md, "Recipes") and the recipe options they set, every
    call form: outputs in order."""
    out = [*rmsnorm.fused_add_rms_norm(x, r, w, recipe="flashinfer"),
           *rmsnorm.fused_add_rms_norm(x, r, w, normalized_sum="fp32", casting_mode="llama")]
    r_inplace = r.clone()
    out += [rmsnorm.fused_add_rms_norm(x, r_inplace, w, recipe="flashinfer", inplace=True)[0],
            r_inplace]
    y = torch.empty_like(x)
    out += [*rmsnorm.fused_add_rms_norm(x, r, w, recipe="flashinfer", out=y), y]
    groups = [None] + ([128] if x.shape[-1] % 128 == 0 else [])
    for quant_dtype in (torch.float8_e4m3fn, torch.int8):
        for group_size in groups:
            kw = dict(quant_dtype=quant_dtype, group_size=group_size, recipe="vllm")
            q = rmsnorm.rms_norm_quant(x, w, **kw, transposed_scales=group_size is not None)
            qa = rmsnorm.fused_add_rms_norm_quant(x, r, w, **kw, return_unquantized=True)
            r_inplace = r.clone()
            qi = rmsnorm.fused_add_rms_norm_quant(x, r_inplace, w, **kw, inplace=True)
            out += [q.out, q.scales, qa.out, qa.scales, qa.residual_out, qa.unquantized, qi.out,
                    qi.scales, r_inplace]
    # A bound under most rows' and groups' max: per token and (vLLM's per-block kernel) per
    # group.
    ub = torch.tensor([2.0], device=x.device)
    for group_size in groups:
        q = rmsnorm.rms_norm_quant(x, w, group_size=group_size, scale_ub=ub, recipe="vllm")
        qa = rmsnorm.fused_add_rms_norm_quant(x, r, w, group_size=group_size, scale_ub=ub,
                                              recipe="vllm")
        out += [q.out, q.scales, qa.out, qa.scales, qa.residual_out]
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(3, 5, 4096), (1, 128), (257, 40000), (64, 384)])
def test_the_vendor_presets_take_the_compiled_kernels_bit_identical_to_the_python_launcher(
        launcher_calls, monkeypatch, dtype, shape):
    from rmsnorm.launch import quant

    fn = quant.forward_quant
    monkeypatch.setattr(quant, "forward_quant",
                        lambda *a, **k: launcher_calls.append("quant") or fn(*a, **k))
    x, r = (torch.randn(shape, device="cuda").to(dtype) for _ in range(2))
    w = torch.randn(shape[-1], device="cuda").to(dtype)
    compiled = run_recipes(x, r, w)
    assert launcher_calls == []
    previous = rmsnorm.use_compiled_kernels(False)
    try:
        launched = run_recipes(x, r, w)
    finally:
        rmsnorm.use_compiled_kernels(previous)
    assert "forward" in launcher_calls and "quant" in launcher_calls
    assert len(compiled) == len(launched)
    for a, b in zip(compiled, launched):
        assert_same_bits(a, b)


def test_recipe_options_no_preset_takes_go_to_the_python_launcher(launcher_calls, monkeypatch):
    """Compiled only where a preset takes them (rmsnorm/aot/build.py, RECIPE_*): the fused
    quantizer with gemma's casting, the unrounded sum without a weight or in rows off 16
    bytes, are the launcher's, with the same bits as it computes them."""
    from rmsnorm.launch import quant

    fn = quant.forward_quant
    monkeypatch.setattr(quant, "forward_quant",
                        lambda *a, **k: launcher_calls.append("quant") or fn(*a, **k))
    x, r = (torch.randn(33, 1000, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    w = torch.randn(1000, device="cuda", dtype=torch.bfloat16)
    calls = [
        lambda: rmsnorm.rms_norm_quant(x, w, quantizer="vllm_fused", casting_mode="gemma"),
        lambda: rmsnorm.fused_add_rms_norm(x, r, None, normalized_sum="fp32"),
        lambda: rmsnorm.fused_add_rms_norm(x[:, 1:], r[:, 1:], w[1:], normalized_sum="fp32"),
    ]
    for call in calls:
        launcher_calls.clear()
        got = call()
        assert launcher_calls, call
        previous = rmsnorm.use_compiled_kernels(False)
        try:
            want = call()
        finally:
            rmsnorm.use_compiled_kernels(previous)
        for a, b in zip(got, want):
            assert (a is None) == (b is None)
            if a is not None:
                assert_same_bits(a, b)
