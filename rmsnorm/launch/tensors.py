"""How the launcher handles the tensors of a call before and after a launch: allocation,
negative views, layouts the kernels cannot read, contiguous stand-ins."""

import torch


def alloc(shape, dtype, device):
    """Every output the launcher allocates comes from here: torch.empty, which PyTorch fills
    with NaN under deterministic mode with fill_uninitialized_memory."""
    return torch.empty(shape, dtype=dtype, device=device)


def resolved(t):
    """t with its negative bit applied: the kernels read raw memory (`x._neg_view()` and
    `z.conj().imag` store -x and z.imag)."""
    return t.resolve_neg() if t is not None and t.is_neg() else t


def readable(t):
    """Inputs are copied when their last dimension is strided (documented behaviour)."""
    return t if t.shape[-1] == 1 or t.stride(-1) == 1 else t.contiguous()


def meta(t):
    """What of a tensor decides its kernel (strides, dtype): the spec caches' key."""
    return None if t is None else (t.stride(), t.dtype)


def aligned(*tensors):
    return all(t is None or t.data_ptr() % 16 == 0 for t in tensors)


def staged(t):
    """A fresh contiguous copy of t (fresh allocations are 16-byte aligned)."""
    return None if t is None else t.clone(memory_format=torch.contiguous_format)

