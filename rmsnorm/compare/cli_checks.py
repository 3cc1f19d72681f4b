"""rmsnorm-compare's checks of what argparse cannot see, made before anything runs: a report
must not be computed and printed only to fail on writing it, and an unusable device or shape
is bad input (exit 2), not a candidate that failed (exit 1).

Each raises ValueError naming the argument; the CLI prints it as one line.
"""

import os

import torch

# Peak memory of a diagnosis per element of x, measured at 216-343 bytes (bf16, 1000-4000 rows
# of 1024, with and without a residual): every recipe evaluated stays in memory for the report,
# with fp32 and float64 copies. The lower end, so that only shapes that cannot fit are refused.
BYTES_PER_ELEMENT = 200


def check(args):
    check_device(args.device)
    if not args.tensors:
        for shape in args.shapes:
            check_shape(shape)
    for option in ("json", "plot"):
        path = getattr(args, option)
        if path is not None:
            check_writable(f"--{option}", path)
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ValueError("--plot needs matplotlib (pip install matplotlib)") from None


def check_device(text):
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise ValueError(f"--device {text!r} is not a device (cpu, cuda, cuda:1, ...)") from None
    try:
        torch.zeros(1, device=device).cpu()
    except Exception as e:  # a CPU build of torch asserts; no driver, a bad index, meta raise
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"--device {text}: unusable here ({reason})") from None


def check_shape(shape):
    from rmsnorm.compare import inputs

    m, n = shape
    try:
        inputs.check_shape(shape)
    except ValueError as e:
        raise ValueError(f"--shapes {m}x{n}: {e}") from None
    need = m * n * BYTES_PER_ELEMENT
    have = _memory()
    if have is not None and need > have:
        raise ValueError(f"--shapes {m}x{n}: diagnosing it needs about {need / 2 ** 30:.3g} GiB "
                         f"({BYTES_PER_ELEMENT} bytes an element), more than this machine's "
                         f"{have / 2 ** 30:.3g} GiB")


def _memory():
    """Bytes of physical memory, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def check_writable(option, path):
    if os.path.isdir(path):
        raise ValueError(f"{option} {path} is a folder; give a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"{option} {path}: no folder {folder}")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{option} {path}: folder {folder} is not writable")
