"""Which launch path serves PyTorch's eager inference calls (rms_norm, fused_add_rms_norm
without autograd, torch.compile or out=):

- "triton" (the default): the Python launcher (rmsnorm.launch.ops) launches the Triton kernels.
- "c": librmsnorm (cpp/, the same kernels compiled ahead of time) through a small C++
  extension (rmsnorm/pytorch/csrc/torch_ext.cpp), at a fraction of the host time per call. Calls it
  does not cover (mixed dtypes, float64, rows needing two strides, CPU tensors) and every
  other route (autograd, torch.compile, out=) stay on the Python launcher.

Choose with RMSNORM_BACKEND=c in the environment (read at import) or
rmsnorm.pytorch.backend.use("c").
"c" needs a CUDA build of PyTorch, a compiler, and the built library (bash scripts/test_cpp.sh
builds it at build/cpp/librmsnorm.so; RMSNORM_LIBRARY points elsewhere); the extension is
compiled on first use into build/torch_ext.
"""

import os
import pathlib

from rmsnorm.pytorch import clib

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAMES = ("triton", "c")

# The loaded extension when "c" is active, else None (functional.py reads it on every call).
ext = None
_active = "triton"


def active():
    """The backend in use: "triton" or "c"."""
    return _active


def use(name):
    """Switch backends; "c" builds or loads the extension, or raises saying why it cannot."""
    global ext, _active
    if name not in NAMES:
        raise ValueError(f"backend must be one of {NAMES}, got {name!r}")
    ext = _load() if name == "c" else None
    _active = name


def _load():
    import torch

    if torch.version.cuda is None or not torch.cuda.is_available():
        raise RuntimeError("the 'c' backend needs a CUDA build of PyTorch and a GPU")
    if not clib.available():
        raise RuntimeError(f"the 'c' backend needs librmsnorm: {clib.why_not()}")
    from torch.utils import cpp_extension

    libdir = str(clib.default_path().parent)
    build = ROOT / "build" / "torch_ext"
    build.mkdir(parents=True, exist_ok=True)
    return cpp_extension.load(
        name="rmsnorm_torch_ext",
        sources=[str(ROOT / "rmsnorm" / "pytorch" / "csrc" / "torch_ext.cpp")],
        extra_include_paths=[str(ROOT / "cpp" / "include")],
        extra_cflags=["-O2"],
        extra_ldflags=[f"-L{libdir}", "-l:" + clib.default_path().name, f"-Wl,-rpath,{libdir}"],
        with_cuda=True, build_directory=str(build), verbose=False)


if os.environ.get("RMSNORM_BACKEND", "triton") != "triton":
    use(os.environ["RMSNORM_BACKEND"])
