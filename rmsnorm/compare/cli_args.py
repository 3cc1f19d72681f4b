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
report. Exit status: 0 when diagnosed (whatever the verdict), 1 when the candidate fails (it
raised, or its y or residual_out is not a norm's output), 2 for bad input: an argument, the
--tensors file, a --device this torch cannot use, a shape too large for this machine, a --json
or --plot path that cannot be written (all checked before anything runs), with one line saying
which.
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
