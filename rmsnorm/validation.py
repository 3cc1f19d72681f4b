"""Argument checks of the public functions: each error names the argument at fault."""

import math
import numbers

import torch

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
CASTING_MODES = ("llama", "gemma")


def check_tensor(name, t, *, device=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
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


def check_scalars(eps, offset, casting_mode, weight):
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps) \
            or eps < 0:
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    if isinstance(offset, bool) or not isinstance(offset, numbers.Real) \
            or not math.isfinite(offset):
        raise ValueError(f"offset must be a finite number, got {offset!r}")
    if offset != 0 and weight is None:
        raise ValueError(f"offset={offset!r} is added to the weight, but weight is None; pass "
                         "a weight or offset=0.0")
    if casting_mode not in CASTING_MODES:
        raise ValueError(f"casting_mode must be one of {CASTING_MODES}, got {casting_mode!r}")


def check_float64_not_mixed(**tensors):
    present = {k: t for k, t in tensors.items() if t is not None}
    kinds = {k: t.dtype == torch.float64 for k, t in present.items()}
    if any(kinds.values()) and not all(kinds.values()):
        f64 = [k for k, v in kinds.items() if v]
        other = [f"{k} ({present[k].dtype})" for k, v in kinds.items() if not v]
        raise TypeError(f"float64 is computed in float64 throughout and cannot be mixed: "
                        f"{', '.join(f64)} float64 but {', '.join(other)}")


def check_writable(name, t):
    """An output must be writable by distinct elements: no broadcast (zero) strides and a
    contiguous last dimension."""
    for size, stride in zip(t.shape, t.stride()):
        if size > 1 and stride == 0:
            raise ValueError(f"{name} has a broadcast (stride 0) dimension; outputs need one "
                             "element of memory per element")
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name} must have a contiguous last dimension (stride 1), got "
                         f"stride {t.stride(-1)}")


def _span(t):
    if t.numel() == 0:
        return (0, 0)
    start = t.data_ptr()
    last = sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    return (start, start + (last + 1) * t.element_size())


def same_view(a, b):
    return a.data_ptr() == b.data_ptr() and a.stride() == b.stride() and a.dtype == b.dtype


def overlaps(a, b):
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


def check_no_partial_alias(out_name, out, in_name, t):
    """`out` may be exactly `t` (every element read before it is written, by the same
    thread) or disjoint from it, nothing in between."""
    if overlaps(out, t) and not same_view(out, t):
        raise ValueError(f"{out_name} partially overlaps {in_name}; it may alias it exactly "
                         "or not at all")
