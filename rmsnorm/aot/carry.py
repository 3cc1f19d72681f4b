"""Copies a local AOT build's cache entries for the current specs into a folder a device call
can carry (docs/DEVELOPING.md, "The GPU machine"): the build there then finds every kernel
instead of compiling them again (about 3 minutes of a call for sm_90).

    python -m rmsnorm.aot.carry --out build/cpp/aot --to build/aotcarry --archs 90
    # on the device, before scripts/test.sh (scripts/gpu_check.sh does it):
    mkdir -p build/cpp/aot && rm -rf build/cpp/aot/cache && cp -r build/aotcarry build/cpp/aot/cache

Kept out of rmsnorm/aot/build.py, whose source is part of every cache entry's name.
"""

import argparse
import pathlib
import shutil
import sys

from rmsnorm.aot import build as aot


def carry(out, dst, archs):
    """Copies the cubin and metadata of every current spec of archs from the build folder
    `out` into dst (replaced); returns how many entries it copied."""
    cache, dst = pathlib.Path(out) / "cache", pathlib.Path(dst)
    sources = aot._sources_hash()
    entries = sorted({aot._cache_path(cache, spec, arch, sources)
                      for arch in archs for spec in aot.specs(arch)})
    missing = [p for p in entries if not (p.exists() and p.with_suffix(".cubin").exists())]
    if missing:
        raise SystemExit(f"rmsnorm.aot.carry: {len(missing)} of {len(entries)} kernels are not "
                         f"in {cache} (first: {missing[0].name}); build them first: bash "
                         f"scripts/test_cpp.sh, or python -m rmsnorm.aot --out {out} --archs "
                         f"{' '.join(map(str, archs))}")
    if dst.exists():
        shutil.rmtree(dst)
    for path in entries:
        target = dst / path.relative_to(cache)
        target.parent.mkdir(parents=True, exist_ok=True)
        for f in (path, path.with_suffix(".cubin")):
            shutil.copyfile(f, target.with_suffix(f.suffix))
    return len(entries)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m rmsnorm.aot.carry",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="build/cpp/aot",
                   help="the AOT build folder (default: build/cpp/aot, scripts/test_cpp.sh's)")
    p.add_argument("--to", default="build/aotcarry", help="where to copy (default: %(default)s)")
    p.add_argument("--archs", nargs="+", type=int, default=[90],
                   help="compute capabilities (default: 90, the GPU machine's)")
    args = p.parse_args(argv)
    count = carry(args.out, args.to, sorted(set(args.archs)))
    print(f"rmsnorm.aot.carry: {count} kernels copied to {args.to}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
