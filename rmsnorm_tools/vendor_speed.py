"""vLLM's and FlashInfer's kernels beside rmsnorm's, timed in one run: for each vendor op and
shape, the vendor kernel, rmsnorm under the vendor's preset (recipe="vllm" / "flashinfer")
and rmsnorm's default options, each as % of a device-to-device copy of the same bytes.

    python -m rmsnorm_tools.vendor_speed [--shapes 16384x4096,1x4096] [--ops tok_fp8,...]

Shapes of 256 rows or fewer are decode steps: per call of a CUDA graph of calls, inputs warm
in L2 (bench.graph_ms_per_call); larger ones single calls after an L2 flush (bench.bench_ms).
Preset calls whose options differ from the defaults run through the Python launcher: under
a CUDA graph its host time is not in the figure, as the compiled path's is not.
Needs a GPU and the vendor libraries (rmsnorm_tools.vendors).
"""

import argparse
import sys
from functools import partial

import torch

import rmsnorm
from rmsnorm_tools import bench, vendors
from rmsnorm_tools.vendor_bits import EPS, inputs, m_n, parse_quant_op

OPS = ("rms", "add", "static_fp8", "add_static_fp8", "tok_fp8", "tok_int8", "add_tok_fp8",
       "grp128_fp8", "grp128_int8", "add_grp128_fp8", "fi_rms", "fi_add")
SHAPES = ((16384, 4096), (32768, 2048), (4096, 8192), (1, 4096), (64, 4096), (256, 8192))


def calls(vl, fi, op, x, r, w):
    """(moved bytes, {impl: callable}) of an op: the vendor's kernel, rmsnorm's preset and its
    defaults, on preallocated outputs where the vendor writes in place."""
    m, n = x.shape
    io = x.element_size()
    if op in ("rms", "fi_rms"):
        recipe = "vllm" if op == "rms" else "flashinfer"
        out = torch.empty_like(x)
        vendor = (lambda: vl.rms_norm(out, x, w, EPS)) if op == "rms" else \
            (lambda: fi.rmsnorm(x, w, EPS, out=out))
        return 2 * m * n * io, {
            "vendor": vendor, "preset": lambda: rmsnorm.rms_norm(x, w, EPS, recipe=recipe),
            "default": lambda: rmsnorm.rms_norm(x, w, EPS)}
    if op in ("add", "fi_add"):
        recipe = "vllm" if op == "add" else "flashinfer"
        xv, rv = x.clone(), r.clone()
        vendor = (lambda: vl.fused_add_rms_norm(xv, rv, w, EPS)) if op == "add" else \
            (lambda: fi.fused_add_rmsnorm(xv, rv, w, EPS))
        return 4 * m * n * io, {
            "vendor": vendor,
            "preset": lambda: rmsnorm.fused_add_rms_norm(x, rv, w, EPS, recipe=recipe,
                                                         inplace=True),
            "default": lambda: rmsnorm.fused_add_rms_norm(x, rv, w, EPS, inplace=True)}
    fp8 = torch.float8_e4m3fn
    if op in ("static_fp8", "add_static_fp8"):
        add = op == "add_static_fp8"
        scale = torch.tensor([0.02], device=x.device)
        out = torch.empty(m, n, dtype=fp8, device=x.device)
        rv = r.clone()
        if add:
            vendor = partial(vl.fused_add_rms_norm_static_fp8_quant, out, x, rv, w, scale, EPS)
            ours = partial(rmsnorm.fused_add_rms_norm_quant, x, rv, w, EPS, scale=scale,
                           inplace=True)
        else:
            vendor = partial(vl.rms_norm_static_fp8_quant, out, x, w, scale, EPS)
            ours = partial(rmsnorm.rms_norm_quant, x, w, EPS, scale=scale)
        return m * n * ((3 if add else 1) * io + 1), {
            "vendor": vendor, "preset": lambda: ours(recipe="vllm"), "default": ours}
    add, group, qdtype = parse_quant_op(op)
    out = torch.empty(m, n, dtype=qdtype, device=x.device)
    scales = torch.empty(m, n // group if group else 1, device=x.device)
    rv = r.clone()
    res = rv if add else None
    if group is None:
        vendor = partial(vl.rms_norm_dynamic_per_token_quant, out, x, w, scales, EPS, None, res)
    else:
        vendor = partial(vl.rms_norm_per_block_quant, out, x, w, scales, EPS, None, res, group,
                         False)
    if add:
        ours = partial(rmsnorm.fused_add_rms_norm_quant, x, rv, w, EPS, quant_dtype=qdtype,
                       group_size=group, inplace=True)
    else:
        ours = partial(rmsnorm.rms_norm_quant, x, w, EPS, quant_dtype=qdtype, group_size=group)
    return m * n * ((3 if add else 1) * io + 1) + scales.numel() * 4, {
        "vendor": vendor, "preset": lambda: ours(recipe="vllm"), "default": ours}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default=",".join(m_n(s) for s in SHAPES))
    ap.add_argument("--ops", default=",".join(OPS))
    args = ap.parse_args(argv)
    vl, fi, why = vendors.available()
    if vl is None or fi is None:
        print(f"vendor_speed: needs both vendor libraries ({why})")
        return 2
    bench.DEVICE = "cuda"
    print("| op | shape | vendor us | preset us | default us | copy us | vendor % | "
          "preset % | default % |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape in (tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")):
        decode = shape[0] <= 256
        for op in args.ops.split(","):
            x, r, w = inputs("random", shape, torch.bfloat16, seed=1)
            nbytes, fns = calls(vl, fi, op, x, r, w)
            with torch.no_grad():
                if decode:
                    ms = {k: bench.graph_ms_per_call(f) for k, f in fns.items()}
                else:
                    ms = {k: bench.bench_ms(f) for k, f in fns.items()}
                copy = nbytes / bench.copy_gbps(nbytes, timing="graph" if decode
                                                else "median") / 1e6
            us = {k: v * 1e3 for k, v in ms.items()}
            cells = [f"{us[k]:.2f}" for k in ("vendor", "preset", "default")]
            pct = [f"{100 * copy / ms[k]:.1f}" for k in ("vendor", "preset", "default")]
            print(f"| {op} | {m_n(shape)} | {' | '.join(cells)} | {copy * 1e3:.2f} | "
                  f"{' | '.join(pct)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
