"""Loads the op library (rmsnorm/_native/librmsnorm_torch.so: the rmsnorm ops registered with
PyTorch's dispatcher from C++, rmsnorm/pytorch/csrc) and registers the Python parts of the ops:
the Triton launcher's kernels (triton_ops) and the fake kernels (fake).

The library is part of the package: `pip install --no-build-isolation .` builds it, and
`bash scripts/build_native.sh` builds it in place for a checkout. Nothing else is looked for;
when it is missing or does not load (torch upgraded since the build, say), `error` says why and
the public functions raise it.
"""

import pathlib
import sys

import torch

PACKAGE = pathlib.Path(__file__).resolve().parents[1]
NATIVE = PACKAGE / "_native"
OPS_LIBRARY = NATIVE / "librmsnorm_torch.so"

# Why the op library is not loaded, or None when it is.
error = None


def missing(package=PACKAGE, search_path=None):
    """Why the op library of the rmsnorm at `package` is missing, and what to do about it."""
    library = package / "_native" / OPS_LIBRARY.name
    said = f"rmsnorm's torch ops are not built: {library} does not exist"
    root = package.parent
    if not all((root / name).exists() for name in ("pyproject.toml", "scripts/build_native.sh")):
        return f"{said}. Reinstall rmsnorm: pip install --no-build-isolation ."
    # A source tree: most often the checkout's root is the current folder, which Python searches
    # first, so it hides an installed rmsnorm that has its library.
    said += (f". This rmsnorm is the source tree at {root}, not an installed package; build its "
             "native part in place with bash scripts/build_native.sh (")
    said += ("under a minute with this CPU build of torch)" if torch.version.cuda is None else
             "with this CUDA build of torch it compiles the GPU kernels too, which takes longer: "
             "docs/DEVELOPING.md, \"Install cost\")")
    hidden = [str(p) for p in _other_packages(package, search_path) if (
        p / "_native" / OPS_LIBRARY.name).exists()]
    if hidden:
        said += (f", or run from outside {root} to import the installed rmsnorm it hides "
                 f"({hidden[0]})")
    return said


def _other_packages(package, search_path):
    for entry in sys.path if search_path is None else search_path:
        candidate = pathlib.Path(entry or ".").resolve() / "rmsnorm"
        if candidate != package and (candidate / "__init__.py").exists():
            yield candidate


def _load():
    if not OPS_LIBRARY.exists():
        return missing()
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
