"""Inputs that separate the recipes: rows of kinds chosen so that every axis changes the output
of a 16-bit norm (tests/compare/test_compare_inputs.py checks every pair of recipes one axis apart).

Row kinds (`KINDS`), cycled over the rows by `generate(..., kinds="mixed")`:

- normal:    N(0, 1) at a random scale (0.1-10): the squares lose bits in bf16/fp16 (upcast),
             x * rstd * w rounds differently once or twice (rounding), and most results are
             not representable (store).
- outliers:  normal rows with a few elements 20-50x larger: the mean square is dominated by
             them, and their squares round coarsely in the input dtype.
- constant:  every element the same value: x * rstd lands just below 1, where nearest and
             toward-zero conversions differ.
- tiny:      elements of the order of sqrt(eps): the mean square is comparable to eps, so
             rsqrt(mean + eps) and 1 / (sqrt(mean) + eps) differ (eps).
- midpoints: one large element fixes the row's rstd (the others' squares vanish next to its
             square in fp32), and the others are the values of the input dtype whose
             x * rstd lies closest to a rounding midpoint of that dtype: a last-bit change of
             rstd or of the rounding rule flips them.

The weight (when asked for) is drawn in fp32 for 16-bit inputs by default, with bits below the
input dtype's precision: with offset 0 that is the only way "w + offset formed in the input
dtype" can differ from fp32. Pass weight_dtype=x's dtype for kernels that need one dtype (the
weight axis is then undetermined unless offset != 0). The residual has the input dtype and
the same kinds at other scales, so x + residual is mostly not representable (residual).
"""

import torch

KINDS = ("normal", "outliers", "constant", "tiny", "midpoints")


def generate(shape=(40, 64), dtype=torch.bfloat16, *, weight=True, residual=False,
             weight_dtype=None, eps=1e-6, kinds="mixed", seed=0, device="cpu"):
    """(x, weight or None, residual or None) on `device`, drawn on the CPU from `seed`."""
    m, n = check_shape(shape)
    kinds = _kinds(kinds)
    g = torch.Generator().manual_seed(seed)
    x = _rows(m, n, dtype, kinds, eps, g)
    w = r = None
    if residual:
        # The residual stream is larger than the block's output, as in a transformer; rows
        # keep their kind so that tiny rows stay tiny after the add.
        r = _rows(m, n, dtype, kinds, eps, g, scale=1.5)
    if weight:
        wd = weight_dtype or (torch.float32 if dtype in (torch.bfloat16, torch.float16)
                              else dtype)
        w = (torch.randn(n, generator=g) * 0.4 + 1.0).to(wd)
    return tuple(None if t is None else t.to(device) for t in (x, w, r))


def check_shape(shape):
    """(rows, columns) of a generated input (rmsnorm-compare checks --shapes with it)."""
    if isinstance(shape, int):
        shape = (1, shape)
    if len(shape) != 2 or shape[0] < 1 or shape[1] < 2:
        raise ValueError(f"shape must be (rows >= 1, columns >= 2), got {tuple(shape)}")
    return int(shape[0]), int(shape[1])


def _kinds(kinds):
    if kinds == "mixed":
        return KINDS
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise ValueError(f"kinds must be 'mixed' or among {KINDS}, got {bad or kinds}")
    return kinds


def _rows(m, n, dtype, kinds, eps, g, scale=1.0):
    rows = [_row(kinds[i % len(kinds)], n, dtype, eps, g, scale) for i in range(m)]
    return torch.stack(rows)


def _row(kind, n, dtype, eps, g, scale):
    if kind == "normal":
        return (torch.randn(n, generator=g) * scale * 10 ** _uniform(g, -1, 1)).to(dtype)
    if kind == "outliers":
        v = torch.randn(n, generator=g) * scale
        picks = torch.randperm(n, generator=g)[:max(1, n // 32)]
        # At most 50x: fp16 squares stay finite (50^2 * 1.5^2 is far below 65504).
        v[picks] *= _uniform(g, 20, 50)
        return v.to(dtype)
    if kind == "constant":
        return torch.full((n,), _uniform(g, 0.3, 3) * scale * _sign(g)).to(dtype)
    if kind == "tiny":
        return (torch.randn(n, generator=g) * max(eps, 1e-12) ** 0.5 * scale
                * _uniform(g, 0.3, 3)).to(dtype)
    if kind == "midpoints":
        return _midpoint_row(n, dtype, g, scale)
    raise AssertionError(kind)


def _midpoint_row(n, dtype, g, scale):
    if dtype not in (torch.bfloat16, torch.float16):
        return (torch.randn(n, generator=g) * scale).to(dtype)  # no 16-bit rounding to aim at
    big = torch.tensor(64.0 * scale * _uniform(g, 1, 2)).to(dtype).float()
    # The others have x * rstd in [2^-14, 2^-13) (normal even in fp16): all their squares
    # together are then below 2^-26 of big^2, under half an ulp of it in fp32, so rstd is
    # rsqrt(big^2 / n + eps) whatever order sums them.
    rstd = torch.rsqrt(big * big / n + 1e-6)
    mant = 10 if dtype == torch.float16 else 7
    exp = int(torch.floor(torch.log2(2.0 ** -14 / rstd)).item())
    pool = ((1 + torch.arange(2 ** (mant + 1)) / 2 ** mant) * 2.0 ** exp).to(dtype).float()
    p = pool * rstd
    keep = (p >= 2.0 ** -14) & (p < 2.0 ** -13)
    pool, p = pool[keep], p[keep]
    spacing = (2.0 ** torch.floor(torch.log2(p))) / 2 ** mant
    frac = torch.remainder(p / spacing, 1.0)
    closest = pool[torch.argsort((frac - 0.5).abs())[:8]]
    pick = closest[torch.randint(0, len(closest), (n,), generator=g)]
    v = pick * torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    v[0] = big * _sign(g)
    return v.to(dtype)


def _uniform(g, lo, hi):
    return lo + (hi - lo) * torch.rand((), generator=g).item()


def _sign(g):
    return 1.0 if torch.rand((), generator=g).item() < 0.5 else -1.0
