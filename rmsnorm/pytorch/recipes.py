"""Named recipes: the options under which rmsnorm's public functions compute what another
engine's kernel of the same call computes (docs/USAGE.md, "Recipes", lists which kernel each
preset stands for and how close it comes: bit for bit but for rows where the engine's sum of
squares, added in another order, moves 1/rms by an ulp).

A recipe sets three options: casting_mode, normalized_sum (what a fused add normalizes) and
quantizer (whose formulas turn a max into a scale). A caller gives a recipe or the options,
not both: a recipe's point is that its name alone decides the arithmetic.
"""

import typing

RECIPES = ("rmsnorm", "vllm", "flashinfer")


class Options(typing.NamedTuple):
    casting_mode: str
    normalized_sum: str
    quantizer: str


DEFAULT = Options("llama", "rounded", "vllm")


def _vllm(fused, quantized, dynamic):
    """vLLM 0.33's kernels: rms_norm and fused_add_rms_norm (and their static fp8 forms,
    rms_norm_static_fp8_quant and fused_add_rms_norm_static_fp8_quant) round once and
    normalize the rounded sum; rms_norm_dynamic_per_token_quant and rms_norm_per_block_quant
    round as HF's Llama does, normalize the unrounded sum and floor and invert their scales
    their own way."""
    if quantized and dynamic:
        return Options("llama", "fp32" if fused else "rounded", "vllm_fused")
    return Options("gemma", "rounded", "vllm")


def _flashinfer(fused, quantized, dynamic):
    """FlashInfer 0.6's rmsnorm and fused_add_rmsnorm (gemma_rmsnorm and
    gemma_fused_add_rmsnorm with offset=1.0): one rounding; the fused add normalizes the
    unrounded sum. FlashInfer has no fused norm-quant kernel."""
    if quantized:
        raise ValueError("recipe='flashinfer' has no quantized form: FlashInfer has no fused "
                         "RMSNorm-quantize kernel (use recipe='vllm' or the options)")
    return Options("gemma", "fp32" if fused else "rounded", "vllm")


_PRESETS = {"vllm": _vllm, "flashinfer": _flashinfer}


def resolve(recipe, casting_mode, normalized_sum=None, quantizer=None, *, fused=False,
            quantized=False, dynamic=False):
    """The Options of a call: the recipe's (None and "rmsnorm": the options given, each
    defaulting to rmsnorm's own), for a call with a residual (fused), quantized, with
    dynamic scales (per token or per group)."""
    if recipe is None or recipe == "rmsnorm":
        return Options(DEFAULT.casting_mode if casting_mode is None else casting_mode,
                       DEFAULT.normalized_sum if normalized_sum is None else normalized_sum,
                       DEFAULT.quantizer if quantizer is None else quantizer)
    if type(recipe) is not str:
        raise TypeError(f"recipe must be a str, one of {RECIPES}, or None, got "
                        f"{type(recipe).__name__}")
    if recipe not in RECIPES:
        raise ValueError(f"recipe must be one of {RECIPES} or None, got {recipe!r}")
    given = [name for name, value in (("casting_mode", casting_mode),
                                      ("normalized_sum", normalized_sum),
                                      ("quantizer", quantizer)) if value is not None]
    if given:
        raise ValueError(f"recipe={recipe!r} sets {', '.join(given)}: give the recipe or the "
                         "options, not both")
    return _PRESETS[recipe](fused, quantized, dynamic)
