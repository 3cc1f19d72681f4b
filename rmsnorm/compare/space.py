"""The recipe space: every way an RMSNorm kernel commonly rounds, as one choice per axis, and
one PyTorch implementation that computes any point of it bit for bit.

Axes (names and values are the API):

- upcast:   "fp32"    each element converted to fp32 before it is squared; the mean square
                      and rstd in fp32.
            "none"    squares, mean, + eps and rsqrt in the input dtype, as torch ops on
                      tensors of that dtype: h.pow(2).mean(-1) (torch's reduction accumulates
                      in fp32 in its own order and rounds the mean once), then + eps and
                      rsqrt (or sqrt, + eps, reciprocal), each rounded to the input dtype.
                      The rest of the recipe uses that rounded rstd.
- rounding: "llama"   xn = x * rstd rounded to the input dtype, then y = xn * (w + offset)
                      rounded to y's dtype (HF LlamaRMSNorm).
            "gemma"   y = x * rstd * (w + offset) in fp32, rounded once (HF GemmaRMSNorm).
- weight:   "fp32"    w + offset formed in fp32.
            "input"   w converted to the input dtype and offset added in it (rounded), then
                      used (Gemma's 1 + w formed in bf16; an fp32 weight cast to bf16 first).
- residual: "rounded" s = x + residual rounded to residual.dtype (the residual_out written)
                      is what is normalized.
            "fp32"    the unrounded fp32 sum is normalized (residual_out is still rounded).
            Only when there is a residual.
- eps:      "inside"  rsqrt(mean + eps).
            "outside" 1 / (sqrt(mean) + eps).
- store:    "rne"     every conversion from fp32 to a 16-bit dtype rounds to nearest even.
            "truncate" every such conversion (llama's xn, residual_out, y) rounds toward
                      zero, done on the bits (bit-truncating conversions, Triton 3.6's
                      interpreter). Arithmetic in the input dtype ("none", weight "input")
                      still rounds to nearest, as real hardware does.

The input dtype is x.dtype, or residual.dtype with a residual (DESIGN.md's rule). y's dtype is
a property of the candidate, not of the recipe: `evaluate` rounds to `out_dtype`, which
`diagnose` takes from the candidate's output (default: DESIGN.md's output_dtype rule).
eps and offset are fp32 scalars, as in every recipe of rmsnorm.reference.

For fp32 inputs and outputs every conversion is to fp32 itself, so upcast, rounding, weight,
residual and store change nothing: only eps can be told apart (diagnose reports the others as
undetermined).
"""

import collections
import dataclasses
import itertools

import torch

from rmsnorm.reference import fp32

AXES = {
    "upcast": ("fp32", "none"),
    "rounding": ("llama", "gemma"),
    "weight": ("fp32", "input"),
    "residual": ("rounded", "fp32"),
    "eps": ("inside", "outside"),
    "store": ("rne", "truncate"),
}
SIXTEEN_BIT = (torch.bfloat16, torch.float16)
SUPPORTED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclasses.dataclass(frozen=True)
class Recipe:
    upcast: str = "fp32"
    rounding: str = "llama"
    weight: str = "fp32"
    residual: str = "rounded"
    eps: str = "inside"
    store: str = "rne"

    def __post_init__(self):
        for axis, values in AXES.items():
            if getattr(self, axis) not in values:
                raise ValueError(f"recipe axis {axis!r} must be one of {values}, got "
                                 f"{getattr(self, axis)!r}")

    def flip(self, axis):
        a, b = AXES[axis]
        return dataclasses.replace(self, **{axis: b if getattr(self, axis) == a else a})

    def as_dict(self, residual=True):
        d = dataclasses.asdict(self)
        if not residual:
            del d["residual"]
        return d

    def __str__(self):
        return ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(self).items())


def recipe(spec=None, **axes):
    """A Recipe from a named point, a dict, "axis=value,..." text, or keywords."""
    if isinstance(spec, Recipe):
        return dataclasses.replace(spec, **axes)
    if isinstance(spec, str) and spec in NAMED:
        return dataclasses.replace(NAMED[spec].recipe, **axes)
    if isinstance(spec, str):
        try:
            pairs = dict(p.split("=", 1) for p in spec.split(",") if p.strip())
        except ValueError:
            raise ValueError(f"recipe {spec!r} is neither a name ({', '.join(NAMED)}) nor "
                             "axis=value,... text") from None
        spec = {k.strip(): v.strip() for k, v in pairs.items()}
    spec = dict(spec or {}, **axes)
    unknown = set(spec) - set(AXES)
    if unknown:
        raise ValueError(f"unknown recipe axes {sorted(unknown)}; the axes are {list(AXES)}")
    return Recipe(**spec)


@dataclasses.dataclass(frozen=True)
class Named:
    recipe: Recipe
    label: str   # how the summary names it
    who: str     # what computes it


# The named points. Several names may share a point (HF Llama is rmsnorm's "llama" mode); the
# first name of a point is the one reports use.
NAMED = {
    "hf_llama": Named(Recipe(), "HF Llama",
                      "HF LlamaRMSNorm (and Mistral, Qwen2, Qwen3), with the unfused residual "
                      "add of HF's decoder layer"),
    "rmsnorm_llama": Named(Recipe(), "rmsnorm llama",
                           "rmsnorm.rms_norm / fused_add_rms_norm, casting_mode='llama'"),
    "hf_gemma": Named(Recipe(rounding="gemma"), "HF Gemma",
                      "HF GemmaRMSNorm (offset=1: 1 + w in fp32)"),
    "torch": Named(Recipe(rounding="gemma"), "torch F.rms_norm",
                   "torch.nn.functional.rms_norm (weight of the input's dtype)"),
    "rmsnorm_gemma": Named(Recipe(rounding="gemma"), "rmsnorm gemma",
                           "rmsnorm.rms_norm / fused_add_rms_norm, casting_mode='gemma'"),
    "rmsnorm_vllm": Named(Recipe(rounding="gemma"), "rmsnorm recipe='vllm'",
                          "rmsnorm.rms_norm / fused_add_rms_norm, recipe='vllm' (the recipe "
                          "vLLM 0.33's rms_norm and fused_add_rms_norm followed row by row "
                          "on an H100, 2026-12-06)"),
    "gemma_weight_in_input_dtype": Named(
        Recipe(rounding="gemma", weight="input"), "Gemma with 1 + w in the input dtype",
        "Gemma ports that form (1 + w) in bf16/fp16"),
    "naive_input_dtype": Named(
        Recipe(upcast="none", weight="input"), "the un-upcast norm",
        "x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w on 16-bit tensors"),
    "fused_add_fp32_sum": Named(
        Recipe(residual="fp32"), "a fused add normalizing the fp32 sum",
        "fused residual-add kernels that keep x + residual in fp32 registers for the norm "
        "while storing the rounded sum"),
    "gemma_fused_add_fp32_sum": Named(
        Recipe(rounding="gemma", residual="fp32"),
        "Gemma's one rounding with a fused add normalizing the fp32 sum",
        "fused residual-add kernels that round once and normalize x + residual unrounded "
        "(the recipe FlashInfer 0.6's fused_add_rmsnorm followed row by row on an H100, "
        "2026-12-06)"),
    "rmsnorm_flashinfer": Named(
        Recipe(rounding="gemma", residual="fp32"), "rmsnorm recipe='flashinfer'",
        "rmsnorm.fused_add_rms_norm(..., recipe='flashinfer')"),
    "truncating_llama": Named(
        Recipe(store="truncate"), "HF Llama with truncating conversions",
        "kernels converting fp32 to bf16/fp16 by dropping bits (and Triton 3.6's "
        "interpreter)"),
    "eps_outside": Named(
        Recipe(rounding="gemma", eps="outside"), "eps outside the root",
        "x / (sqrt(mean(x^2)) + eps), the norm written as a scaled L2 normalization"),
}


def recipes():
    """{name: Recipe} for the named points (several names may share a point)."""
    return {name: n.recipe for name, n in NAMED.items()}


def names_of(r):
    return [name for name, n in NAMED.items() if n.recipe == r]


def all_points(residual=True):
    """Every point of the space (for tests; diagnose never enumerates it)."""
    axes = {k: v for k, v in AXES.items() if residual or k != "residual"}
    return [Recipe(**dict(zip(axes, values))) for values in itertools.product(*axes.values())]


def norm_dtype(x, residual=None):
    return x.dtype if residual is None else residual.dtype


def default_out_dtype(r, x, weight=None, residual=None):
    """DESIGN.md's rule: llama rounding promotes with the weight (as HF), gemma keeps the
    input dtype."""
    dtype = norm_dtype(x, residual)
    if weight is not None and r.rounding == "llama":
        return torch.promote_types(dtype, weight.dtype)
    return dtype


def convert(t, dtype, store="rne"):
    """t (fp32) converted to dtype: to nearest even, or toward zero on the bits."""
    out = t.to(dtype)
    if store == "rne" or dtype not in SIXTEEN_BIT:
        return out
    # Nearest-even went away from zero where |out| > |t|: step back one ulp on the bits
    # (decrementing a sign-magnitude encoding shrinks the magnitude for either sign; inf
    # becomes the largest finite value, as a truncating store makes it). NaN compares false.
    away = out.float().abs() > t.float().abs()
    bits = out.view(torch.int16)
    return torch.where(away, bits - 1, bits).view(dtype)


# What `evaluate` returns. rstd: fp32, shape [..., 1], the value the recipe multiplies by;
# first_rounding: the fp32 values of the recipe's first rounding of x * rstd (llama: xn before
# it is rounded; gemma: y), and first_dtype the dtype they are rounded to.
Evaluation = collections.namedtuple("Evaluation",
                                    "y residual_out rstd first_rounding first_dtype")


def evaluate(r, x, weight=None, eps=1e-6, *, residual=None, offset=0.0, out_dtype=None):
    """The recipe's Evaluation for these inputs (y, residual_out: None without a residual,
    rstd, and the first rounding of x * rstd, for the report)."""
    if residual is not None:
        dtype = residual.dtype
        s32 = x.float() + residual.float()
        residual_out = convert(s32, dtype, r.store)
        h = residual_out.float() if r.residual == "rounded" else s32
    else:
        dtype, residual_out, h = x.dtype, None, x.float()
    if out_dtype is None:
        out_dtype = default_out_dtype(r, x, weight, residual)
    eps, offset = fp32(eps), fp32(offset)

    if r.upcast == "fp32":
        ms = h.pow(2).mean(-1, keepdim=True)
    else:
        # The statistics on tensors of the input dtype: h holds values of that dtype unless it
        # is the unrounded fp32 sum, which a kernel with no upcast would not have either.
        ms = h.to(dtype).pow(2).mean(-1, keepdim=True)
    if r.eps == "inside":
        rstd = torch.rsqrt(ms + eps)
    else:
        rstd = torch.reciprocal(torch.sqrt(ms) + eps)
    rstd = rstd.float()

    if weight is None:
        if offset != 0:
            raise ValueError("offset needs a weight")
        wf = None
    elif r.weight == "fp32":
        wf = weight.float() + offset
    else:
        wf = (weight.to(dtype) + offset).float()

    if r.rounding == "llama":
        first, first_dtype = h * rstd, dtype
        xn = convert(first, dtype, r.store).float()
        y = xn if wf is None else xn * wf
    else:
        y = h * rstd if wf is None else h * rstd * wf
        first, first_dtype = y, out_dtype
    return Evaluation(convert(y, out_dtype, r.store), residual_out, rstd, first, first_dtype)


def midpoint_distance(v, dtype):
    """How far the fp32 values v lie from a rounding midpoint of dtype, in ulps of dtype
    (0: on the midpoint, 0.5: representable); None for fp32, which v already is."""
    if dtype not in SIXTEEN_BIT:
        return None
    a = v.float().abs()
    lo = convert(a, dtype, "truncate")
    hi = (lo.view(torch.int16) + 1).view(dtype)
    lo, hi = lo.double(), hi.double()
    frac = (a.double() - lo) / (hi - lo)
    return (frac - 0.5).abs()
