"""diagnose: which recipe of the space a candidate's output is, by a search one axis at a time.

The search (`_search`): evaluate the named points, take the closest, then flip one axis at a
time and keep a flip whenever it brings the candidate closer, until no flip does; if the
result is still not bit-identical, try flipping two axes at once from there (a pair whose
effects only show together), and go on one axis at a time from any pair that helps. Closer
means a smaller mean distance in ulps over y (and residual_out), ties broken by more
bit-identical elements. That is at most a few dozen recipes of the 64, each one PyTorch
evaluation; `Report.rows` lists every one evaluated.

An axis is undetermined when flipping it in the best recipe gives the very same bits on these
inputs (the data cannot tell), or output that is exactly as close to the candidate; `best` then
keeps the value it started from (the named point's), and `Report.undetermined` lists it with
the kind of input that would separate it.

Implied rstd of a row: the float64 least-squares slope of y against a = h * (w + offset)
(h the normalized input: x, or the rounded x + residual; w + offset in fp32), computed the same
way from the candidate's y and from the recipe's, so that the bias a rounding rule puts in the
fit (truncation) is in both. A row matches when the two slopes differ by at most 4 * u / sqrt(n)
relative, u the unit roundoff of the coarser of the input and output dtypes and n the row's
nonzero a: a few standard deviations of the fit's rounding noise, so rows whose rstd differs
by a few rounding steps show and rows that differ only elementwise do not.
"""

import dataclasses
import math

import torch
from torch import Tensor

from rmsnorm import reference
from rmsnorm.launch import validation
from rmsnorm.compare import space as rc
from rmsnorm.compare.space import AXES, Recipe

HINTS = {
    "upcast": "bf16/fp16 inputs (in fp32 both are the same computation)",
    "rounding": "bf16/fp16 inputs with a weight, and y in that dtype or the weight in fp32 "
                "(without a weight, or in fp32, x * rstd * w rounds once either way)",
    "weight": "an offset (Gemma's 1 + w) or an fp32 weight with bf16/fp16 inputs (a weight of "
              "the input dtype with offset 0 is the same in both)",
    "residual": "a bf16/fp16 residual, whose sums with x are mostly not representable",
    "eps": "rows whose mean square is near eps (|x| around sqrt(eps); inputs.py's 'tiny' rows)",
    "store": "a bf16/fp16 y or residual_out (fp32 outputs have nothing to truncate)",
}


class CandidateError(RuntimeError):
    """The candidate raised, or returned something that is not an output of these inputs."""


@dataclasses.dataclass
class Row:
    """One recipe evaluated against the candidate."""
    recipe: Recipe
    names: list
    identical: float         # fraction of y's elements bit-identical (NaN = NaN counts)
    max_ulp: float           # over y, in ulps of y's dtype (inf: NaN against a number)
    mean_ulp: float
    rstd_rows: float         # fraction of rows whose implied rstd matches the recipe's
    residual_identical: float | None = None  # the same over residual_out, when there is one
    residual_max_ulp: float | None = None
    residual_mean_ulp: float | None = None

    @property
    def score(self):
        ulps = self.mean_ulp + (self.residual_mean_ulp or 0.0)
        same = self.identical + (1.0 if self.residual_identical is None
                                 else self.residual_identical)
        return (ulps, -same)

    @property
    def exact(self):
        return self.identical == 1.0 and self.residual_identical in (None, 1.0)

    def as_dict(self, residual):
        d = {"recipe": self.recipe.as_dict(residual), "names": self.names,
             "identical": self.identical, "max_ulp": self.max_ulp, "mean_ulp": self.mean_ulp,
             "rstd_rows": self.rstd_rows}
        if residual:
            d.update(residual_identical=self.residual_identical,
                     residual_max_ulp=self.residual_max_ulp,
                     residual_mean_ulp=self.residual_mean_ulp)
        return d


def diagnose(candidate=None, x=None, weight=None, eps=1e-6, *, residual=None, offset=0.0,
             y=None, residual_out=None, worst=10):
    """Which recipe of the space `candidate` computes, on these inputs.

    candidate: a callable (x, weight, eps) -> y, or (x, weight, eps, residual) -> y or
    (y, residual_out) when `residual` is given (called on copies of the inputs); or None with
    the candidate's outputs as `y=` (and `residual_out=`). Returns a Report
    (rmsnorm.compare.report).
    """
    from rmsnorm.compare.report import Report

    problem = _Problem.checked(x, weight, eps, residual, offset)
    if candidate is not None and y is not None:
        raise ValueError("give either candidate (a callable) or y= (its output), not both")
    if candidate is None:
        if y is None:
            raise ValueError("candidate is None: pass a callable, or the candidate's output "
                             "as y= (and residual_out=)")
        outputs = (y, residual_out)
    else:
        if not callable(candidate):
            raise TypeError(f"candidate must be callable (or None with y=), got "
                            f"{type(candidate).__name__}")
        if residual_out is not None:
            raise ValueError("residual_out= is an output: give it with y=, not with a candidate")
        outputs = _call(candidate, problem)
    y, residual_out = problem.check_outputs(*outputs)
    search = _Search(problem, y, residual_out)
    best = search.run()
    return Report(problem=problem, candidate_y=y, candidate_residual_out=residual_out,
                  best_row=search.rows[best], rows=list(search.rows.values()),
                  axes=search.axes(best), evaluated=search.outputs, worst=worst)


@dataclasses.dataclass
class _Problem:
    """The inputs, on the CPU and 2-D, as every recipe sees them."""
    x: Tensor
    weight: Tensor | None
    residual: Tensor | None
    eps: float
    offset: float
    shape: tuple
    device: torch.device

    @classmethod
    def checked(cls, x, weight, eps, residual, offset):
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        _check_dtype("x", x)
        if x.dim() < 1 or x.shape[-1] < 1 or x.numel() == 0:
            raise ValueError(f"x must have at least one row of N >= 1 elements, got shape "
                             f"{tuple(x.shape)}")
        n = x.shape[-1]
        if weight is not None:
            if not isinstance(weight, Tensor):
                raise TypeError(f"weight must be a torch.Tensor or None, got "
                                f"{type(weight).__name__}")
            _check_dtype("weight", weight)
            if tuple(weight.shape) != (n,):
                raise ValueError(f"weight must have shape ({n},) (x's last dimension), got "
                                 f"{tuple(weight.shape)}")
        if residual is not None:
            if not isinstance(residual, Tensor):
                raise TypeError(f"residual must be a torch.Tensor or None, got "
                                f"{type(residual).__name__}")
            _check_dtype("residual", residual)
            if residual.shape != x.shape:
                raise ValueError(f"residual must have x's shape {tuple(x.shape)}, got "
                                 f"{tuple(residual.shape)}")
        # The recipes take eps and offset as fp32, as rms_norm does: the same check refuses
        # what it refuses (1e39 is infinite in fp32, and every recipe would give y = 0).
        validation.check_eps(eps)
        validation.check_offset(offset, weight)

        def flat(t):
            return None if t is None else t.detach().to("cpu").reshape(-1, n)

        return cls(flat(x), None if weight is None else weight.detach().to("cpu"),
                   flat(residual), float(eps), float(offset), tuple(x.shape), x.device)

    @property
    def dtype(self):
        return rc.norm_dtype(self.x, self.residual)

    def inputs_on_device(self):
        """Fresh copies for the candidate, in the caller's shape and device."""
        def copy(t):
            return None if t is None else t.reshape(self.shape if t.dim() == 2 else t.shape) \
                .to(self.device).clone()
        return copy(self.x), copy(self.weight), copy(self.residual)

    def check_outputs(self, y, residual_out):
        check_output("y", y, self.shape)
        y = y.detach().to("cpu").reshape(self.x.shape)
        if residual_out is not None:
            if self.residual is None:
                raise CandidateError("residual_out given, but there is no residual")
            check_output("residual_out", residual_out, self.shape)
            if residual_out.dtype != self.residual.dtype:
                raise CandidateError(f"residual_out is {residual_out.dtype}, not the "
                                     f"residual's {self.residual.dtype}")
            residual_out = residual_out.detach().to("cpu").reshape(self.x.shape)
        return y, residual_out

    def float64(self):
        h = self.x.double() if self.residual is None else self.x.double() + \
            self.residual.double()
        return reference.float64_rms_norm(h, self.weight, self.eps, self.offset)

    def fit_input(self):
        """a = h * (w + offset) in float64 for the implied-rstd fit (see the module doc)."""
        h = self.x if self.residual is None else rc.convert(
            self.x.float() + self.residual.float(), self.residual.dtype)
        a = h.double()
        if self.weight is not None:
            a = a * (self.weight.float() + reference.fp32(self.offset)).double()
        return a


def _check_dtype(name, t):
    if t.dtype not in rc.SUPPORTED_DTYPES:
        raise TypeError(f"{name} must be bfloat16, float16 or float32, got {t.dtype}")


def check_output(name, t, shape):
    """A candidate's output: a tensor of x's shape, of a dtype the recipes round to (any other
    is the candidate's failure, not bad input to diagnose)."""
    if not isinstance(t, Tensor):
        raise CandidateError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != tuple(shape):
        raise CandidateError(f"{name} has shape {tuple(t.shape)}, not x's {tuple(shape)}")
    if t.dtype not in rc.SUPPORTED_DTYPES:
        raise CandidateError(f"{name} is {t.dtype}; a norm's output is bfloat16, float16 or "
                             f"float32, the dtypes the recipes round to")


def call_candidate(candidate, *args):
    """candidate(*args), its exceptions as CandidateError."""
    try:
        with torch.no_grad():  # the forward only; a module's weight need not be a leaf
            return candidate(*args)
    except Exception as e:
        raise CandidateError(f"the candidate raised {type(e).__name__}: {e}") from e


def _call(candidate, problem):
    x, w, r = problem.inputs_on_device()
    out = call_candidate(candidate, x, w, problem.eps, *(() if r is None else (r,)))
    if isinstance(out, (tuple, list)):
        if r is None:
            raise CandidateError(f"the candidate returned {len(out)} values; without a "
                                 "residual a norm returns y alone")
        if len(out) != 2:
            raise CandidateError(f"the candidate returned {len(out)} values; expected y or "
                                 "(y, residual_out)")
        return out[0], out[1]
    return out, None


def bits(t):
    return t.view({2: torch.int16, 4: torch.int32}[t.element_size()])


def same_bits(a, b):
    return bits(a) == bits(b)


def ulp_distance(a, b):
    """|a - b| in ulps of their (common) dtype: the distance of their ordered encodings;
    0 where both are NaN, inf where only one is."""
    def ordered(t):
        v = bits(t).to(torch.int64)
        sign = 1 << (8 * t.element_size() - 1)
        return torch.where(v < 0, -(v & (sign - 1)), v)

    d = (ordered(a) - ordered(b)).abs().double()
    na, nb = torch.isnan(a), torch.isnan(b)
    d = torch.where(na & nb, 0.0, d)
    return torch.where(na ^ nb, math.inf, d)


def _unit_roundoff(dtype):
    return {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11,
            torch.float32: 2.0 ** -24}[dtype]


def implied_rstd(y, a):
    """Per-row float64 least-squares slope of y against a (see the module doc)."""
    yd = y.double()
    return (yd * a).sum(-1) / (a * a).sum(-1)


def rstd_rows_match(fit_y, fit_r, a, in_dtype, out_dtype):
    """Per row: the implied rstd fit_y (the candidate's) is within the module doc's
    tolerance of fit_r (a recipe's), both from implied_rstd over the same a."""
    u = max(_unit_roundoff(in_dtype), _unit_roundoff(out_dtype))
    tol = 4 * u / (a != 0).sum(-1).clamp(min=1).double().sqrt()
    return ((fit_y - fit_r).abs() <= tol * fit_r.abs()) | (torch.isnan(fit_y)
                                                          & torch.isnan(fit_r))


class _Search:
    def __init__(self, problem, y, residual_out):
        self.p = problem
        self.y = y
        self.residual_out = residual_out
        self.rows = {}      # Recipe -> Row, in the order evaluated
        self.outputs = {}   # Recipe -> space.Evaluation
        self._a = problem.fit_input()
        self._fit_y = implied_rstd(y, self._a)
        self._axes = [a for a in AXES if problem.residual is not None or a != "residual"]

    def evaluate(self, r):
        if r not in self.rows:
            p = self.p
            ev = rc.evaluate(r, p.x, p.weight, p.eps, residual=p.residual,
                             offset=p.offset, out_dtype=self.y.dtype)
            self.outputs[r] = ev
            self.rows[r] = self._row(r, ev.y, ev.residual_out)
        return self.rows[r]

    def _row(self, r, yr, sr):
        d = ulp_distance(self.y, yr)
        same = same_bits(self.y, yr) | (torch.isnan(self.y) & torch.isnan(yr))
        rows_ok = rstd_rows_match(self._fit_y, implied_rstd(yr, self._a), self._a,
                                  self.p.dtype, self.y.dtype)
        row = Row(r, rc.names_of(r), same.double().mean().item(), d.max().item(),
                  d.mean().item(), rows_ok.double().mean().item())
        if self.residual_out is not None:
            ds = ulp_distance(self.residual_out, sr)
            same = same_bits(self.residual_out, sr) | (torch.isnan(sr)
                                                       & torch.isnan(self.residual_out))
            row.residual_identical = same.double().mean().item()
            row.residual_max_ulp = ds.max().item()
            row.residual_mean_ulp = ds.mean().item()
        return row

    def run(self):
        starts = []
        for r in rc.recipes().values():
            if self.p.residual is None:
                r = dataclasses.replace(r, residual="rounded")  # the axis does not apply
            if r not in starts:
                starts.append(r)
        best = min(starts, key=lambda r: self.evaluate(r).score)
        best = self._descend(best)
        if not self.rows[best].exact:
            for i, a in enumerate(self._axes):
                for b in self._axes[i + 1:]:
                    r = best.flip(a).flip(b)
                    if self.evaluate(r).score < self.rows[best].score:
                        return self._descend(r)
        return best

    def _descend(self, best):
        improved = True
        while improved:
            improved = False
            for axis in self._axes:
                r = best.flip(axis)
                if self.evaluate(r).score < self.rows[best].score:
                    best, improved = r, True
        return best

    def axes(self, best):
        """{axis: {value, determined, why, ...}} for the best recipe's neighbours."""
        out = {}
        yb, sb = self.outputs[best][:2]
        for axis in self._axes:
            other = best.flip(axis)
            row, orow = self.rows[best], self.evaluate(other)
            yo, so = self.outputs[other][:2]
            indistinct = bool(same_bits(yb, yo).all()) and (
                sb is None or bool(same_bits(sb, so).all()))
            entry = {"value": getattr(best, axis), "alternative": getattr(other, axis),
                     "alternative_identical": orow.identical,
                     "alternative_mean_ulp": orow.mean_ulp}
            if indistinct:
                entry.update(determined=False,
                             why=f"{getattr(best, axis)} and {getattr(other, axis)} give the "
                                 f"same bits on these inputs",
                             separate_with=HINTS[axis])
            elif orow.score == row.score:
                entry.update(determined=False,
                             why=f"the candidate is exactly as close to {axis}="
                                 f"{getattr(other, axis)}",
                             separate_with=HINTS[axis])
            else:
                entry.update(determined=True)
            out[axis] = entry
        return out
