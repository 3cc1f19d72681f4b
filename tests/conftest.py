"""Kernel tests run on CUDA when there is a GPU, else on the CPU under Triton's interpreter."""

import os

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    # Must happen before triton is imported: Triton decides at kernel decoration time.
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

from rmsnorm.launch import ops  # noqa: E402

KERNEL_DEVICES = (["cpu"] if ops.INTERPRETED else []) + \
    (["cuda"] if torch.cuda.is_available() else [])


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", KERNEL_DEVICES or
                             [pytest.param("none", marks=pytest.mark.skip(
                                 reason="no GPU and Triton's interpreter is off"))])


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    """Every output rmsnorm allocates starts as NaN, so an element never written fails."""
    def alloc(shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(ops, "alloc", alloc)
