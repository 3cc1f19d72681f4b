"""`python -m rmsnorm`: prints what serves rmsnorm's calls here (rmsnorm.status(), worded);
exits 1 when the op library did not load, since then every call raises."""

import sys

import rmsnorm
from rmsnorm.pytorch import status


def main():
    report = rmsnorm.status()
    print(f"rmsnorm {rmsnorm.__version__} ({rmsnorm.__file__})")
    print(status.describe(report))
    return 0 if "compiled_kernels_built" in report else 1


if __name__ == "__main__":
    sys.exit(main())
