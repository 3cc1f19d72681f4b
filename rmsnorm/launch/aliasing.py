"""Whether two tensors share memory, decided element by element.

The kernels read every input element and write every output element once, row by row. An
output may be an input exactly (each element is read before it is written, by the thread
that writes it) or share no element with it; anything in between races on a GPU. Two views
whose byte ranges interleave without sharing an element (`b[:, :8]` and `b[:, 8:]`) are
disjoint: a tensor is seen as its runs of contiguous bytes (one per row when the last
dimension is contiguous), and two tensors overlap when a run of one intersects a run of the
other. Finding that costs a sort of the runs' starts, so it is done only when the byte ranges
overlap; past MAX_RUNS runs the byte ranges alone decide (such views are refused as
overlapping, and the message says so).
"""

import torch

MAX_RUNS = 1 << 24


def span(t):
    """[first byte, one past the last byte] that t's elements occupy; (0, 0) when empty."""
    count = t.numel()
    if count == 0:
        return (0, 0)
    start = t.data_ptr()
    if t.is_contiguous():  # the common case, on every call's path: no walk over the dims
        return (start, start + count * t.element_size())
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return (start, start + (last + 1) * t.element_size())


def same_view(a, b):
    """a and b are the very same elements in the same order (same start, shape, dtype and
    strides on every dimension that has more than one index)."""
    return (a.data_ptr() == b.data_ptr() and a.dtype == b.dtype and a.shape == b.shape
            and all(sa == sb for n, sa, sb in zip(a.shape, a.stride(), b.stride()) if n > 1))


def overlaps(a, b):
    """True when a and b share at least one byte of an element."""
    (a0, a1), (b0, b1) = span(a), span(b)
    if not (a0 < b1 and b0 < a1):
        return False
    runs_a, runs_b = _runs(a), _runs(b)
    if runs_a is None or runs_b is None:
        return True
    return _intersect(*runs_a, *runs_b)


def overlaps_itself(t):
    """True when two elements of t share memory (t could not be written element by element)."""
    if t.numel() <= 1 or t.is_contiguous():
        return False
    if _strides_nest(t):
        return False
    runs = _runs(t)
    if runs is None:
        return True
    starts, length = runs
    return bool((starts.diff() < length).any())


def too_many_runs(a, b):
    """Whether overlaps(a, b) fell back to the byte ranges alone."""
    return _runs(a) is None or _runs(b) is None


def _strides_nest(t):
    # Sorted by stride, each dimension steps over everything the inner ones cover: the usual
    # case (contiguous tensors, row slices, head views), decided without listing runs.
    dims = sorted((st, n) for n, st in zip(t.shape, t.stride()) if n > 1)
    extent = 1
    for stride, size in dims:
        if stride < extent:
            return False
        extent = stride * (size - 1) + extent
    return True


def _runs(t):
    """(sorted start addresses, run length in bytes) of t's contiguous runs, or None when
    there are more than MAX_RUNS."""
    es = t.element_size()
    shape, strides = list(t.shape), list(t.stride())
    length = es
    if shape and (shape[-1] == 1 or strides[-1] == 1):
        length = shape[-1] * es
        shape, strides = shape[:-1], strides[:-1]
    count = 1
    for size in shape:
        count *= size
    if count > MAX_RUNS:
        return None
    starts = torch.zeros((), dtype=torch.int64)
    for size, stride in zip(shape, strides):
        starts = starts.unsqueeze(-1) + torch.arange(size, dtype=torch.int64) * (stride * es)
    starts = starts.flatten() + t.data_ptr()
    return starts.sort().values, length


def _intersect(a, la, b, lb):
    # For each run of a, the first run of b that ends after it starts; they meet when that
    # run starts before a's ends (any later run of b starts later still).
    first = torch.searchsorted(b, a - lb, right=True)
    found = first < b.numel()
    nearest = b[first.clamp(max=b.numel() - 1)]
    return bool((found & (nearest < a + la)).any())
