"""DESIGN.md's contract in PyTorch ops: the dtype rules every path follows (the dtype the
contract computes in, y's dtype, eps and offset as fp32 scalars) and the forward, fused add
and backward computed with PyTorch ops, rounding where the contract rounds. The launcher runs
these for CPU tensors when Triton's interpreter is off; rmsnorm.reference, the oracle the
tests hold every path against, re-exports them as the contract's recipe."""

import torch


def acc_dtype(dtype):
    """The dtype the contract computes in: float64 for float64 tensors, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def fp32(v):
    """eps and offset as the contract uses them: fp32 scalars, also for float64 tensors."""
    return torch.tensor(v, dtype=torch.float32).item()


def output_dtype(norm_dtype, weight, casting_mode):
    """dtype of y: "llama" promotes with the weight (as HF does), "gemma" keeps the input's."""
    if weight is not None and casting_mode == "llama":
        return torch.promote_types(norm_dtype, weight.dtype)
    return norm_dtype


def contract_rms_norm(x, weight=None, eps=1e-6, *, offset=0.0, casting_mode="llama"):
    """Returns (y, rstd) exactly as DESIGN.md's contract rounds them; rstd has shape [..., 1]."""
    return _normalize(x.to(acc_dtype(x.dtype)), x.dtype, weight, eps, offset, casting_mode)


def _normalize(v, dtype, weight, eps, offset, casting_mode):
    """(y, rstd) of v (in the dtype the contract computes in), rounding as the contract does
    for an input of `dtype`."""
    acc = v.dtype
    rstd = torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + fp32(eps))
    out_dtype = output_dtype(dtype, weight, casting_mode)
    if weight is None:
        return (v * rstd).to(out_dtype), rstd
    w = weight.to(acc) + fp32(offset)
    if casting_mode == "llama":
        return ((v * rstd).to(dtype).to(acc) * w).to(out_dtype), rstd
    return (v * rstd * w).to(out_dtype), rstd


def residual_add(x, residual):
    return (residual + x).to(residual.dtype)


def contract_fused_add_rms_norm(x, residual, weight=None, eps=1e-6, *, offset=0.0,
                                casting_mode="llama", normalized_sum="rounded"):
    """Returns (y, residual_out, rstd). normalized_sum: "rounded" normalizes residual_out, the
    sum rounded to residual.dtype (HF's unfused add); "fp32" the unrounded sum x + residual
    (vLLM's fused quantized kernels, FlashInfer's fused add), residual_out still rounded."""
    if normalized_sum not in ("rounded", "fp32"):
        raise ValueError(f"normalized_sum must be 'rounded' or 'fp32', got {normalized_sum!r}")
    residual_out = residual_add(x, residual)
    if normalized_sum == "rounded":
        v = residual_out.to(acc_dtype(residual.dtype))
    else:
        acc = acc_dtype(residual.dtype)
        v = residual.to(acc) + x.to(acc)
    y, rstd = _normalize(v, residual.dtype, weight, eps, offset, casting_mode)
    return y, residual_out, rstd


def contract_rms_norm_backward(dy, x, weight, rstd, *, offset=0.0, casting_mode="llama",
                               dresidual=None, norm_dtype=None):
    """(dx, dw) as DESIGN.md's "Backward" computes them from the saved rstd (shape
    x.shape[:-1]); with `dresidual` (fused add) dx includes it. dw is None without a weight.
    norm_dtype: the dtype the forward rounded x's normalized values to ("llama") and dx is
    stored in, x.dtype unless x is the unrounded fp32 sum (normalized_sum="fp32": the
    residual's dtype)."""
    norm_dtype = x.dtype if norm_dtype is None else norm_dtype
    acc = acc_dtype(x.dtype)
    r = rstd.to(acc).unsqueeze(-1)
    xhat = x.to(acc) * r
    dy = dy.to(acc)
    g = dy if weight is None else dy * (weight.to(acc) + fp32(offset))
    dx = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    if dresidual is not None:
        dx = dx + dresidual.to(acc)
    if weight is None:
        return dx.to(norm_dtype), None
    if casting_mode == "llama":
        xhat = xhat.to(norm_dtype).to(acc)
    dw = (dy * xhat).reshape(-1, x.shape[-1]).sum(0)
    return dx.to(norm_dtype), dw.to(weight.dtype)
