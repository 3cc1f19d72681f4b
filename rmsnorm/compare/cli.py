"""rmsnorm-compare: which RMSNorm recipe another kernel computes, and where it departs from it.

The candidate is one of:
  --impl package.module:function   a norm to import and call on generated inputs (or
                                   path/to/file.py:function); --convention says how it is
                                   called (functional, hf, out_first, inplace: see
                                   rmsnorm/compare/adapters.py), --kwarg passes keywords
  --tensors file.pt|file.safetensors   saved inputs and the candidate's outputs: x, weight
                                   (optional), residual (optional), y, residual_out (optional)
  --recipe NAME|axis=value,...     a point of the recipe space itself (a planted candidate,
                                   to see what the tool reports)

Generated inputs (not with --tensors) mix rows that separate the axes: normal, outliers,
constant, tiny (mean square near eps) and midpoints (x * rstd on rounding midpoints); --kinds
picks some. Prints the table of recipes evaluated and the summary; --json and --plot write the
report. Exit status: 0 when diagnosed (whatever the verdict), 1 when the candidate fails, 2 for
bad arguments.
"""

import argparse
import os
import sys

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def prog_name():
    name = os.path.basename(sys.argv[0])
    return name if name.startswith("rmsnorm-") else "python -m rmsnorm.compare"


def parse_args(argv=None):
    from rmsnorm.compare import adapters, inputs

    p = argparse.ArgumentParser(prog=prog_name(), description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--impl", metavar="MODULE:FUNCTION", help="the candidate to import")
    src.add_argument("--tensors", metavar="FILE", help=".pt or .safetensors with x, weight, "
                     "residual, y, residual_out")
    src.add_argument("--recipe", metavar="SPEC", help="a named recipe or axis=value,... as "
                     "the candidate")
    p.add_argument("--convention", default="functional", choices=sorted(adapters.CONVENTIONS),
                   help="how --impl is called (default: functional)")
    p.add_argument("--kwarg", action="append", default=[], metavar="KEY=VALUE",
                   help="a keyword for --impl (VALUE a Python literal), e.g. "
                        "casting_mode='gemma'")
    p.add_argument("--shapes", nargs="+", default=["40x64"], metavar="MxN",
                   help="generated input shapes (default: 40x64)")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--residual", action="store_true", help="a residual (fused add)")
    p.add_argument("--no-weight", action="store_true", help="no weight")
    p.add_argument("--weight-dtype", default="fp32", choices=["fp32", "input"],
                   help="the generated weight's dtype (default fp32, which separates the "
                        "weight axis with offset 0; 'input' for kernels needing one dtype)")
    p.add_argument("--eps", type=float, default=None, help="default 1e-6 (or the file's)")
    p.add_argument("--offset", type=float, default=0.0, help="1 for Gemma's 1 + w")
    p.add_argument("--kinds", default="mixed",
                   help=f"row kinds, comma-separated, of {', '.join(inputs.KINDS)} "
                        "(default: mixed, all of them)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="where the candidate runs (cpu, cuda)")
    p.add_argument("--worst", type=int, default=5, help="worst elements to print")
    p.add_argument("--json", metavar="PATH", help="write the report(s) as JSON")
    p.add_argument("--plot", metavar="PATH", help="write a PNG (one per shape: _MxN added "
                   "when there are several)")
    args = p.parse_args(argv)
    try:
        args.shapes = [_shape(s) for s in args.shapes]
        args.kwargs = dict(_kwarg(k) for k in args.kwarg)
    except ValueError as e:
        p.error(str(e))
    if args.kinds != "mixed":
        args.kinds = tuple(k.strip() for k in args.kinds.split(","))
    return args


def _shape(text):
    try:
        m, n = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"--shapes: {text!r} is not MxN") from None
    return m, n


def _kwarg(text):
    import ast

    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise ValueError(f"--kwarg must be KEY=VALUE, got {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value  # a bare word: the string itself


def main(argv=None):
    args = parse_args(argv)
    from rmsnorm.compare import CandidateError

    try:
        cases = list(_cases(args))
        reports = [_diagnose(args, case) for case in cases]
    except CandidateError as e:
        print(f"{prog_name()}: {e}", file=sys.stderr)
        return 1
    except (ValueError, TypeError, KeyError, OSError, ImportError) as e:
        print(f"{prog_name()}: error: {e}", file=sys.stderr)
        return 2
    for (label, _), report in zip(cases, reports):
        print(f"== {label}")
        print(report.table())
        if report.worst:
            print("\nworst elements (row, column: candidate / recipe / float64, ulps):")
            for w in report.worst[:args.worst]:
                print(f"  {w['row']}, {w['column']}: {w['candidate']:.6g} / {w['recipe']:.6g}"
                      f" / {w['float64']:.6g}, {w['ulps']:g}")
        print()
        print(report.summary())
        print()
    if args.json:
        import json

        docs = [dict(r.as_dict(), case=label) for (label, _), r in zip(cases, reports)]
        from rmsnorm.compare.report import _finite

        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(_finite(docs if len(docs) > 1 else docs[0]), f, indent=2)
            f.write("\n")
    if args.plot:
        for (label, _), r in zip(cases, reports):
            path = args.plot
            if len(reports) > 1:
                stem, ext = os.path.splitext(args.plot)
                path = f"{stem}_{label.split()[0]}{ext or '.png'}"
            r.plot(path)
    return 0


def _cases(args):
    """(label, (x, weight, residual, eps, y, residual_out)) per case."""
    from rmsnorm.compare import inputs

    if args.tensors:
        t = _load_tensors(args.tensors)
        eps = args.eps if args.eps is not None else float(t.get("eps", 1e-6))
        x = t["x"]
        yield (f"{'x'.join(map(str, x.shape))} {args.tensors}",
               (x, t.get("weight"), t.get("residual"), eps, t["y"], t.get("residual_out")))
        return
    dtype = DTYPES[args.dtype]
    eps = 1e-6 if args.eps is None else args.eps
    for i, shape in enumerate(args.shapes):
        x, w, r = inputs.generate(
            shape, dtype, weight=not args.no_weight, residual=args.residual,
            weight_dtype=None if args.weight_dtype == "fp32" else dtype, eps=eps,
            kinds=args.kinds, seed=args.seed + i, device=args.device)
        yield f"{shape[0]}x{shape[1]} {args.dtype}", (x, w, r, eps, None, None)


def _load_tensors(path):
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        t = load_file(path)
    else:
        t = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(t, dict):
        raise ValueError(f"--tensors: {path} must hold a dict of tensors")
    missing = [k for k in ("x", "y") if k not in t]
    if missing:
        raise ValueError(f"--tensors: {path} has no {' or '.join(missing)} (keys: x, weight, "
                         f"residual, y, residual_out)")
    return t


def _candidate(args):
    from rmsnorm.compare import adapters, space

    if args.recipe:
        r = space.recipe(args.recipe)

        def planted(x, weight, eps, residual=None):
            ev = space.evaluate(r, x.cpu(), None if weight is None else weight.cpu(), eps,
                                residual=None if residual is None else residual.cpu(),
                                offset=args.offset)
            return ev.y if residual is None else (ev.y, ev.residual_out)
        return planted
    return adapters.adapt(adapters.load(args.impl), args.convention, **args.kwargs)


def _diagnose(args, case):
    from rmsnorm.compare import diagnose

    _, (x, w, r, eps, y, residual_out) = case
    if y is not None:
        return diagnose(None, x, w, eps, residual=r, offset=args.offset, y=y,
                        residual_out=residual_out, worst=args.worst)
    return diagnose(_candidate(args), x, w, eps, residual=r, offset=args.offset,
                    worst=args.worst)


if __name__ == "__main__":
    sys.exit(main())
