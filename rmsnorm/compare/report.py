"""The Report diagnose returns: the table, the summary in sentences, JSON and a PNG.

matplotlib is imported by plot() only, so the rest works without it.
"""

import json
import math

import torch

from rmsnorm.compare import space as rc
from rmsnorm.compare.diagnose import implied_rstd, rstd_rows_match, same_bits, ulp_distance

# Of an ulp: an fp32 value this close to a midpoint is "on" it. A few fp32 ulps of rstd (another
# order of the sum, an approximate rsqrt) move x * rstd by 2^-16 (bf16) to 2^-10 (fp16) of an
# ulp; by chance about 1 element in 128 lies this close.
MIDPOINT_WINDOW = 2.0 ** -8
DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}

# What a recipe does, per axis value, as the summary says it ("the candidate ...").
DOES = {
    ("upcast", "fp32"): "squares each element in fp32",
    ("upcast", "none"): "squares and averages in {dtype}, so the mean square and rstd are "
                        "rounded to {dtype}",
    ("rounding", "llama"): "rounds x * rstd to {dtype} before multiplying by the weight",
    ("rounding", "gemma"): "multiplies x * rstd by the weight in fp32 and rounds once",
    ("weight", "fp32"): "forms w + offset in fp32",
    ("weight", "input"): "forms w + offset in {dtype} (rounded) before using it",
    ("residual", "rounded"): "normalizes the sum x + residual rounded to {dtype}, the value "
                             "it writes out",
    ("residual", "fp32"): "normalizes the unrounded fp32 sum x + residual, not the rounded "
                          "sum it writes out as residual_out",
    ("eps", "inside"): "adds eps under the root: rsqrt(mean + eps)",
    ("eps", "outside"): "adds eps outside the root: 1 / (sqrt(mean) + eps)",
    ("store", "rne"): "rounds to nearest even when converting to 16 bits",
    ("store", "truncate"): "truncates (rounds toward zero) when converting to 16 bits",
}


class Report:
    """What diagnose found. Attributes:

    best: {axis: value} of the closest recipe; best_recipe the Recipe; names its names
    (space.NAMED), empty for an unnamed point. exact: the candidate is bit-identical to it
    (y, and residual_out when there is one). undetermined: the axes these inputs cannot
    separate (or that fit the candidate equally well); axes: per axis, the value, whether it
    is determined, the flipped value's fit and, when undetermined, why and which inputs would
    separate it. rows: a diagnose.Row per recipe evaluated, closest first. worst: the worst
    elements against the best recipe.
    """

    def __init__(self, *, problem, candidate_y, candidate_residual_out, best_row, rows, axes,
                 evaluated, worst=10):
        self.problem = problem
        self.y = candidate_y
        self.residual_out = candidate_residual_out
        self.best_row = best_row
        self.best_recipe = best_row.recipe
        self.has_residual = problem.residual is not None
        self.best = self.best_recipe.as_dict(self.has_residual)
        self.names = list(best_row.names)
        self.exact = best_row.exact
        self.axes = axes
        self.undetermined = [a for a, e in axes.items() if not e["determined"]]
        self.rows = sorted(rows, key=lambda r: r.score)
        self._evaluated = evaluated
        self.worst = self._worst(worst)

    # -- facts --------------------------------------------------------------------------

    @property
    def dtype(self):
        return self.problem.dtype

    def _best_eval(self):
        return self._evaluated[self.best_recipe]

    def differing(self):
        """Bool mask (rows x N) of the elements of y that differ from the best recipe."""
        yr = self._best_eval().y
        return ~(same_bits(self.y, yr) | (torch.isnan(self.y) & torch.isnan(yr)))

    def _worst(self, k):
        ev = self._best_eval()
        d = ulp_distance(self.y, ev.y).flatten()
        k = min(k, int((d > 0).sum()))
        if k == 0:
            return []
        truth = self.problem.float64()
        n = self.y.shape[-1]
        out = []
        for i in torch.topk(d, k).indices.tolist():
            row, col = divmod(i, n)
            e = {"row": row, "column": col, "ulps": d[i].item(),
                 "x": self.problem.x[row, col].item(),
                 "candidate": self.y[row, col].item(), "recipe": ev.y[row, col].item(),
                 "float64": truth[row, col].item()}
            if self.problem.residual is not None:
                e["residual"] = self.problem.residual[row, col].item()
            if self.problem.weight is not None:
                e["weight"] = self.problem.weight[col].item()
            out.append(e)
        return out

    def _midpoint_share(self, mask):
        """Of the elements in mask, the share whose first rounding in the best recipe lies
        on a midpoint; and the same share over all elements (what chance gives)."""
        ev = self._best_eval()
        dist = rc.midpoint_distance(ev.first_rounding, ev.first_dtype)
        if dist is None or not mask.any():
            return None, None
        on = dist <= MIDPOINT_WINDOW
        return on[mask].double().mean().item(), on.double().mean().item()

    def _rstd_rows_ok(self):
        """Per row: the candidate's implied rstd matches the best recipe's."""
        a = self.problem.fit_input()
        return rstd_rows_match(implied_rstd(self.y, a), implied_rstd(self._best_eval().y, a),
                               a, self.dtype, self.y.dtype)

    # -- words --------------------------------------------------------------------------

    def label(self, r=None):
        """The best (or r's) recipe in words: its name, or the nearest named point with
        the axes that differ."""
        r = r or self.best_recipe
        names = rc.names_of(r)
        if names:
            also = [rc.NAMED[n].label for n in names[1:]]
            return rc.NAMED[names[0]].label + (f" (= {', '.join(also)})" if also else "")
        base, diff = self._nearest_named(r)
        return f"{rc.NAMED[base].label} with " + ", ".join(f"{a}={getattr(r, a)}" for a in diff)

    def _nearest_named(self, r):
        considered = [a for a in self.best if a not in self.undetermined]
        best = None
        for name, n in rc.NAMED.items():
            diff = [a for a in considered if getattr(n.recipe, a) != getattr(r, a)]
            if best is None or len(diff) < len(best[1]):
                best = (name, diff)
        return best

    def summary(self):
        """A few plain sentences: what the candidate is, where it departs, what is unknown."""
        s = []
        row, dt = self.best_row, DTYPE_NAMES[self.dtype]
        n = self.y.numel()
        label = self.label()
        does = self._what_it_does()
        outputs = "y" + (" and residual_out" if self.residual_out is not None else "")
        if self.exact:
            s.append(f"Bit-identical to {label} on all {n} elements of {outputs}.")
        elif row.identical < 0.5:
            s.append(f"No recipe of the space is close: the closest, {label}, matches "
                     f"{_pct(row.identical)} of the elements (up to {_ulps(row.max_ulp)} "
                     f"off); the candidate computes something else (another formula, or a "
                     f"bug beyond rounding).")
        else:
            diff = self.differing()
            k = int(diff.sum())
            rows_hit = int(diff.any(-1).sum())
            what = "one ulp off" if row.max_ulp == 1 else \
                f"up to {_ulps(row.max_ulp)} off (mean {row.mean_ulp:.3g} ulp)"
            if k:
                s.append(f"Bit-identical to {label} except {_pct(k / n)} of elements ({k} of "
                         f"{n}, in {rows_hit} of {diff.shape[0]} rows) {what}.")
            else:
                s.append(f"y is bit-identical to {label}.")
            if row.residual_identical is not None and row.residual_identical < 1:
                s.append(f"residual_out differs in {_pct(1 - row.residual_identical)} of "
                         f"elements (up to {_ulps(row.residual_max_ulp)}).")
            if k:
                s.extend(self._where(diff, dt))
        if does:
            s.append("The candidate " + _join(does) + ".")
        for axis in self.undetermined:
            e = self.axes[axis]
            s.append(f"{axis} is undetermined ({e['why']}); to separate it use "
                     f"{e['separate_with']}.")
        return " ".join(s)

    def _what_it_does(self):
        """The determined axes where the candidate departs from the nearest named point (or
        from HF Llama when it is a named point other than HF Llama's)."""
        if self.names:
            base = rc.Recipe()
            diff = [a for a in self.best if a not in self.undetermined
                    and getattr(base, a) != getattr(self.best_recipe, a)]
            if not diff or self.names[0] == "hf_llama":
                return []
        else:
            diff = self._nearest_named(self.best_recipe)[1]
        dt = DTYPE_NAMES[self.dtype]
        return [DOES[(a, getattr(self.best_recipe, a))].format(dtype=dt) for a in diff]

    def _where(self, diff, dt):
        ok = self._rstd_rows_ok()
        in_bad_rows = diff[~ok].sum().item() / diff.sum().item()
        if in_bad_rows > 0.5:
            return [f"{_pct(in_bad_rows)} of them are in the {int((~ok).sum())} rows whose "
                    f"implied rstd differs from the recipe's: the reduction differs (the sum "
                    f"of squares, its order, or eps)."]
        share, chance = self._midpoint_share(diff)
        if share is not None and share >= 0.9 and chance < 0.5:
            ev = self._best_eval()
            stage = "x * rstd" if self.best_recipe.rounding == "llama" else "x * rstd * w"
            return [f"{'All' if share == 1 else _pct(share)} of them are where {stage} lands "
                    f"on a {DTYPE_NAMES[ev.first_dtype]} rounding midpoint (within 1/256 ulp; "
                    f"{_pct(chance)} of all elements are): a last-bit difference in rstd (the "
                    f"order of the sum) or in the tie rule rounds them the other way."]
        return [f"The implied rstd matches the recipe's in {int(ok.sum())} of {len(ok)} "
                f"rows and the differing elements are not on rounding midpoints: no rounding "
                f"rule of the space explains them (noise, a race, or an approximate "
                f"operation)."]

    def table(self):
        """The rows as a text table, closest first."""
        res = self.has_residual
        # y's dtype, which may be finer than the inputs' (fp32 from bf16 x and an fp32 weight)
        unit = f"ulp of {self.ulp_dtype} y"
        head = ["recipe", "bit-identical", f"max {unit}", f"mean {unit}", "rstd rows"]
        if res:
            head += ["residual_out identical"]
        lines = [head]
        for r in self.rows:
            cells = [self.short(r.recipe), _pct(r.identical),
                     _ulps(r.max_ulp, unit=False), f"{r.mean_ulp:.3g}", _pct(r.rstd_rows)]
            if res:
                cells.append(_pct(r.residual_identical))
            lines.append(cells)
        widths = [max(len(str(c[i])) for c in lines) for i in range(len(head))]
        text = [" | ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
                for cells in lines]
        text.insert(1, "-+-".join("-" * w for w in widths))
        ax = ["axis     | best     | determined"]
        for a, e in self.axes.items():
            ax.append(f"{a:<8} | {e['value']:<8} | {'yes' if e['determined'] else 'no'}")
        return "\n".join(text) + "\n\n" + "\n".join(ax)

    @property
    def ulp_dtype(self):
        """The dtype whose ulps the distances count ("fp32"): y's, not the inputs'."""
        return DTYPE_NAMES[self.y.dtype]

    def __str__(self):
        return self.table() + "\n\n" + self.summary()

    def as_dict(self):
        return {"dtype": str(self.dtype), "y_dtype": str(self.y.dtype),
                "shape": list(self.problem.shape), "eps": self.problem.eps,
                "offset": self.problem.offset, "weight": self.problem.weight is not None,
                "residual": self.has_residual, "best": self.best, "names": self.names,
                "exact": self.exact, "undetermined": self.undetermined, "axes": self.axes,
                "rows": [r.as_dict(self.has_residual) for r in self.rows],
                "worst": self.worst, "summary": self.summary()}

    def to_json(self, path=None, **kw):
        """The report as JSON text (inf and NaN as strings); written to `path` if given."""
        text = json.dumps(_finite(self.as_dict()), indent=kw.pop("indent", 2), **kw)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        return text

    def _distinct_rows(self, top):
        """The `top` closest rows whose recipes give different outputs (a recipe one
        undetermined axis away gives the same bits and would hide under the first)."""
        chosen = []
        for r in self.rows:
            ev = self._evaluated[r.recipe]
            if any(bool(same_bits(ev.y, self._evaluated[c.recipe].y).all()) for c in chosen):
                continue
            chosen.append(r)
            if len(chosen) == top:
                break
        return chosen

    def plot(self, path, top=3):
        """PNG: histograms of the ulp distance of the `top` closest recipes (with different
        outputs), and where the elements differing from the closest fall (row x column); when
        the candidate is exact, where the runner-up differs (what told them apart)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
        shown = self._distinct_rows(top)
        dists = [ulp_distance(self.y, self._evaluated[r.recipe].y).flatten() for r in shown]
        finite = torch.cat([d[torch.isfinite(d)] for d in dists])
        top_ulp = finite.max().item() if finite.numel() else 1
        hi = int(min(64, top_ulp)) + 1
        for r, d in zip(shown, dists):
            d = d[torch.isfinite(d)].clamp(max=hi)
            left.hist(d.numpy(), bins=(torch.arange(0, hi + 2) - 0.5).numpy(),
                      histtype="step", linewidth=1.5,
                      label=f"{self.short(r.recipe)}: {_pct(r.identical)} identical")
        left.set_yscale("log")
        left.set_xlabel(f"ulps of {self.ulp_dtype} between candidate and recipe"
                        + (" (clamped at 65)" if top_ulp > 64 else ""))
        left.set_ylabel("elements")
        left.set_title("distance to the closest recipes")
        left.legend(fontsize=7, loc="upper right")
        if self.exact and len(shown) > 1:
            other = self._evaluated[shown[1].recipe].y
            mask = ~(same_bits(self.y, other) | (torch.isnan(self.y) & torch.isnan(other)))
            title = f"where {self.short(shown[1].recipe)} differs\n(the candidate is exactly " \
                    f"{self.short(self.best_recipe)})"
        else:
            mask = self.differing()
            title = f"elements differing from {self.short(self.best_recipe)}"
        right.imshow(mask.float().numpy(), aspect="auto", interpolation="nearest",
                     cmap="Reds", vmin=0, vmax=1)
        right.set_xlabel("column")
        right.set_ylabel("row")
        right.set_title(title, fontsize=9)
        fig.tight_layout()
        fig.savefig(path, dpi=90)
        plt.close(fig)
        return path

    def short(self, r):
        """A recipe's name, or the nearest named point + the axes that differ."""
        names = rc.names_of(r)
        if names:
            return names[0]
        base = min(rc.NAMED, key=lambda n: sum(getattr(rc.NAMED[n].recipe, a) != getattr(r, a)
                                               for a in self.best))
        return base + "".join(f" +{a}={getattr(r, a)}" for a in self.best
                              if getattr(rc.NAMED[base].recipe, a) != getattr(r, a))


def _pct(f):
    if f is None:
        return "-"
    if f in (0, 1):
        return f"{f * 100:.0f}%"
    p = f * 100
    return f"{p:.2g}%" if p < 1 else f"{p:.1f}%"


def _ulps(v, unit=True):
    if v is None:
        return "-"
    if math.isinf(v):
        return "NaN vs number" if unit else "nan"
    text = f"{v:.0f}"
    return f"{text} ulp" + ("" if v == 1 else "s") if unit else text


def _join(parts):
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _finite(o):
    if isinstance(o, float) and not math.isfinite(o):
        return str(o)
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o
