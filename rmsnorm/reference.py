"""Ground truth and the exact PyTorch recipes the kernels are held against.

- `float64_rms_norm`: the exact math in float64, no intermediate rounding (ground truth).
- `contract_rms_norm` / `contract_fused_add_rms_norm`: DESIGN.md's contract written in PyTorch
  ops, rounding where the contract rounds (rmsnorm.launch.contract, which CPU tensors run when
  Triton's interpreter is off; re-exported here).
- `hf_llama_rms_norm`, `hf_gemma_rms_norm`: the code of Hugging Face's LlamaRMSNorm and
  GemmaRMSNorm forward, verbatim in substance.
- `torch_rms_norm`: `torch.nn.functional.rms_norm`.
- `residual_add`: the unfused residual add of a pre-norm block, rounded to the residual dtype.
- `quantize`: vLLM's quantizers in PyTorch ops (rmsnorm.launch.quant_contract): what the
  quantized forward's output must equal bit for bit, applied to rms_norm's output; with
  `quantizer="vllm_fused"` the formulas of vLLM's fused norm-quant kernels instead.
- `contract_fused_add_rms_norm(..., normalized_sum="fp32")`: the fused add of vLLM's fused
  quantized kernels and FlashInfer's, which normalize the unrounded fp32 sum
  (tests/quant/test_vendor_kernels.py holds these recipes to the vendors' kernels).
- `contract_rms_norm_backward`: DESIGN.md's backward formulas in PyTorch ops (the CPU path
  without the interpreter); `float64_rms_norm` under autograd is the gradients' ground truth.
"""

import torch
import torch.nn.functional as F

from rmsnorm.launch.contract import (acc_dtype, contract_fused_add_rms_norm,  # noqa: F401
                                     contract_rms_norm, contract_rms_norm_backward, fp32,
                                     output_dtype, residual_add)
from rmsnorm.launch.quant_contract import quantize  # noqa: F401


def float64_rms_norm(x, weight=None, eps=1e-6, offset=0.0):
    v = x.double()
    y = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + fp32(eps))
    if weight is not None:
        y = y * (weight.double() + fp32(offset))
    return y


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
