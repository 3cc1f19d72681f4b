"""rmsnorm.compare: find where another kernel's RMSNorm departs from a reference, rounding by
rounding (docs/COMPARE.md).

    report = rmsnorm.compare.diagnose(candidate, x, weight, eps)   # or y=... instead
    report.best, report.exact, report.undetermined, print(report.summary())

The recipe space (space.AXES) holds one choice per rounding decision of an RMSNorm; HF
Llama, HF Gemma, torch's F.rms_norm, rmsnorm's two modes and common vendor variants are named
points of it (recipes()). matplotlib (Report.plot) and transformers (model) are imported only
when used.
"""

# adapters too, so that `compare.adapters.hf(...)` works after `from rmsnorm import compare`
# (it needs only torch).
from rmsnorm.compare import adapters
from rmsnorm.compare.diagnose import CandidateError, Row, diagnose
from rmsnorm.compare.inputs import generate
from rmsnorm.compare.space import AXES, NAMED, Recipe, evaluate, recipe, recipes
from rmsnorm.compare.report import Report


def model(model, inputs, candidate, **kw):
    """Per-layer diagnosis and hidden-state drift of a Hugging Face model
    (rmsnorm.compare.hf_model)."""
    from rmsnorm.compare.hf_model import compare_model

    return compare_model(model, inputs, candidate, **kw)


__all__ = ["diagnose", "model", "adapters", "Report", "Row", "Recipe", "AXES", "NAMED", "recipe",
           "recipes", "evaluate", "generate", "CandidateError"]
