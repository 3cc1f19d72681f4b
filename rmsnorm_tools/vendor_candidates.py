"""vLLM's and FlashInfer's kernels (rmsnorm_tools.vendors) as rmsnorm-compare candidates, for
`--impl rmsnorm_tools.vendor_candidates:<name>` with the convention each is written in:

    rmsnorm-compare --impl rmsnorm_tools.vendor_candidates:vllm_rms_norm --convention out_first \
        --weight-dtype input --device cuda [--residual with vllm_fused_add_rms_norm]

- out_first: vllm_rms_norm(out, x, w, eps); vllm_fused_add_rms_norm(x, residual, w, eps),
  in place (x <- y, residual <- the sum).
- inplace: flashinfer_rmsnorm(x, w, eps) -> y; flashinfer_fused_add_rmsnorm(x, residual, w,
  eps), in place (x <- y, residual <- the sum); the gemma_ forms scale by 1 + w (diagnose them
  with --offset 1).

The kernels take a weight of x's dtype (--weight-dtype input); FlashInfer's build is bf16
only. The quantized kernels are not candidates: rmsnorm-compare's space describes y, not
codes and scales (python -m rmsnorm_tools.vendor_bits classifies those row by row). Each
library is loaded on first use; a machine without it raises the loader's reason.
"""

import functools

from rmsnorm_tools import vendors


@functools.lru_cache(maxsize=None)
def _vllm():
    return vendors.Vllm()


@functools.lru_cache(maxsize=None)
def _flashinfer():
    return vendors.FlashInfer()


def vllm_rms_norm(out, x, weight, eps):
    _vllm().rms_norm(out, x, weight, eps)


def vllm_fused_add_rms_norm(x, residual, weight, eps):
    _vllm().fused_add_rms_norm(x, residual, weight, eps)


def flashinfer_rmsnorm(x, weight, eps):
    return _flashinfer().rmsnorm(x, weight, eps)


def flashinfer_fused_add_rmsnorm(x, residual, weight, eps):
    _flashinfer().fused_add_rmsnorm(x, residual, weight, eps)


def flashinfer_gemma_rmsnorm(x, weight, eps):
    return _flashinfer().rmsnorm(x, weight, eps, gemma=True)


def flashinfer_gemma_fused_add_rmsnorm(x, residual, weight, eps):
    _flashinfer().fused_add_rmsnorm(x, residual, weight, eps, gemma=True)
