"""The AOT compile of a sample of the specializations, and the ABI check on each: the check a
Triton other than the one the full build runs on gets in CI (scripts/triton_check.sh).

    python -m rmsnorm.aot.sample [--arch 90] [--jobs N]

The sample holds, of every group of specializations that differ only in their launch table
row, the first row and the last: every kernel family, op, dtype, weight, casting mode,
backward flag, alignment class and quantized mode, format and group, each on the narrowest
row (a tile) and the widest (the looped path). Each is compiled as the full build compiles it
(rmsnorm.aot.build.compile_one), and its PTX parameter list is checked against the committed
ABI header (rmsnorm.aot.abi.check_parameters), as is the header itself. Nothing is cached or
written: a Triton whose compiler API, options or parameter lists changed fails here, by name.
"""

import argparse
import concurrent.futures
import os
import sys
import time

from rmsnorm.aot import abi, build as aot
from rmsnorm.aot.progress import Progress, duration


def _group(spec):
    fields = {f: getattr(spec, f) for f in spec.__dataclass_fields__ if f != "variant"}
    return tuple(sorted(fields.items()))


def sample(arch):
    """The first and the last launch table row of each group of arch's specializations that
    differ only in their row, in key order."""
    groups = {}
    for spec in aot.specs(arch):
        groups.setdefault(_group(spec), []).append(spec)
    picked = set()
    for specs in groups.values():
        rows = sorted(specs, key=lambda s: s.variant)
        picked.update((rows[0], rows[-1]))
    return sorted(picked, key=aot.Spec.key)


def _compile(args):
    spec, arch = args
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"  # as the full build compiles
    meta = aot.compile_one(spec, arch)
    return {k: meta[k] for k in ("name", "parameters")}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", type=int, default=90,
                   help="compute capability, major*10+minor (default: 90)")
    p.add_argument("--jobs", type=int, default=0, help="processes (0: all cores)")
    args = p.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        sys.exit("rmsnorm.aot.sample: TRITON_INTERPRET is set: Triton's interpreter compiles "
                 "nothing; run it without")
    import triton

    began = time.monotonic()
    abi.check_header()
    specs = sample(args.arch)
    total = len(aot.specs(args.arch))
    print(f"rmsnorm.aot.sample: {len(specs)} of the {total} specializations for "
          f"sm_{args.arch}, triton {triton.__version__}", file=sys.stderr, flush=True)
    progress = Progress(len(specs))
    metas = []
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(args.jobs or os.cpu_count() or 1,
                                                mp_context=ctx) as pool:
        for meta in pool.map(_compile, [(s, args.arch) for s in specs], chunksize=2):
            metas.append(meta)
            progress.step()
    abi.check_parameters(args.arch, specs, metas)
    print(f"rmsnorm.aot.sample: OK: {len(specs)} kernels for sm_{args.arch} compiled with "
          f"triton {triton.__version__} in {duration(time.monotonic() - began)}; each PTX "
          f"parameter list is the ABI header's ({', '.join(abi.FAMILIES)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
