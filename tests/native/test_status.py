"""rmsnorm.status() says what is built and what is switched on, apart: a build without CUDA
kernels never reads as having them; `python -m rmsnorm` prints it for a person."""

import os
import re
import subprocess
import sys

import pytest
import torch

import rmsnorm
from rmsnorm.pytorch import native, status

from helpers import ROOT


@pytest.mark.skipif(torch.version.cuda is not None, reason="a CPU build of torch")
def test_a_build_without_cuda_kernels_says_they_are_not_built_whatever_the_switch():
    previous = rmsnorm.use_compiled_kernels(True)
    try:
        report = rmsnorm.status()
        assert report["compiled_kernels_built"] is False
        assert report["compiled_kernels_enabled"] is True
        assert "compiled_kernels" not in report  # the one key that read as both
    finally:
        rmsnorm.use_compiled_kernels(previous)


def test_switching_the_compiled_kernels_off_changes_what_is_enabled_not_what_is_built():
    built = rmsnorm.status()["compiled_kernels_built"]
    previous = rmsnorm.use_compiled_kernels(False)
    try:
        report = rmsnorm.status()
        assert report["compiled_kernels_enabled"] is False
        assert report["compiled_kernels_built"] is built
    finally:
        rmsnorm.use_compiled_kernels(previous)
    assert rmsnorm.status()["compiled_kernels_enabled"] is previous


def test_the_printed_report_says_what_is_built_and_what_is_switched_on():
    cpu_build = {"ops": "loaded: /x/librmsnorm_torch.so", "compiled_kernels_built": False,
                 "compiled_kernels_enabled": True, "cuda": "none: a CPU build",
                 "triton_cases": ("float64 tensors",), "cpu": "the contract's PyTorch recipe"}
    text = status.describe(cpu_build)
    assert "compiled kernels: not built" in text and "True" not in text, text
    assert "op library: loaded: /x/librmsnorm_torch.so" in text
    assert "CUDA tensors: none: a CPU build" in text
    assert "float64" not in text  # no exceptions to list: the launcher serves every CUDA call
    switched_off = dict(cpu_build, compiled_kernels_built=True, compiled_kernels_enabled=False,
                        cuda={"cuda:0": "the Python launcher (...)"})
    text = status.describe(switched_off)
    assert "compiled kernels: built, switched off" in text and "cuda:0: the Python launcher" in text
    assert "float64" not in text
    text = status.describe(dict(switched_off, compiled_kernels_enabled=True))
    assert "built, switched on" in text and "  - float64 tensors" in text


def test_the_printed_report_fits_100_columns():
    long_case = "the quantized forward " * 10
    text = status.describe({"ops": "loaded: x", "compiled_kernels_built": True,
                            "compiled_kernels_enabled": True, "cuda": {"cuda:0": "sm_90"},
                            "triton_cases": (long_case,), "cpu": "recipe"})
    assert max(len(line) for line in text.splitlines()) <= 100, text
    assert "\n  - the quantized forward" in text
    assert re.search(r"\n {6}\S", text), text  # continued under the case's text, not its dash


def test_without_the_op_library_the_printed_report_is_why(monkeypatch):
    monkeypatch.setattr(native, "error", "rmsnorm's torch ops are not built: ...")
    assert status.describe(rmsnorm.status()) == \
        "op library: not loaded: rmsnorm's torch ops are not built: ..."


def test_python_dash_m_rmsnorm_prints_the_report():
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-m", "rmsnorm"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"rmsnorm {rmsnorm.__version__}"), done.stdout
    assert "op library: loaded: " in done.stdout and "compiled kernels: " in done.stdout
