"""rmsnorm.compare.model(model, inputs, candidate): a candidate norm inside a Hugging Face
model, layer by layer.

Two forwards of the model on the same inputs:

1. as it is, with forward hooks on every RMSNorm module that rmsnorm.patch_hf recognises
   (rmsnorm.integrations.hf.SUPPORTED) recording each norm's input and output. Each layer is
   then diagnosed on the input it saw (so the diagnosis does not depend on drift upstream), and
   the candidate's output is held against the module's and against float64.
2. with every norm's output replaced by the candidate's, computed on that forward's own input
   (so the differences accumulate as they would in a model running the candidate): the
   hidden states through the stack and the final logits against the first forward.

The candidate has diagnose's convention, `candidate(x, weight, eps) -> y`, and is given each
module's weight as the module stores it (Gemma's raw w: the candidate adds the 1 itself, as a
Gemma norm does). transformers itself is not imported here: the model is any nn.Module whose
norm classes come from transformers.models.
"""

import dataclasses
import json
import math

import torch

from rmsnorm.compare.diagnose import (call_candidate, check_output, diagnose, same_bits,
                                      ulp_distance)
from rmsnorm.compare.report import _finite, _pct
from rmsnorm.integrations import hf


@dataclasses.dataclass
class Layer:
    name: str
    module: str               # class name
    report: object            # the layer's diagnosis (compare.Report)
    identical_to_module: float
    max_ulp_to_module: float  # in ulps of y's dtype (inf where the dtypes differ)
    max_abs_to_float64: float
    module_max_abs_to_float64: float

    def as_dict(self):
        return {"name": self.name, "module": self.module, "best": self.report.best,
                "names": self.report.names, "exact": self.report.exact,
                "undetermined": self.report.undetermined,
                "identical_to_module": self.identical_to_module,
                "max_ulp_to_module": self.max_ulp_to_module,
                "max_abs_to_float64": self.max_abs_to_float64,
                "module_max_abs_to_float64": self.module_max_abs_to_float64}


@dataclasses.dataclass
class ModelReport:
    layers: list
    drift: list          # per hidden state: {"index", "max_abs", "relative"}
    logits_max_abs: float
    kl: float            # mean over positions of KL(model || model with the candidate)

    def summary(self):
        exact = [l for l in self.layers if l.identical_to_module == 1.0]
        s = [f"{len(exact)} of {len(self.layers)} norms give the module's bits exactly."]
        by_label = {}
        for l in self.layers:
            key = (l.report.label(), l.report.exact)
            by_label.setdefault(key, []).append(l)
        for (label, exact), group in by_label.items():
            same = [l.identical_to_module for l in group]
            span = _pct(min(same)) if min(same) == max(same) else \
                f"{_pct(min(same))}-{_pct(max(same))}"
            who = f"All {len(group)} norms" if len(group) == len(self.layers) else \
                ", ".join(l.name for l in group)
            s.append(f"{who}: the candidate is {label}{' exactly' if exact else ' at best'}, "
                     f"matching the module on {span} of elements.")
        if self.drift:
            last = self.drift[-1]
            s.append(f"Hidden states drift to max |diff| {last['max_abs']:.3g} (relative "
                     f"{last['relative']:.3g}) at the last one; logits max |diff| "
                     f"{self.logits_max_abs:.3g}, KL {self.kl:.3g}.")
        return " ".join(s)

    def table(self):
        lines = ["layer | class | identical to module | max ulp | best recipe | exact"]
        for l in self.layers:
            lines.append(f"{l.name} | {l.module} | {_pct(l.identical_to_module)} | "
                         f"{l.max_ulp_to_module:g} | {l.report.label()} | {l.report.exact}")
        lines.append("")
        lines.append("hidden state | max abs diff | relative")
        for d in self.drift:
            lines.append(f"{d['index']} | {d['max_abs']:.3g} | {d['relative']:.3g}")
        lines.append(f"logits | {self.logits_max_abs:.3g} | KL {self.kl:.3g}")
        return "\n".join(lines)

    def as_dict(self):
        return {"layers": [l.as_dict() for l in self.layers], "drift": self.drift,
                "logits_max_abs": self.logits_max_abs, "kl": self.kl,
                "summary": self.summary()}

    def to_json(self):
        return json.dumps(_finite(self.as_dict()), indent=2)


def compare_model(model, inputs, candidate):
    norms = [(name, m) for name, m in model.named_modules()
             if name and hf.is_hf_norm(m) and hf.why_not_patched(m) is None]
    if not norms:
        raise ValueError("model has no RMSNorm module of a class rmsnorm recognises "
                         f"({', '.join(hf.SUPPORTED)})")
    if not callable(candidate):
        raise TypeError(f"candidate must be callable, got {type(candidate).__name__}")

    seen = {}

    def record(name):
        def hook(module, args, output):
            seen[name] = (args[0].detach().clone(), output.detach().clone())
        return hook

    ref = _forward(model, inputs, norms, record)
    layers = [_layer(name, module, *seen[name], candidate) for name, module in norms]

    def replace(name):
        def hook(module, args, output):
            eps_attr, _, _ = hf.SUPPORTED[type(module).__name__]
            y = call_candidate(candidate, args[0].clone(), module.weight.detach().clone(),
                               getattr(module, eps_attr))
            check_output("y", y, output.shape)
            return y.to(output.dtype)
        return hook

    cand = _forward(model, inputs, norms, replace)
    drift = []
    for i, (a, b) in enumerate(zip(ref.hidden_states or (), cand.hidden_states or ())):
        a, b = a.double(), b.double()
        drift.append({"index": i, "max_abs": (a - b).abs().max().item(),
                      "relative": ((a - b).norm() / a.norm().clamp(min=1e-300)).item()})
    la, lb = ref.logits.double(), cand.logits.double()
    pa, lpa, lpb = la.softmax(-1), la.log_softmax(-1), lb.log_softmax(-1)
    kl = (pa * (lpa - lpb)).sum(-1).mean().item()
    return ModelReport(layers, drift, (la - lb).abs().max().item(), kl)


def _forward(model, inputs, norms, make_hook):
    handles = [m.register_forward_hook(make_hook(name)) for name, m in norms]
    try:
        with torch.no_grad():
            if isinstance(inputs, dict):
                return model(**inputs, output_hidden_states=True)
            return model(inputs, output_hidden_states=True)
    finally:
        for h in handles:
            h.remove()


def _layer(name, module, x, y_module, candidate):
    eps_attr, offset, _ = hf.SUPPORTED[type(module).__name__]
    eps = getattr(module, eps_attr)
    weight = module.weight.detach()
    report = diagnose(candidate, x, weight, eps, offset=offset)
    y = report.y.reshape(y_module.shape)
    y_module = y_module.cpu()
    truth = report.problem.float64().reshape(y_module.shape)
    if y.dtype == y_module.dtype:
        identical = (same_bits(y, y_module) | (torch.isnan(y) & torch.isnan(y_module)))
        identical = identical.double().mean().item()
        max_ulp = ulp_distance(y, y_module).max().item()
    else:
        identical = (y.double() == y_module.double()).double().mean().item()
        max_ulp = math.inf
    return Layer(name, type(module).__name__, report, identical, max_ulp,
                 (y.double() - truth).abs().max().item(),
                 (y_module.double() - truth).abs().max().item())
