"""How the kernels address rows: at most two levels of row strides over the leading dims.

A tensor [..., N] with a contiguous last dimension is a set of M rows. The kernels find row r
at `(r // H) * s_outer + (r % H) * s_inner` (two levels) or `r * s_outer` (one level). This
covers contiguous tensors, 2-D slices with a row stride, and 3-D views such as the q or k heads
of a fused QKV projection ([tokens, heads, head_dim] with a token stride != heads * head_dim),
all without a copy. Every tensor of one launch shares M and H; each has its own strides.
"""

import dataclasses
import math
from typing import Dict, Optional, Sequence, Tuple


@dataclasses.dataclass(frozen=True)
class RowPlan:
    rows: int  # M
    inner: int  # H: rows per outer group (== rows when one level is enough)
    two_level: bool
    strides: Dict[str, Tuple[int, int]]  # name -> (s_outer, s_inner)


def plan_rows(shape: Sequence[int], strides: Dict[str, Sequence[int]]) -> Optional[RowPlan]:
    """Row plan for tensors of one leading `shape` with the given leading strides, or None
    when they need more than two levels."""
    names = list(strides)
    merged = []  # [size, {name: stride}] from outermost to innermost
    for d, size in enumerate(shape):
        if size == 1:
            continue  # the stride of a size-1 dimension is never used
        here = {n: strides[n][d] for n in names}
        if merged and all(merged[-1][1][n] == here[n] * size for n in names):
            merged[-1] = [merged[-1][0] * size, here]
        else:
            merged.append([size, here])
    rows = math.prod(shape)
    if len(merged) <= 1:
        inner = merged[0][1] if merged else {n: 0 for n in names}
        return RowPlan(rows, max(rows, 1), False, {n: (inner[n], 0) for n in names})
    if len(merged) == 2:
        (_, outer), (h, inner) = merged
        return RowPlan(rows, h, True, {n: (outer[n], inner[n]) for n in names})
    return None
