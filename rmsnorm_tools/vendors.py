"""vLLM's and FlashInfer's own RMSNorm kernels, called from PyTorch tensors through ctypes.

The kernels come prebuilt (sm_90a) as torch-free shared libraries with a C entry point each:
libvllm_norm.so (vLLM 0.33.0's layernorm and fused norm-quant kernels with their host launch
code) and libfi_norm.so (FlashInfer 0.6.18's norm.cuh, bf16). They are not part of rmsnorm:
put a folder holding vllm/ and flashinfer/ at build/peers (ignored by git), or name it in
RMSNORM_PEERS. The wrappers allocate outputs as vllm/_custom_ops.py and flashinfer's Python
functions do, pass torch's current stream (so CUDA graphs capture the launch) and raise on a
failed launch with the library's message.
"""

import ctypes
import os

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# torch ScalarType codes, as the vLLM entry points take dtypes.
_SCALAR_TYPE = {torch.float16: 5, torch.float32: 6, torch.bfloat16: 15,
                torch.float8_e4m3fn: 24, torch.int8: 1}
_VP, _I64, _INT, _DBL, _U32, _F32 = (ctypes.c_void_p, ctypes.c_int64, ctypes.c_int,
                                     ctypes.c_double, ctypes.c_uint32, ctypes.c_float)


def peers_dir():
    return os.environ.get("RMSNORM_PEERS") or os.path.join(ROOT, "build", "peers")


def _load(sub, names, what, signatures):
    """The first of `names` in peers_dir()/sub that loads, its entry points in `signatures`
    typed (each returns an int status); FileNotFoundError naming `what` if none loads."""
    errors = []
    for name in names:
        path = os.path.join(peers_dir(), sub, name)
        if not os.path.exists(path):
            errors.append(f"no {path}")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        for fn_name, argtypes in signatures.items():
            fn = getattr(lib, fn_name)
            fn.argtypes, fn.restype = argtypes, _INT
        return lib
    raise FileNotFoundError(f"{what}: {'; '.join(errors)}")


def _stream():
    return torch.cuda.current_stream().cuda_stream


def _rows(t, name):
    if t.dim() != 2 or t.stride(1) != 1:
        raise ValueError(f"{name} must be a 2-D tensor with contiguous rows")
    return t.shape


def _ptr(t):
    return None if t is None else t.data_ptr()


class Vllm:
    """vLLM's RMSNorm ops, with the names and argument order of torch.ops._C."""

    _SIGNATURES = {
        "vllm_rms_norm": [_VP, _VP, _VP, _DBL, _I64, _I64, _I64, _INT, _VP],
        "vllm_fused_add_rms_norm": [_VP, _VP, _VP, _DBL, _I64, _I64, _I64, _I64, _INT, _VP],
        "vllm_rms_norm_static_fp8_quant": [_VP, _VP, _VP, _VP, _DBL, _I64, _I64, _I64, _INT,
                                           _INT, _VP],
        "vllm_fused_add_rms_norm_static_fp8_quant": [_VP, _VP, _VP, _VP, _VP, _DBL, _I64, _I64,
                                                     _I64, _INT, _INT, _VP],
        "vllm_rms_norm_dynamic_per_token_quant": [_VP, _VP, _VP, _VP, _DBL, _VP, _VP, _I64,
                                                  _I64, _I64, _INT, _INT, _VP],
        "vllm_rms_norm_per_block_quant": [_VP, _VP, _VP, _VP, _DBL, _VP, _VP, _I64, _INT, _I64,
                                          _I64, _I64, _I64, _INT, _INT, _VP],
    }

    def __init__(self):
        lib = _load("vllm", ("libvllm_norm.so", "libvllm_norm_cudart_shared.so"),
                    "vLLM's kernels", self._SIGNATURES)
        lib.vllm_error_string.argtypes, lib.vllm_error_string.restype = [_INT], ctypes.c_char_p
        lib.vllm_last_error_message.restype = ctypes.c_char_p
        lib.vllm_build_info.restype = ctypes.c_char_p
        lib.vllm_batch_invariant.restype = _INT
        self.lib = lib
        self.info = lib.vllm_build_info().decode()
        self.batch_invariant = bool(lib.vllm_batch_invariant())

    def _check(self, status, op):
        if status == -1:
            raise RuntimeError(f"vllm {op}: {self.lib.vllm_last_error_message().decode()}")
        if status:
            raise RuntimeError(f"vllm {op}: {self.lib.vllm_error_string(status).decode()}")

    def rms_norm(self, out, x, weight, eps):
        m, n = _rows(x, "x")
        self._check(self.lib.vllm_rms_norm(out.data_ptr(), x.data_ptr(), _ptr(weight), eps, m, n,
                                           x.stride(0), _SCALAR_TYPE[x.dtype], _stream()),
                    "rms_norm")

    def fused_add_rms_norm(self, x, residual, weight, eps):
        """In place: residual <- x + residual, x <- the norm of it."""
        m, n = _rows(x, "x")
        _rows(residual, "residual")
        self._check(self.lib.vllm_fused_add_rms_norm(
            x.data_ptr(), residual.data_ptr(), _ptr(weight), eps, m, n, x.stride(0),
            residual.stride(0), _SCALAR_TYPE[x.dtype], _stream()), "fused_add_rms_norm")

    def rms_norm_static_fp8_quant(self, out, x, weight, scale, eps):
        m, n = _rows(x, "x")
        self._check(self.lib.vllm_rms_norm_static_fp8_quant(
            out.data_ptr(), x.data_ptr(), weight.data_ptr(), scale.data_ptr(), eps, m, n,
            x.stride(0), _SCALAR_TYPE[x.dtype], _SCALAR_TYPE[out.dtype], _stream()),
            "rms_norm_static_fp8_quant")

    def fused_add_rms_norm_static_fp8_quant(self, out, x, residual, weight, scale, eps):
        """residual <- x + residual (x untouched), out <- the norm of it, quantized."""
        m, n = _rows(x, "x")
        self._check(self.lib.vllm_fused_add_rms_norm_static_fp8_quant(
            out.data_ptr(), x.data_ptr(), residual.data_ptr(), weight.data_ptr(),
            scale.data_ptr(), eps, m, n, x.stride(0), _SCALAR_TYPE[x.dtype],
            _SCALAR_TYPE[out.dtype], _stream()), "fused_add_rms_norm_static_fp8_quant")

    def rms_norm_dynamic_per_token_quant(self, out, x, weight, scales, eps, scale_ub=None,
                                         residual=None):
        m, n = _rows(x, "x")
        self._check(self.lib.vllm_rms_norm_dynamic_per_token_quant(
            out.data_ptr(), x.data_ptr(), weight.data_ptr(), scales.data_ptr(), eps,
            _ptr(scale_ub), _ptr(residual), m, n, x.stride(0), _SCALAR_TYPE[x.dtype],
            _SCALAR_TYPE[out.dtype], _stream()), "rms_norm_dynamic_per_token_quant")

    def rms_norm_per_block_quant(self, out, x, weight, scales, eps, scale_ub, residual,
                                 group_size, is_scale_transposed):
        m, n = _rows(x, "x")
        self._check(self.lib.vllm_rms_norm_per_block_quant(
            out.data_ptr(), x.data_ptr(), weight.data_ptr(), scales.data_ptr(), eps,
            _ptr(scale_ub), _ptr(residual), group_size, int(is_scale_transposed),
            scales.stride(1), m, n, x.stride(0), _SCALAR_TYPE[x.dtype],
            _SCALAR_TYPE[out.dtype], _stream()), "rms_norm_per_block_quant")


class FlashInfer:
    """FlashInfer's norms (bf16 only in this build), as flashinfer.norm's functions."""

    _SIGNATURES = {name: [_VP, _VP, _VP, _U32, _U32, _U32, _U32, _F32, _INT, _VP] for name in (
        "fi_rmsnorm_bf16", "fi_gemma_rmsnorm_bf16", "fi_fused_add_rmsnorm_bf16",
        "fi_gemma_fused_add_rmsnorm_bf16")}

    def __init__(self):
        lib = _load("flashinfer", ("libfi_norm.so", "libfi_norm_cudart_shared.so"),
                    "FlashInfer's kernels", self._SIGNATURES)
        lib.fi_error_string.argtypes, lib.fi_error_string.restype = [_INT], ctypes.c_char_p
        lib.fi_build_info.restype = ctypes.c_char_p
        self.lib = lib
        self.info = lib.fi_build_info().decode()

    def _check(self, status, op):
        if status:
            raise RuntimeError(f"flashinfer {op}: {self.lib.fi_error_string(status).decode()}")

    @staticmethod
    def _bf16(x):
        if x.dtype != torch.bfloat16:
            raise TypeError("this FlashInfer build has bf16 kernels only")

    def rmsnorm(self, x, weight, eps=1e-6, out=None, enable_pdl=False, gemma=False):
        self._bf16(x)
        m, n = _rows(x, "x")
        out = torch.empty_like(x) if out is None else out
        fn = self.lib.fi_gemma_rmsnorm_bf16 if gemma else self.lib.fi_rmsnorm_bf16
        self._check(fn(x.data_ptr(), weight.data_ptr(), out.data_ptr(), m, n, x.stride(0),
                       out.stride(0), eps, int(enable_pdl), _stream()), "rmsnorm")
        return out

    def fused_add_rmsnorm(self, x, residual, weight, eps=1e-6, enable_pdl=False, gemma=False):
        """In place: residual <- x + residual, x <- the norm of it."""
        self._bf16(x)
        m, n = _rows(x, "x")
        fn = self.lib.fi_gemma_fused_add_rmsnorm_bf16 if gemma else \
            self.lib.fi_fused_add_rmsnorm_bf16
        self._check(fn(x.data_ptr(), residual.data_ptr(), weight.data_ptr(), m, n, x.stride(0),
                       residual.stride(0), eps, int(enable_pdl), _stream()), "fused_add_rmsnorm")


def available():
    """(Vllm or None, FlashInfer or None, why-not text): what loads here."""
    if not torch.cuda.is_available():
        return None, None, "no CUDA device"
    found, why = [], []
    for cls in (Vllm, FlashInfer):
        try:
            found.append(cls())
        except (FileNotFoundError, OSError) as e:
            found.append(None)
            why.append(str(e))
    return found[0], found[1], "; ".join(why)
