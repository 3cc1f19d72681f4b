"""Ground truth and the exact PyTorch recipes the kernels are held against.

- `float64_rms_norm`: the exact math in float64, no intermediate rounding (ground truth).
- `contract_rms_norm` / `contract_fused_add_rms_norm`: DESIGN.md's contract written in PyTorch
  ops, rounding where the contract rounds. It is also what CPU tensors run when Triton's
  interpreter is off.
- `hf_llama_rms_norm`, `hf_gemma_rms_norm`: the code of Hugging Face's LlamaRMSNorm and
  GemmaRMSNorm forward, verbatim in substance.
- `torch_rms_norm`: `torch.nn.functional.rms_norm`.
- `residual_add`: the unfused residual add of a pre-norm block, rounded to the residual dtype.
- `contract_rms_norm_backward`: DESIGN.md's backward formulas in PyTorch ops (the CPU path
  without the interpreter); `float64_rms_norm` under autograd is the gradients' ground truth.
"""

import torch
import torch.nn.functional as F


def acc_dtype(dtype):
    """The dtype the contract computes in: float64 for float64 tensors, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def fp32(v):
    """eps and offset as the contract uses them: fp32 scalars, also for float64 tensors."""
    return torch.tensor(v, dtype=torch.float32).item()


def float64_rms_norm(x, weight=None, eps=1e-6, offset=0.0):
    v = x.double()
    y = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + fp32(eps))
    if weight is not None:
        y = y * (weight.double() + fp32(offset))
    return y


def output_dtype(norm_dtype, weight, casting_mode):
    """dtype of y: "llama" promotes with the weight (as HF does), "gemma" keeps the input's."""
    if weight is not None and casting_mode == "llama":
        return torch.promote_types(norm_dtype, weight.dtype)
    return norm_dtype


def contract_rms_norm(x, weight=None, eps=1e-6, *, offset=0.0, casting_mode="llama"):
    """Returns (y, rstd) exactly as DESIGN.md's contract rounds them; rstd has shape [..., 1]."""
    acc = acc_dtype(x.dtype)
    v = x.to(acc)
    rstd = torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + fp32(eps))
    out_dtype = output_dtype(x.dtype, weight, casting_mode)
    if weight is None:
        return (v * rstd).to(out_dtype), rstd
    w = weight.to(acc) + fp32(offset)
    if casting_mode == "llama":
        return ((v * rstd).to(x.dtype).to(acc) * w).to(out_dtype), rstd
    return (v * rstd * w).to(out_dtype), rstd


def residual_add(x, residual):
    return (residual + x).to(residual.dtype)


def contract_fused_add_rms_norm(x, residual, weight=None, eps=1e-6, *, offset=0.0,
                                casting_mode="llama"):
    """Returns (y, residual_out, rstd)."""
    s = residual_add(x, residual)
    y, rstd = contract_rms_norm(s, weight, eps, offset=offset, casting_mode=casting_mode)
    return y, s, rstd


def contract_rms_norm_backward(dy, x, weight, rstd, *, offset=0.0, casting_mode="llama",
                               dresidual=None):
    """(dx, dw) as DESIGN.md's "Backward" computes them from the saved rstd (shape
    x.shape[:-1]); with `dresidual` (fused add) dx includes it. dw is None without a weight."""
    acc = acc_dtype(x.dtype)
    r = rstd.to(acc).unsqueeze(-1)
    xhat = x.to(acc) * r
    dy = dy.to(acc)
    g = dy if weight is None else dy * (weight.to(acc) + fp32(offset))
    dx = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    if dresidual is not None:
        dx = dx + dresidual.to(acc)
    if weight is None:
        return dx.to(x.dtype), None
    if casting_mode == "llama":
        xhat = xhat.to(x.dtype).to(acc)
    dw = (dy * xhat).reshape(-1, x.shape[-1]).sum(0)
    return dx.to(x.dtype), dw.to(weight.dtype)


def hf_llama_rms_norm(x, weight, eps=1e-6):
    input_dtype = x.dtype
    hidden = x.to(torch.float32)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    hidden = hidden * torch.rsqrt(variance + eps)
    if weight is None:
        return hidden.to(input_dtype)
    return weight * hidden.to(input_dtype)


def hf_gemma_rms_norm(x, weight, eps=1e-6):
    """`weight` is Gemma's stored weight; the recipe scales by (1 + weight) in fp32."""
    out = x.float()
    out = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + eps)
    out = out * (1.0 + weight.float())
    return out.type_as(x)


def torch_rms_norm(x, weight, eps=1e-6):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)
