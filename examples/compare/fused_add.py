"""A fused residual add + RMSNorm of the kind docs/COMPARE.md diagnoses: it keeps the sum
x + residual in fp32 for the norm and stores the rounded sum as the new residual, as a kernel
holding the sum in registers would. vLLM/FlashInfer's in-place convention:
fused_add_rms_norm(x, residual, weight, eps) writes y into x and the sum into residual."""

import torch


def fused_add_rms_norm(x, residual, weight, eps):
    s = x.float() + residual.float()
    residual.copy_(s)                                    # the stored sum, rounded
    rstd = torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps)
    x.copy_((s * rstd).to(x.dtype) * weight)            # the norm of the unrounded sum
