"""The Triton releases rmsnorm is tested on, and what `import rmsnorm` does on another.

TESTED is the one statement of the range: pyproject.toml's `triton>=3.6,<3.10`, the releases
CI installs (requirements/ci.txt's pin and requirements/other-tritons.txt) and the README
follow it, and tests/aot/test_triton_versions.py holds them to it. torch 2.10 and 2.11 pin Triton
3.6, torch 2.12 and 2.13 pin 3.7; 3.8 and 3.9 are the newer releases the next torch brings.

On a Triton outside it (installed with --no-deps, or a nightly), import warns once and runs:
refusing would stop a user whose torch pins a newer Triton from running anything, while
the kernels may well work there. What is unchecked is said: the kernels' results on that
Triton's compiler and interpreter, and the AOT build's ABI (which fails by name if the
compiled kernels' parameters differ).
"""

import re
import warnings

# (major, minor) of the oldest and the newest tested release, both included.
TESTED = ((3, 6), (3, 9))


class UntestedTritonWarning(UserWarning):
    """Triton's version is outside the range rmsnorm is tested on (TESTED)."""


def _minor(version):
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m[1]), int(m[2])) if m else None


def tested_range():
    """The range as people write it: '3.6 to 3.9'."""
    (a, b), (c, d) = TESTED
    return f"{a}.{b} to {c}.{d}"


def is_tested(version):
    minor = _minor(version)
    return minor is not None and TESTED[0] <= minor <= TESTED[1]


def check(version):
    """Warns (UntestedTritonWarning) unless version is in the tested range."""
    if is_tested(version):
        return
    warnings.warn(
        f"rmsnorm: triton {version} is outside the range rmsnorm is tested on "
        f"({tested_range()}, the releases torch 2.10 to 2.13 pin and the newer ones); it runs, "
        "but its kernels' results on this Triton are unchecked. Install a tested Triton, or "
        "filter rmsnorm.UntestedTritonWarning to silence this.",
        UntestedTritonWarning, stacklevel=2)
