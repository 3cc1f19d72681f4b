"""The --tensors file of rmsnorm-compare: a candidate's saved inputs and outputs.

Everything wrong with the file raises ValueError naming --tensors and the file: the CLI turns
it into one line and exit 2 (bad input), where a traceback would read as exit 1 (the candidate
failed). What is wrong with the tensors' values (a y of the wrong shape or dtype) is for
diagnose to say.
"""

import numbers
import os
import re

import torch

REQUIRED = ("x", "y")
OPTIONAL = ("weight", "residual", "residual_out")
KEYS = "x, weight, residual, y, residual_out, eps"


def load_tensors(path):
    """{key: tensor} with the keys present, "eps" (when there) a float."""
    t = _read(path)
    if not isinstance(t, dict):
        raise ValueError(f"--tensors: {path} holds a {type(t).__name__}, not a dict of "
                         f"tensors (keys: {KEYS})")
    unknown = [k for k in t if k not in REQUIRED + OPTIONAL + ("eps",)]
    if unknown:
        raise ValueError(f"--tensors: {path} has keys {', '.join(map(repr, unknown))}; the "
                         f"keys are {KEYS}")
    missing = [k for k in REQUIRED if k not in t]
    if missing:
        raise ValueError(f"--tensors: {path} has no {' or '.join(missing)} (keys: {KEYS})")
    out = {}
    for key in REQUIRED + OPTIONAL:
        value = t.get(key)
        if value is None and key in OPTIONAL:
            continue
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"--tensors: {key} in {path} is a {type(value).__name__}, not a "
                             f"tensor")
        out[key] = value
    if t.get("eps") is not None:
        out["eps"] = _eps(t["eps"], path)
    return out


def _eps(value, path):
    if isinstance(value, torch.Tensor) and value.numel() == 1 and \
            value.dtype.is_floating_point:
        return value.item()
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    raise ValueError(f"--tensors: eps in {path} must be a number, got {type(value).__name__}")


def _read(path):
    if not os.path.isfile(path):
        raise ValueError(f"--tensors: no file {path}")
    if path.endswith(".safetensors"):
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise ValueError("--tensors: reading a .safetensors file needs the safetensors "
                             "package") from None
        read, kind = (lambda: load_file(path)), "a safetensors file"
    else:
        read, kind = (lambda: torch.load(path, map_location="cpu", weights_only=True)), \
            "a torch.save file"
    try:
        return read()
    except Exception as e:  # whatever a damaged or foreign file makes the reader raise
        raise ValueError(f"--tensors: {path} is not {kind} of tensors: {_reason(e)}") from None


def _reason(e):
    """The one line of a reader's error that says what is wrong (torch's run to paragraphs)."""
    text = str(e).strip()
    refused = re.search(r"WeightsUnpickler error:\s*(.+)", text)  # its reason, lines later
    if refused:
        cls = re.search(r"GLOBAL (\S+) was not an allowed global", refused.group(1))
        if cls:
            return (f"it holds a {cls.group(1)}, which torch.load(weights_only=True) does not "
                    f"unpickle (save tensors and numbers only)")
        return f"{refused.group(1).strip()} (torch.load, weights_only=True)"
    if not text:
        return type(e).__name__
    return text.splitlines()[0].split(". ")[0]
