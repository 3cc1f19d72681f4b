"""librmsnorm (the C library of cpp/) from the tests, through ctypes: the same AOT-compiled
Triton kernels launched by C on PyTorch CUDA tensors. A test helper, not part of the package:
C callers use rmsnorm.h, PyTorch callers the ops that link the library.

The library is looked for at $RMSNORM_LIBRARY, else in the package:
rmsnorm/_native/librmsnorm.so, which `pip install` (and, in a checkout, `bash
scripts/test_cpp.sh`) puts there. `available()` says whether it loaded, `why_not()` why not.
Calls take tensors already validated by rmsnorm.launch.ops (2-D rows: one row stride each).
"""

import ctypes
import functools
import os
import pathlib

import torch

import rmsnorm

DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
MODES = {"llama": 0, "gemma": 1}
NORMALIZED_SUMS = {"rounded": 0, "fp32": 1}


class Rows(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("stride", ctypes.c_int64), ("dtype", ctypes.c_int)]


class ForwardArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("rows", ctypes.c_int64),
                ("n", ctypes.c_int64), ("x", Rows), ("residual", Rows),
                ("residual_out", Rows), ("weight", ctypes.c_void_p),
                ("weight_dtype", ctypes.c_int), ("y", Rows), ("rstd", ctypes.c_void_p),
                ("eps", ctypes.c_float), ("offset", ctypes.c_float),
                ("casting_mode", ctypes.c_int), ("accumulation", ctypes.c_int),
                ("launch_flags", ctypes.c_uint), ("normalized_sum", ctypes.c_int),
                ("reserved", ctypes.c_uint32)]


class BackwardArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("rows", ctypes.c_int64),
                ("n", ctypes.c_int64), ("dy", Rows), ("x", Rows), ("dresidual", Rows),
                ("dx", Rows), ("rstd", ctypes.c_void_p), ("weight", ctypes.c_void_p),
                ("weight_dtype", ctypes.c_int), ("dw", ctypes.c_void_p),
                ("offset", ctypes.c_float), ("casting_mode", ctypes.c_int),
                ("accumulation", ctypes.c_int), ("launch_flags", ctypes.c_uint)]


class LibraryError(RuntimeError):
    pass


def default_path():
    env = os.environ.get("RMSNORM_LIBRARY")
    if env:
        return pathlib.Path(env)
    return pathlib.Path(rmsnorm.__file__).resolve().parent / "_native" / "librmsnorm.so"


@functools.lru_cache(maxsize=None)
def _load():
    path = default_path()
    if not path.exists():
        return None, f"{path} does not exist (build it: bash scripts/test_cpp.sh)"
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        return None, f"{path} did not load: {e}"
    status = ctypes.c_int
    for name, args in (("rmsnorm_forward", [ctypes.POINTER(ForwardArgs), ctypes.c_void_p]),
                       ("rmsnorm_fused_add_forward",
                        [ctypes.POINTER(ForwardArgs), ctypes.c_void_p]),
                       ("rmsnorm_backward_workspace_size",
                        [ctypes.POINTER(BackwardArgs), ctypes.POINTER(ctypes.c_size_t)]),
                       ("rmsnorm_backward", [ctypes.POINTER(BackwardArgs), ctypes.c_void_p,
                                             ctypes.c_size_t, ctypes.c_void_p]),
                       ("rmsnorm_fused_add_backward",
                        [ctypes.POINTER(BackwardArgs), ctypes.c_void_p, ctypes.c_size_t,
                         ctypes.c_void_p]),
                       ("rmsnorm_gpu_kernels", [ctypes.c_char_p, ctypes.c_size_t])):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, status
    lib.rmsnorm_last_error.restype = ctypes.c_char_p
    lib.rmsnorm_status_string.restype = ctypes.c_char_p
    lib.rmsnorm_status_string.argtypes = [ctypes.c_int]
    return lib, None


def available():
    return _load()[0] is not None


def why_not():
    return _load()[1]


def _lib():
    lib, why = _load()
    if lib is None:
        raise LibraryError(f"librmsnorm is not available: {why}")
    return lib


def _check(lib, status):
    if status != 0:
        raise LibraryError(f"librmsnorm: {lib.rmsnorm_status_string(status).decode()}: "
                           f"{lib.rmsnorm_last_error().decode()}")


def kernels():
    """Which compiled kernels serve the current device, e.g. "sm_90 cubins"."""
    lib = _lib()
    buf = ctypes.create_string_buffer(128)
    _check(lib, lib.rmsnorm_gpu_kernels(buf, len(buf)))
    return buf.value.decode()


def _rows(t):
    if t is None:
        return Rows(None, 0, 0)
    return Rows(t.data_ptr(), t.stride(0) if t.dim() == 2 else 0, DTYPES[t.dtype])


def _stream(device):
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def forward(x, weight, eps, offset, casting_mode, y, rstd=None, residual=None,
            residual_out=None, normalized_sum="rounded"):
    """y (and, fused, residual_out) from 2-D x [rows, n]; rstd: a [rows] fp32 tensor or None;
    normalized_sum: the fused add's ("rounded" or "fp32")."""
    lib = _lib()
    args = ForwardArgs(ctypes.sizeof(ForwardArgs), x.shape[0], x.shape[1], _rows(x),
                       _rows(residual), _rows(residual_out),
                       None if weight is None else weight.data_ptr(),
                       DTYPES[weight.dtype] if weight is not None else 0, _rows(y),
                       None if rstd is None else rstd.data_ptr(), eps, offset,
                       MODES[casting_mode], 0, 0, NORMALIZED_SUMS[normalized_sum])
    fn = lib.rmsnorm_fused_add_forward if residual is not None else lib.rmsnorm_forward
    _check(lib, fn(ctypes.byref(args), _stream(x.device)))


def backward(dy, x, weight, rstd, offset, casting_mode, dx, dw=None, dresidual=None):
    """dx (and dw when given) from 2-D dy, x [rows, n] and the forward's rstd."""
    lib = _lib()
    args = BackwardArgs(ctypes.sizeof(BackwardArgs), x.shape[0], x.shape[1], _rows(dy),
                        _rows(x), _rows(dresidual), _rows(dx), rstd.data_ptr(),
                        None if weight is None else weight.data_ptr(),
                        DTYPES[weight.dtype] if weight is not None else 0,
                        None if dw is None else dw.data_ptr(), offset, MODES[casting_mode], 0,
                        0)
    size = ctypes.c_size_t()
    _check(lib, lib.rmsnorm_backward_workspace_size(ctypes.byref(args), ctypes.byref(size)))
    workspace = torch.empty(max(1, size.value // 4), dtype=torch.float32, device=x.device)
    fn = lib.rmsnorm_fused_add_backward if dresidual is not None else lib.rmsnorm_backward
    _check(lib, fn(ctypes.byref(args), workspace.data_ptr(), size.value, _stream(x.device)))
