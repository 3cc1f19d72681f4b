"""Calling conventions: wrap a norm written for another convention into diagnose's
`candidate(x, weight, eps[, residual]) -> y or (y, residual_out)`.

- functional: fn(x, weight, eps) -> y; with a residual fn(x, weight, eps, residual) ->
  (y, residual_out). diagnose's own convention.
- hf: a Hugging Face RMSNorm class (or any nn.Module class built as cls(hidden_size, eps) with
  a `weight` Parameter); the module is built per call holding the weight. With a residual,
  the sum is formed as HF's decoder layer does (residual + x, in the residual's dtype) and
  normalized by the module: (module(s), s).
- out_first: fn(out, x, weight, eps) writes y into out (vLLM's rms_norm); with a residual
  fn(x, residual, weight, eps) updates both in place: x <- y, residual <- x + residual
  (vLLM's fused_add_rms_norm).
- inplace: fn(x, weight, eps) returns y, or returns None having written y into x; with a
  residual fn(x, residual, weight, eps) returns (y, residual_out), or y with the sum written
  into residual, or None with y in x and the sum in residual (FlashInfer's
  fused_add_rmsnorm; rmsnorm.fused_add_rms_norm returns the pair).

`load("package.module:attr")` (or "path/to/file.py:attr") imports what the CLI's --impl names.
"""

import functools
import importlib
import importlib.util
import os

import torch
from torch import Tensor, nn


def functional(fn, **kwargs):
    @functools.wraps(fn)
    def candidate(x, weight, eps, residual=None):
        if residual is None:
            return fn(x, weight, eps, **kwargs)
        return fn(x, weight, eps, residual, **kwargs)
    return candidate


def hf(cls, **kwargs):
    if isinstance(cls, nn.Module):
        raise TypeError("hf takes the module's class (it is built per call with the "
                        "diagnosed weight and eps), not an instance")

    def candidate(x, weight, eps, residual=None):
        if weight is None:
            raise ValueError("an HF norm module has a weight: call diagnose with one")
        module = cls(weight.shape[0], eps, **kwargs)
        module.weight = nn.Parameter(weight.clone(), requires_grad=False)
        module.to(x.device)
        if residual is None:
            return module(x)
        s = (residual + x).to(residual.dtype)
        return module(s), s
    candidate.__name__ = getattr(cls, "__name__", "hf_module")
    return candidate


def out_first(fn, **kwargs):
    @functools.wraps(fn)
    def candidate(x, weight, eps, residual=None):
        if residual is None:
            out = torch.empty_like(x)
            fn(out, x, weight, eps, **kwargs)
            return out
        fn(x, residual, weight, eps, **kwargs)
        return x, residual
    return candidate


def inplace(fn, **kwargs):
    @functools.wraps(fn)
    def candidate(x, weight, eps, residual=None):
        if residual is None:
            out = fn(x, weight, eps, **kwargs)
            return x if out is None else out
        out = fn(x, residual, weight, eps, **kwargs)
        if out is None:
            return x, residual
        if isinstance(out, Tensor):
            return out, residual
        return tuple(out)
    return candidate


CONVENTIONS = {"functional": functional, "hf": hf, "out_first": out_first,
               "inplace": inplace}


def adapt(obj, convention="functional", **kwargs):
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {list(CONVENTIONS)}, got {convention!r}")
    return CONVENTIONS[convention](obj, **kwargs)


def load(spec):
    """The object `spec` names: "package.module:attr" or "path/to/file.py:attr"."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--impl must be package.module:function (or file.py:function), "
                         f"got {spec!r}")
    if module_name.endswith(".py") or os.sep in module_name:
        if not os.path.isfile(module_name):
            raise ValueError(f"--impl: no file {module_name!r}")
        name = os.path.splitext(os.path.basename(module_name))[0]
        loader = importlib.util.spec_from_file_location(name, module_name)
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"--impl: {module_name} has no attribute {attr!r}") from None
    return obj
