"""nn.Module drop-ins whose state dicts and attribute names match Hugging Face's norms."""

import numbers

import torch
from torch import nn

from rmsnorm.launch import validation
from rmsnorm.pytorch.functional import fused_add_rms_norm, rms_norm


class RMSNorm(nn.Module):
    """Drop-in for HF LlamaRMSNorm (`weight`, `variance_epsilon`).

    forward(x) -> y; forward(x, residual) -> (y, x + residual), the fused pre-norm add.
    """

    def __init__(self, hidden_size, eps=1e-6, *, offset=0.0, casting_mode="llama",
                 elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        if isinstance(hidden_size, bool) or not isinstance(hidden_size, numbers.Integral):
            raise TypeError(f"hidden_size must be an int, got {type(hidden_size).__name__}")
        if hidden_size < 1:
            raise ValueError(f"hidden_size must be >= 1, got {hidden_size}")
        # Whether an offset has a weight to go with is checked at each call: patch_hf builds
        # without a weight and assigns the original one.
        validation.check_scalars(eps, offset, casting_mode, weight=True)
        self.hidden_size = hidden_size
        self.variance_epsilon = eps
        self.offset = offset
        self.casting_mode = casting_mode
        if elementwise_affine:
            self.weight = nn.Parameter(self._initial_weight(hidden_size, device, dtype))
        else:
            self.register_parameter("weight", None)

    def _initial_weight(self, hidden_size, device, dtype):
        return torch.ones(hidden_size, device=device, dtype=dtype)

    def forward(self, x, residual=None):
        if residual is None:
            return rms_norm(x, self.weight, self.variance_epsilon, offset=self.offset,
                            casting_mode=self.casting_mode)
        return fused_add_rms_norm(x, residual, self.weight, self.variance_epsilon,
                                  offset=self.offset, casting_mode=self.casting_mode)

    def extra_repr(self):
        return (f"{self.hidden_size}, eps={self.variance_epsilon}, offset={self.offset}, "
                f"casting_mode={self.casting_mode!r}")


class GemmaRMSNorm(RMSNorm):
    """Drop-in for HF GemmaRMSNorm: zero-initialised weight, scaled by (1 + weight) in fp32,
    one rounding at the end."""

    def __init__(self, hidden_size, eps=1e-6, *, device=None, dtype=None):
        super().__init__(hidden_size, eps, offset=1.0, casting_mode="gemma", device=device,
                         dtype=dtype)

    def _initial_weight(self, hidden_size, device, dtype):
        return torch.zeros(hidden_size, device=device, dtype=dtype)
