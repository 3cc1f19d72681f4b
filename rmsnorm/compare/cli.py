"""rmsnorm-compare (python -m rmsnorm.compare): run the diagnosis of each case, print the reports,
write them as JSON and PNG. The options and exit statuses: rmsnorm/compare/cli_args.py (--help).
"""

import os
import sys

from rmsnorm.compare import cli_checks
from rmsnorm.compare.cli_args import DTYPES, parse_args, prog_name
from rmsnorm.compare.saved import load_tensors


def main(argv=None):
    args = parse_args(argv)
    from rmsnorm.compare import CandidateError

    try:
        cli_checks.check(args)
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
            print(f"\nworst elements (row, column: candidate / recipe / float64, ulps of "
                  f"{report.ulp_dtype} y):")
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
        t = load_tensors(args.tensors)
        eps = args.eps if args.eps is not None else t.get("eps", 1e-6)
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
