"""Loads the op library (rmsnorm/_native/librmsnorm_torch.so: the rmsnorm ops registered with
PyTorch's dispatcher from C++, rmsnorm/pytorch/csrc) and registers the Python parts of the ops:
the Triton launcher's kernels (triton_ops) and the fake kernels (fake).

The library is part of the package: `pip install --no-build-isolation .` builds it, and
`bash scripts/test_cpp.sh` builds it in place for a checkout. Nothing else is looked for; when
it is missing or does not load (torch upgraded since the build, say), `error` says why and the
public functions raise it.
"""

import pathlib

import torch

NATIVE = pathlib.Path(__file__).resolve().parents[1] / "_native"
OPS_LIBRARY = NATIVE / "librmsnorm_torch.so"

# Why the op library is not loaded, or None when it is.
error = None


def _load():
    if not OPS_LIBRARY.exists():
        return (f"rmsnorm's torch ops are not built: {OPS_LIBRARY} does not exist. Install "
                "the package (pip install --no-build-isolation .) or, in a checkout, build it "
                "in place: bash scripts/test_cpp.sh")
    try:
        torch.ops.load_library(str(OPS_LIBRARY))
    except OSError as e:
        return (f"rmsnorm's torch ops did not load ({e}); they must be built against the torch "
                f"in use ({torch.__version__}): reinstall rmsnorm")
    from rmsnorm.pytorch import fake, triton_ops  # noqa: F401 (they register on import)
    return None


class NotLoaded:
    """Stands for an op when the library did not load: calling it raises why."""

    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"rmsnorm.{self.name}: {error}")


def op(name):
    """torch.ops.rmsnorm.<name>.default, or a NotLoaded when the library did not load."""
    return NotLoaded(name) if error else getattr(torch.ops.rmsnorm, name).default


error = _load()
