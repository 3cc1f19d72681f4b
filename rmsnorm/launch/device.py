"""What the launcher asks of the device a call runs on: whether kernels are interpreted, the
arch and SM count that pick a launch, and the current CUDA device for the launch."""

import contextlib
import functools

import torch

from rmsnorm.kernels.forward import fwd_tile_kernel
from rmsnorm.launch import configs

try:
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # pragma: no cover - every supported triton has it
    InterpretedFunction = ()

# Triton decides at decoration time whether a kernel runs compiled or under its interpreter
# (TRITON_INTERPRET=1 set before triton is imported); ask a kernel itself.
INTERPRETED = isinstance(fwd_tile_kernel, InterpretedFunction)

# The interpreter runs programs one after another: two programs keep both the multi-program
# and the persistent-loop code exercised on small test shapes.
INTERPRETER_PROGRAMS = 2


def grid(launch, rows, device):
    if INTERPRETED:
        return min(launch.grid(rows, 1), INTERPRETER_PROGRAMS)
    return launch.grid(rows, sm_count(device))


def programs(launch, device):
    """The programs a grid-wide (split) launch runs: per SM, or the interpreter's two."""
    return INTERPRETER_PROGRAMS if INTERPRETED else sm_count(device) * launch.programs_per_sm


def pdl(device):
    """Whether the kernels wait on the prior grid (rmsnorm.kernels.prior_grid): as the AOT
    build compiles them for the device's arch, so both paths run the same code."""
    return device.type == "cuda" and not INTERPRETED and \
        configs.waits_on_prior_grid(arch(device))


def on_device(device):
    # Triton launches on the current CUDA device; make it the tensors' one.
    if device.type == "cuda" and device.index != torch.cuda.current_device():
        return torch.cuda.device(device)
    return contextlib.nullcontext()


def arch(device):
    """The device's compute capability as major * 10 + minor (the launch table's arch key)."""
    if device.type != "cuda":
        return configs.DEFAULT_ARCH
    return _arch_of(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _arch_of(index):
    major, minor = torch.cuda.get_device_capability(index)
    return major * 10 + minor


@functools.lru_cache(maxsize=None)
def _sm_count_of(index):
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device):
    return _sm_count_of(device.index if device.index is not None else
                        torch.cuda.current_device())
