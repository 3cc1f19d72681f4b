"""Every public call is a call of an rmsnorm op registered from C++: eager, autograd, in place,
out=, on every device; the op library loads from the package itself, and status() says what
serves what."""

import os
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import rmsnorm
from rmsnorm.pytorch import native
from helpers import ROOT, randn, seed_of, weight_for


class OpsCalled(TorchDispatchMode):
    """The rmsnorm ops dispatched while it is on, by name."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "rmsnorm":
            self.names.append(func.__name__.split(".")[0])
        return func(*args, **(kwargs or {}))


def test_the_op_library_is_the_packages_own():
    assert native.error is None
    assert native.OPS_LIBRARY.parent == native.NATIVE
    assert native.NATIVE.parent.name == "rmsnorm" and native.NATIVE.name == "_native"
    assert rmsnorm.status()["ops"] == f"loaded: {native.OPS_LIBRARY}"


def test_each_public_call_is_one_op_call(device):
    seed = seed_of("one-route")
    x = randn((4, 64), torch.bfloat16, device, seed)
    r = randn((4, 64), torch.bfloat16, device, seed + 1)
    w = weight_for(64, torch.bfloat16, device, seed)
    calls = {
        "fwd": lambda: rmsnorm.rms_norm(x, w),
        "add_fwd": lambda: rmsnorm.fused_add_rms_norm(x, r, w),
        "add_fwd_inplace": lambda: rmsnorm.fused_add_rms_norm(x, r.clone(), w, inplace=True),
        "fwd_into": lambda: rmsnorm.rms_norm(x, w, out=torch.empty_like(x)),
        "quant_fwd": lambda: rmsnorm.rms_norm_quant(x, w, group_size=64),
        "quant_add_fwd_inplace": lambda: rmsnorm.fused_add_rms_norm_quant(x, r.clone(), w,
                                                                          inplace=True),
    }
    for op, call in calls.items():
        with OpsCalled() as seen:
            call()
        assert seen.names == [op]


KERNEL_OPS = ["fwd", "add_fwd", "add_fwd_inplace", "fwd_into", "bwd", "quant_fwd",
              "quant_add_fwd_inplace"]


def test_the_op_table_defines_each_kernel_op_and_its_triton_twin_and_the_python_side_has_them():
    from rmsnorm.pytorch import triton_ops

    names = {n.split("::")[1] for n in torch._C._dispatch_get_all_op_names()
             if n.startswith("rmsnorm::")}
    switches = {"use_compiled_kernels", "compiled_kernels", "compiled_kernels_built"}
    assert names - switches == set(KERNEL_OPS) | {"triton_" + op for op in KERNEL_OPS}
    assert sorted(triton_ops.KERNELS) == sorted(KERNEL_OPS)


@pytest.mark.parametrize("op", KERNEL_OPS)
def test_a_cpu_call_goes_from_the_dispatcher_straight_to_the_python_launcher(op):
    # The ops' CPU kernels are the launcher's functions, registered from Python, not C++
    # kernels calling back into Python (the dispatcher's own record of who registered each).
    table = torch._C._dispatch_dump(f"rmsnorm::{op}")
    cpu = [line for line in table.splitlines() if line.startswith("CPU:")]
    assert len(cpu) == 1 and "rmsnorm/pytorch/triton_ops.py" in cpu[0].replace("\\", "/"), table
    autograd = [line for line in table.splitlines() if line.startswith("Autograd")]
    assert autograd and "autograd.cpp" in autograd[0], table


def test_autograd_runs_the_backward_op(device):
    x = randn((4, 64), torch.float32, device, seed_of("one-route-bwd")).requires_grad_()
    w = weight_for(64, torch.float32, device, 1).requires_grad_()
    y = rmsnorm.rms_norm(x, w)
    with OpsCalled() as seen:
        y.sum().backward()
    assert seen.names == ["bwd"]
    assert x.grad is not None and w.grad is not None


def test_out_under_autograd_is_refused_by_the_op():
    x = torch.randn(4, 8, requires_grad=True)
    with pytest.raises(RuntimeError, match="out= is not differentiable"):
        torch.ops.rmsnorm.fwd_into(x, None, None, torch.empty(4, 8), None, 1e-6, 0.0, "llama",
                                   "rounded")


def test_the_python_launcher_can_serve_every_cuda_call_and_says_so():
    previous = rmsnorm.use_compiled_kernels(False)
    try:
        assert rmsnorm.status()["compiled_kernels_enabled"] is False
        assert rmsnorm.use_compiled_kernels(previous) is False
    finally:
        rmsnorm.use_compiled_kernels(previous)
    assert rmsnorm.status()["compiled_kernels_enabled"] is previous


@pytest.mark.skipif(torch.version.cuda is not None, reason="a CPU build of torch")
def test_a_cpu_torch_build_reports_no_cuda_kernels():
    assert "CPU build" in rmsnorm.status()["cuda"]


def _python(code, **env):
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full, cwd=str(ROOT))


def test_rmsnorm_kernels_in_the_environment_chooses_the_launcher_or_is_refused_by_name():
    got = _python("import rmsnorm; print(rmsnorm.status()['compiled_kernels_enabled'])",
                  RMSNORM_KERNELS="triton")
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "False"
    got = _python("import rmsnorm", RMSNORM_KERNELS="cuda")
    assert got.returncode != 0 and "RMSNORM_KERNELS must be one of" in got.stderr


def test_without_the_op_library_calls_say_how_to_build_it(monkeypatch):
    monkeypatch.setattr(native, "error", "rmsnorm's torch ops are not built: ...")
    with pytest.raises(RuntimeError, match="rmsnorm.fwd: rmsnorm's torch ops are not built"):
        native.NotLoaded("fwd")(torch.ones(2))
    assert rmsnorm.status() == {"ops": native.error}
