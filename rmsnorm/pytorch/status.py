"""What serves rmsnorm's calls in this process: status() for a report, use_compiled_kernels()
to send CUDA tensors through the Python launcher instead (RMSNORM_KERNELS=triton at import does
the same)."""

import os

import torch

from rmsnorm.pytorch import native

# Calls of CUDA tensors that librmsnorm's compiled kernels do not take: the Python launcher
# (Triton, JIT-compiled on first use) computes them, bit for bit as the contract says.
TRITON_CASES = (
    "float64 tensors",
    "mixed dtypes (activations, residual and weight not all of one dtype)",
    "rows that need two strides (views such as x[:, ::2] of a 3-D tensor)",
    "tensors with the negative bit (x._neg_view()), tensor subclasses other than DTensor",
    "outputs (out=, residual_out) that partly overlap an input",
    "forwards of rows wider than the widest tile, fewer than half the SMs (a quarter for the "
    "fused add): the launcher's split forward (librmsnorm has none)",
    "n or a row stride of 2^31 elements or more; a backward of 2^31 rows or more",
    "GPUs this build compiled no kernel for (see status()['cuda'])",
    "the quantized forward (rms_norm_quant, fused_add_rms_norm_quant) of float32 tensors, "
    "without a weight, to float8_e5m2, or with any pointer not 16-byte aligned or n or a row "
    "stride not a multiple of 16",
)
KERNELS = ("compiled", "triton")


def use_compiled_kernels(enabled=True):
    """Whether CUDA tensors take librmsnorm's compiled kernels where they cover the call (the
    default) or the Python launcher for every call; returns the previous setting."""
    if native.error:
        raise RuntimeError(native.error)
    return torch.ops.rmsnorm.use_compiled_kernels(bool(enabled))


def status():
    """A dict: "ops" (the op library loaded, or why not), "cuda" (for each visible GPU, what
    serves CUDA tensors), "compiled_kernels" (whether they are switched on), "triton_cases"
    (the CUDA calls the Python launcher serves even so) and "cpu" (what serves CPU tensors)."""
    report = {"ops": native.error or f"loaded: {native.OPS_LIBRARY}"}
    if native.error:
        return report
    enabled = torch.ops.rmsnorm.use_compiled_kernels(None)
    report["compiled_kernels"] = enabled
    # "cuda": a str when no CUDA tensor can exist here, else per device.
    cuda = {}
    if torch.version.cuda is None:
        cuda = torch.ops.rmsnorm.compiled_kernels(0)
    elif not torch.cuda.is_available():
        cuda = "no GPU visible"
    else:
        torch.cuda.init()
        for i in range(torch.cuda.device_count()):
            with torch.cuda.device(i):
                torch.empty(1, device=f"cuda:{i}")  # the context librmsnorm asks about
                what = torch.ops.rmsnorm.compiled_kernels(i)
            if not enabled:
                what = f"the Python launcher (compiled kernels switched off; {what})"
            cuda[f"cuda:{i}"] = what
    report["cuda"] = cuda
    report["triton_cases"] = TRITON_CASES
    from rmsnorm.launch import ops
    report["cpu"] = ("Triton's interpreter (TRITON_INTERPRET=1)" if ops.INTERPRETED else
                     "the contract's PyTorch recipe (no GPU kernels on the CPU)")
    return report


def _from_environment():
    choice = os.environ.get("RMSNORM_KERNELS", "compiled")
    if choice not in KERNELS:
        raise ValueError(f"RMSNORM_KERNELS must be one of {KERNELS}, got {choice!r}")
    if choice == "triton" and not native.error:
        use_compiled_kernels(False)


_from_environment()
