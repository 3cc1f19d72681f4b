"""The --tensors file of rmsnorm-compare: a candidate's saved inputs and outputs."""

import torch


def load_tensors(path):
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        t = load_file(path)
    else:
        t = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(t, dict):
        raise ValueError(f"--tensors: {path} must hold a dict of tensors")
    missing = [k for k in ("x", "y") if k not in t]
    if missing:
        raise ValueError(f"--tensors: {path} has no {' or '.join(missing)} (keys: x, weight, "
                         f"residual, y, residual_out)")
    return t
