"""What serves rmsnorm's calls in this process: status() for a report (describe() words it for
a person: `python -m rmsnorm`), use_compiled_kernels() to send CUDA tensors through the Python
launcher instead (RMSNORM_KERNELS=triton at import does the same)."""

import os
import textwrap

import torch

from rmsnorm.pytorch import native

# Calls of CUDA tensors that librmsnorm's compiled kernels do not take: the Python launcher
# (Triton, JIT-compiled on first use) computes them, bit for bit as the contract says.
TRITON_CASES = (
    "float64 tensors",
    "mixed dtypes (activations, residual and weight not all of one dtype)",
    "rows that need two strides (views such as x[:, :2] of a 3-D tensor: two of its heads)",
    "tensors with the negative bit (x._neg_view()), tensor subclasses other than DTensor",
    "outputs (out=, residual_out) that partly overlap an input",
    "forwards of rows wider than the widest tile, fewer than half the SMs (a quarter for the "
    "fused add): the launcher's split forward (librmsnorm has none)",
    "n or a row stride of 2^31 elements or more; a backward of 2^31 rows or more",
    "GPUs this build compiled no kernel for (see status()['cuda'])",
    None,  # the quantized forward's: _quantized_case()
    "recipe options in combinations no preset takes (normalized_sum='fp32' without a weight or "
    "in rows not 16-byte aligned; quantizer='vllm_fused' with casting_mode='gemma', or the "
    "unrounded sum with vLLM's standalone quantizers)",
)
KERNELS = ("compiled", "triton")


def _quantized_case():
    """The quantized forward's case, worded from what the AOT build compiles of it
    (rmsnorm.aot.build's QUANT_DTYPES, QUANT_FORMATS and QUANT_ALIGN, which the C++ runtime's
    refusals read too), so that the report follows the build; its kernels all take a weight."""
    from rmsnorm.aot import build as aot
    from rmsnorm.launch import dtypes

    torch_names = {name: attr for attr, name in dtypes.TORCH.items()}
    code_names = {"e4m3": "float8_e4m3fn", "int8": "int8", "e5m2": "float8_e5m2"}
    parts = [f"{torch_names[d]} tensors" for d in aot.DTYPES if d not in aot.QUANT_DTYPES]
    parts.append("without a weight")
    parts += [f"to {code_names[f]}" for f in aot.QFORMATS if f not in aot.QUANT_FORMATS]
    if aot.QUANT_ALIGN >= aot.ALIGN_PTR:
        parts.append("with any pointer not 16-byte aligned" +
                     (" or n or a row stride not a multiple of 16"
                      if aot.QUANT_ALIGN == aot.ALIGN_VEC else ""))
    listed = ", ".join(parts[:-1]) + (", or " if len(parts) > 1 else "") + parts[-1]
    return f"the quantized forward (rms_norm_quant, fused_add_rms_norm_quant) of {listed}"


TRITON_CASES = tuple(case or _quantized_case() for case in TRITON_CASES)


def use_compiled_kernels(enabled=True):
    """Whether CUDA tensors take librmsnorm's compiled kernels where they cover the call (the
    default) or the Python launcher for every call; returns the previous setting."""
    if native.error:
        raise RuntimeError(native.error)
    return torch.ops.rmsnorm.use_compiled_kernels(bool(enabled))


def status():
    """A dict: "ops" (the op library loaded, or why not), "compiled_kernels_built" (whether the
    op library has librmsnorm's CUDA kernels at all), "compiled_kernels_enabled" (whether
    use_compiled_kernels lets CUDA tensors take them, where built), "cuda" (for each visible
    GPU, what serves CUDA tensors), "triton_cases" (the CUDA calls the Python launcher serves
    even so) and "cpu" (what serves CPU tensors)."""
    report = {"ops": native.error or f"loaded: {native.OPS_LIBRARY}"}
    if native.error:
        return report
    enabled = torch.ops.rmsnorm.use_compiled_kernels(None)
    # Two keys, not one: the switch alone read as "compiled kernels: True" in a CPU build.
    report["compiled_kernels_built"] = torch.ops.rmsnorm.compiled_kernels_built()
    report["compiled_kernels_enabled"] = enabled
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


def describe(report):
    """status()'s report as lines for a person (what `python -m rmsnorm` prints)."""
    if "compiled_kernels_built" not in report:
        return _wrap(f"op library: not loaded: {report['ops']}")
    on = report["compiled_kernels_enabled"]
    if not report["compiled_kernels_built"]:
        kernels = "not built"
    else:
        kernels = "built, switched " + ("on" if on else "off")
    lines = [f"op library: {report['ops']}", f"compiled kernels: {kernels}"]
    cuda = report["cuda"]
    if isinstance(cuda, str):
        lines.append(f"CUDA tensors: {cuda}")
    else:
        lines.append("CUDA tensors:")
        lines += [f"  {device}: {what}" for device, what in cuda.items()]
    if report["compiled_kernels_built"] and on:
        # Only then are there exceptions: otherwise the launcher serves every CUDA call.
        lines.append("CUDA calls the Python launcher serves even so:")
        lines += [f"  - {case}" for case in report["triton_cases"]]
    lines.append(f"CPU tensors: {report['cpu']}")
    return "\n".join(_wrap(line) for line in lines)


def _wrap(line, width=100):
    indent = " " * (len(line) - len(line.lstrip(" -")))
    return textwrap.fill(line, width, subsequent_indent=indent + "  ", break_long_words=False,
                         break_on_hyphens=False)


def _from_environment():
    choice = os.environ.get("RMSNORM_KERNELS", "compiled")
    if choice not in KERNELS:
        raise ValueError(f"RMSNORM_KERNELS must be one of {KERNELS}, got {choice!r}")
    if choice == "triton" and not native.error:
        use_compiled_kernels(False)


_from_environment()
