"""Argument checks of the public functions: each error names the argument at fault."""

import math
import numbers

import torch

from rmsnorm.launch import aliasing
from rmsnorm.launch.quant_contract import QUANTIZERS

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
CASTING_MODES = ("llama", "gemma")
# The least magnitude that rounds to infinity in fp32: halfway between fp32's largest finite
# value, 2^128 - 2^104, and 2^128 (a tie, which rounds to the even 2^128).
FP32_OVERFLOW = 2.0 ** 128 - 2.0 ** 103


def check_tensor(name, t, *, device=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.is_nested:
        raise TypeError(f"{name} is a nested tensor; rmsnorm takes dense (strided) tensors: "
                        "normalize its components, or its padded or values() tensor")
    if t.layout != torch.strided:
        raise TypeError(f"{name} has layout {t.layout}; rmsnorm takes dense (strided) tensors "
                        "(call .to_dense() first)")
    if t.dtype not in DTYPES:
        raise TypeError(f"{name} has dtype {t.dtype}; supported: float32, float16, bfloat16, "
                        "float64")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device} but x is on {device}; all tensors must be "
                         "on one device")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name} is on {t.device}; rmsnorm runs on CUDA and CPU tensors only")


def check_x(x):
    check_tensor("x", x)
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (the normalized one), got a scalar")
    if x.shape[-1] == 0:
        raise ValueError(f"x has shape {tuple(x.shape)}: the normalized (last) dimension N "
                         "must be >= 1")


def check_weight(weight, n, device):
    if weight is None:
        return
    check_tensor("weight", weight, device=device)
    if tuple(weight.shape) != (n,):
        raise ValueError(f"weight has shape {tuple(weight.shape)}, expected ({n},) to match "
                         "the last dimension of x")


def check_same_shape(name, t, x, device):
    check_tensor(name, t, device=device)
    if t.shape != x.shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(x.shape)} "
                         "(the shape of x)")


def check_scalars(eps, offset, casting_mode, weight, *, values=True):
    """eps and offset are used as fp32 in the kernels: each must be a real number that is
    finite in fp32. values=False (torch.compile tracing, where eps and offset may be
    symbolic) checks their types alone: the op checks their values when it runs."""
    _check_real("eps", eps)
    _check_real("offset", offset)
    _check_casting_mode(casting_mode)
    if values:
        _check_eps_value(eps)
        _check_offset_value(offset, weight)


def check_eps(eps):
    """eps as rms_norm takes it: a real number >= 0, finite in fp32 (rmsnorm.compare, whose
    recipes take eps as fp32 too, refuses what rms_norm refuses)."""
    _check_real("eps", eps)
    _check_eps_value(eps)


def check_offset(offset, weight):
    """offset as rms_norm takes it: a real number finite in fp32, 0 without a weight."""
    _check_real("offset", offset)
    _check_offset_value(offset, weight)


def _check_eps_value(eps):
    if not _finite_in_fp32(eps) or eps < 0:
        raise ValueError(f"eps must be >= 0 and finite in fp32 (the kernels use it as fp32), "
                         f"got {eps!r}")


def _check_offset_value(offset, weight):
    if not _finite_in_fp32(offset):
        raise ValueError(f"offset must be finite in fp32 (the kernels use it as fp32), got "
                         f"{offset!r}")
    if offset != 0 and weight is None:
        raise ValueError(f"offset={offset!r} is added to the weight, but weight is None; "
                         "pass a weight or offset=0.0")


def _check_casting_mode(casting_mode):
    if not isinstance(casting_mode, str):
        raise TypeError(f"casting_mode must be a str, one of {CASTING_MODES}, got "
                        f"{type(casting_mode).__name__}")
    if casting_mode not in CASTING_MODES:
        raise ValueError(f"casting_mode must be one of {CASTING_MODES}, got {casting_mode!r}")


def _check_real(name, v):
    if isinstance(v, (torch.SymFloat, torch.SymInt)):
        return
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a real number (float or int), got "
                        f"{type(v).__name__}" + (" (pass a Python float: .item())"
                                                 if isinstance(v, torch.Tensor) else ""))


def _finite_in_fp32(v):
    # Plain comparisons, which torch.compile traces (struct does not), in Python floats: a
    # numpy scalar would take FP32_OVERFLOW into its own type (np.float32: a cast that
    # overflows, with a RuntimeWarning).
    v = float(v) if not isinstance(v, (int, float)) else v
    return math.isfinite(v) and abs(v) < FP32_OVERFLOW


def check_float64_not_mixed(**tensors):
    present = {k: t for k, t in tensors.items() if t is not None}
    kinds = {k: t.dtype == torch.float64 for k, t in present.items()}
    if any(kinds.values()) and not all(kinds.values()):
        f64 = [k for k, v in kinds.items() if v]
        other = [f"{k} ({present[k].dtype})" for k, v in kinds.items() if not v]
        raise TypeError(f"float64 is computed in float64 throughout and cannot be mixed: "
                        f"{', '.join(f64)} float64 but {', '.join(other)}")


def check_writable(name, t):
    """An output must be writable element by element: no two elements in one place, a
    contiguous last dimension, and no negative bit (a view that negates what is stored)."""
    if t.is_neg():
        raise ValueError(f"{name} is a negative view (is_neg()); rmsnorm writes raw memory: "
                         "pass a tensor without the negative bit")
    for size, stride in zip(t.shape, t.stride()):
        if size > 1 and stride == 0:
            raise ValueError(f"{name} has a broadcast (stride 0) dimension; outputs need one "
                             "element of memory per element")
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name} must have a contiguous last dimension (stride 1), got "
                         f"stride {t.stride(-1)}")
    if aliasing.overlaps_itself(t):
        raise ValueError(f"{name} has elements that share memory (strides "
                         f"{tuple(t.stride())} for shape {tuple(t.shape)}); outputs need one "
                         "element of memory per element")


def check_no_partial_alias(out_name, out, in_name, t):
    """`out` may be exactly `t` (every element read before it is written, by the same
    thread) or share no element with it, nothing in between."""
    if t is not None and not aliasing.same_view(out, t):
        check_disjoint(out_name, out, in_name, t, f"; it may alias {in_name} exactly or not "
                                                  "at all")


def check_disjoint(out_name, out, in_name, t, why=""):
    """`out` shares no element with `t`."""
    if t is not None and aliasing.overlaps(out, t):
        if aliasing.too_many_runs(out, t):
            why += (f" (their memory ranges overlap, and views of more than "
                    f"{aliasing.MAX_RUNS} rows are not compared element by element)")
        raise ValueError(f"{out_name} overlaps {in_name}{why}")


NORMALIZED_SUMS = ("rounded", "fp32")


def check_normalized_sum(normalized_sum, fused):
    """What the fused add normalizes: "rounded", the sum as written (rounded to the
    residual's dtype), or "fp32", the unrounded sum. Without a residual there is no sum."""
    if type(normalized_sum) is not str:
        raise TypeError(f"normalized_sum must be a str, one of {NORMALIZED_SUMS}, got "
                        f"{type(normalized_sum).__name__}")
    if normalized_sum not in NORMALIZED_SUMS:
        raise ValueError(f"normalized_sum must be one of {NORMALIZED_SUMS}, got "
                         f"{normalized_sum!r}")
    if normalized_sum != "rounded" and not fused:
        raise ValueError(f"normalized_sum={normalized_sum!r} is the fused add's; it needs a "
                         "residual tensor")


def check_quantizer(quantizer):
    """Whose formulas the quantized forward follows (quant_contract.QUANTIZERS)."""
    if type(quantizer) is not str:
        raise TypeError(f"quantizer must be a str, one of {QUANTIZERS}, got "
                        f"{type(quantizer).__name__}")
    if quantizer not in QUANTIZERS:
        raise ValueError(f"quantizer must be one of {QUANTIZERS}, got {quantizer!r}")
