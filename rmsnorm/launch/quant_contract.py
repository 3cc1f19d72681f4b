"""The quantizers of the quantized forward in PyTorch ops: vLLM's arithmetic for each mode,
operation by operation in fp32 (docs/USAGE.md, "Quantized output"). The launcher runs these
for CPU tensors when Triton's interpreter is off; rmsnorm.reference re-exports them, and the
tests hold every path to `rms_norm` followed by `quantize`."""

import torch

QUANT_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2, torch.int8)
GROUP_SIZES = (64, 128)
# Whose formulas turn a row's or group's max into a scale and y into a code: vLLM's
# standalone quantizers (scaled_fp8_quant, scaled_int8_quant, per_token_group_quant_*), or
# its fused norm-quant kernels (rms_norm_dynamic_per_token_quant, rms_norm_per_block_quant),
# which floor every dynamic scale and multiply by its reciprocal except per-token fp8.
QUANTIZERS = ("vllm", "vllm_fused")
# vLLM's floor of a group's max |y| (its per_token_group_quant eps) and of a UE8M0 scale.
GROUP_EPS = 1e-10


def quant_max(quant_dtype):
    """The format's largest finite value (int8: 127)."""
    return 127.0 if quant_dtype == torch.int8 else torch.finfo(quant_dtype).max


def _div(a, b):
    """a / b elementwise, correctly rounded. PyTorch divides a CUDA tensor by a CPU scalar
    (a Python number, a 0-dim CPU tensor) as a multiplication by its reciprocal, which is not
    the quotient: the divisor is always given as a tensor of a's shape on a's device."""
    if not isinstance(b, torch.Tensor):
        b = torch.tensor(b, dtype=torch.float32)
    return a / b.to(a.device).expand_as(a)


def _abs_max(y, dim):
    """max |y| over dim, from 0, NaNs skipped (vLLM's fmaxf)."""
    return torch.where(torch.isnan(y), 0.0, y.abs()).amax(dim=dim, keepdim=True)


def _to_format(v, quant_dtype, nan_out):
    """fp32 v saturated to the format (a NaN to nan_out) and converted to nearest even."""
    qmax = quant_max(quant_dtype)
    qmin = -128.0 if quant_dtype == torch.int8 else -qmax
    v = torch.where(torch.isnan(v), nan_out, v.clamp(qmin, qmax))
    if quant_dtype == torch.int8:
        v = v.round()
    return v.to(quant_dtype)


def ue8m0(s):
    """s (positive fp32) floored at 1e-10 and rounded up to a power of two, exactly."""
    bits = s.clamp(min=GROUP_EPS).view(torch.int32)
    up = (bits & 0x7F800000) + 0x800000
    return torch.where((bits & 0x7FFFFF) != 0, up, bits).view(torch.float32)


def quantize(y, quant_dtype, *, scale=None, group_size=None, scale_ub=None,
             use_ue8m0=False, quantizer="vllm"):
    """(q, scales): y (any float dtype; taken to fp32 exactly) quantized as vLLM's quantizer
    of the mode does it. Static (`scale`, one fp32 element): fp8 `y * (1 / scale)`, int8
    `y / scale`; scales is `scale`. Per row (no scale, no group_size): fp8 scale
    `max(min(amax, scale_ub) / qmax, 1 / (qmax * 512))` and `y / scale`; int8 scale
    `amax / 127` and `y * (127 / amax)` (0 for amax 0). Per group: scale
    `max(amax, 1e-10) / qmax` (UE8M0: rounded up to a power of two), `y / scale`, int8 rounded
    to nearest even (vLLM's fused norm-quant kernel does; its Triton group quantizer truncates,
    with twice the error). Dynamic scales have shape y.shape[:-1] + (1,) or (N // group_size,).

    quantizer="vllm_fused": the formulas of vLLM's fused norm-quant kernels instead, for the
    dynamic modes: scale `max(min(amax, scale_ub) / qmax, floor)`, floor `1 / (qmax * 512)`
    for fp8 and FLT_EPSILON for int8, per row and per group; `y / scale` for fp8 rows, else
    `y * (1 / scale)`; a NaN becomes +qmax (fp8) or 0 (int8) in both modes."""
    if quantizer not in QUANTIZERS:
        raise ValueError(f"quantizer must be one of {QUANTIZERS}, got {quantizer!r}")
    yf = y.float()
    qmax = quant_max(quant_dtype)
    int8 = quant_dtype == torch.int8
    if scale is not None:
        s = scale.float().reshape(())
        if int8:
            return _to_format(_div(yf, s), quant_dtype, 0.0), scale
        return _to_format(yf * _div(torch.ones_like(s), s), quant_dtype, qmax), scale
    if quantizer == "vllm_fused":
        return _quantize_fused(yf, quant_dtype, group_size, scale_ub, use_ue8m0)
    if group_size is None:
        amax = _abs_max(yf, -1)
        if int8:
            inverse = torch.where(amax == 0, 0.0, _div(torch.full_like(amax, 127.0), amax))
            return _to_format(yf * inverse, quant_dtype, 0.0), _div(amax, 127.0)
        amax = _bounded(amax, scale_ub)
        s = torch.maximum(_div(amax, qmax), _div(torch.ones_like(amax), qmax * 512.0))
        return _to_format(_div(yf, s), quant_dtype, qmax), s
    groups = yf.reshape(*yf.shape[:-1], yf.shape[-1] // group_size, group_size)
    s = _div(_abs_max(groups, -1).clamp(min=GROUP_EPS), qmax)
    if use_ue8m0:
        s = ue8m0(s)
    qmin = -128.0 if int8 else -qmax
    q = _to_format(_div(groups, s), quant_dtype, qmin)
    return q.reshape(yf.shape), s.squeeze(-1)


def _bounded(amax, scale_ub):
    """min(amax, scale_ub); fmin: a NaN bound bounds nothing (vLLM's fminf; the kernels'
    min.f32)."""
    if scale_ub is None:
        return amax
    return torch.fmin(amax, scale_ub.float().reshape(()))


def _quantize_fused(yf, quant_dtype, group_size, scale_ub, use_ue8m0):
    qmax = quant_max(quant_dtype)
    int8 = quant_dtype == torch.int8
    floor = torch.finfo(torch.float32).eps if int8 else 1.0 / (qmax * 512.0)
    nan_out = 0.0 if int8 else qmax
    if group_size is None:
        v = yf
    else:
        v = yf.reshape(*yf.shape[:-1], yf.shape[-1] // group_size, group_size)
    amax = _bounded(_abs_max(v, -1), scale_ub)
    s = torch.maximum(_div(amax, qmax), torch.tensor(floor, dtype=torch.float32,
                                                     device=yf.device))
    if use_ue8m0:
        s = ue8m0(s)
    if group_size is None and not int8:
        q = _div(v, s)
    else:
        q = v * _div(torch.ones_like(s), s)
    q = _to_format(q, quant_dtype, nan_out).reshape(yf.shape)
    return q, (s if group_size is None else s.squeeze(-1))
