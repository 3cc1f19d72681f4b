"""Kernel tests run on CUDA when there is a GPU, else on the CPU under Triton's interpreter."""

import contextlib
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
def one_big_gpu_allocation_at_a_time(request):
    """Tests marked big_gpu_memory (tens of GiB) hold one lock file across pytest-xdist's
    processes, and hand their memory back to the driver when done: on an 80 GB card, three of
    them at once, or the cache one left reserved, starve the others (CUDA out of memory)."""
    if request.node.get_closest_marker("big_gpu_memory") is None or \
            not torch.cuda.is_available():
        yield
        return
    import fcntl
    import tempfile

    with open(os.path.join(tempfile.gettempdir(), "rmsnorm-big-gpu-memory.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            import gc

            gc.collect()
            torch.cuda.empty_cache()
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def poisoned_outputs():
    """Every output rmsnorm allocates starts as NaN, so an element never written fails: torch's
    own fill of uninitialized memory (torch.empty, and the C++ ops' allocations, under
    deterministic mode)."""
    with nan_filled_allocations():
        yield


@contextlib.contextmanager
def nan_filled_allocations():
    was = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill
