"""How far rmsnorm's outputs are from vLLM's and FlashInfer's own kernels, bit for bit.

For each vendor op (rmsnorm_tools.vendors), dtype, shape and kind of input: the fraction of
rows where the vendor's recipe, computed in PyTorch ops on the same GPU, gives the vendor
kernel's bits (every output of the row: codes, scales, y, residual); where it does with
rstd one unit in the last place off, or 2 to MAX_ULPS units (the sum of squares in another
order); and where it does not at all (a misreading of the recipe). The same for rmsnorm's
kernels under the vendor's preset (recipe="vllm" or "flashinfer"), and the fractions of rows
and of elements where the preset's outputs differ from the vendor kernel's.

    python -m rmsnorm_tools.vendor_bits [--json PATH] [--shapes 1x4096,4096x4096]

Prints one line per case and a summary per op; needs a GPU and the vendor libraries
(rmsnorm_tools.vendors: build/peers or RMSNORM_PEERS).
"""

import argparse
import collections
import json
import os
import sys

import torch

import rmsnorm
from rmsnorm.launch import contract, quant_contract
from rmsnorm_tools import vendors

EPS = 1e-6
VLLM, FLASHINFER = "vllm", "flashinfer"  # the presets of rmsnorm.pytorch.recipes
KINDS = ("random", "outliers", "constant", "near_eps", "nan_inf")
SHAPES = ((1, 4096), (64, 4096), (4096, 4096), (256, 8192), (33, 5120), (16, 2048), (5, 4099))


def make_input(kind, m, n, dtype, seed, device="cuda"):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(m, n, generator=g, device=device)
    if kind == "outliers":
        idx = torch.randint(0, n, (m, max(1, n // 512)), generator=g, device=device)
        x.scatter_(1, idx, 300.0 * torch.sign(torch.randn(idx.shape, generator=g,
                                                          device=device)))
    elif kind == "constant":
        x = torch.full((m, n), 0.75, device=device) * (1 + torch.arange(m, device=device))[:, None]
    elif kind == "near_eps":
        x = x * 1e-3  # mean square 1e-6: eps weighs as much as the row
    elif kind == "nan_inf":
        x[0, n // 3] = float("nan")
        if m > 1:
            x[1, n // 2] = float("inf")
    return x.to(dtype)


def same_bits(a, b):
    """Elementwise: the same bits, or both NaN."""
    if a.dtype.is_floating_point and a.element_size() > 1:
        both_nan = torch.isnan(a.float()) & torch.isnan(b.float())
    else:
        both_nan = torch.zeros_like(a, dtype=torch.bool)
    ia = a.contiguous().view(torch.uint8 if a.element_size() == 1 else
                             {2: torch.int16, 4: torch.int32}[a.element_size()])
    ib = b.contiguous().view(ia.dtype)
    return (ia == ib) | both_nan


def frac_diff(a, b):
    # A count, not 1 - a float mean of the matches: CUDA's mean multiplies by 1/n in float32,
    # so 168960 ones (33 x 5120) averaged to 1 - 2^-24, a difference where there was none.
    return (~same_bits(a, b)).sum().item() / a.numel()


def _rstd(v, n, ulps=0):
    """The row's 1/rms as the vendors form it (the sum of squares divided by N, not
    torch.mean's multiply by 1 / N), moved by `ulps` units in the last place."""
    ss = (v * v).sum(-1, keepdim=True)
    r = torch.rsqrt(ss / torch.full_like(ss, float(n)) + contract.fp32(EPS))
    for _ in range(abs(ulps)):
        r = torch.nextafter(r, torch.full_like(r, float("inf") if ulps > 0 else 0.0))
    return r


def recipe_y(x, w, residual=None, casting_mode="llama", normalized_sum="rounded", ulps=0,
             offset=0.0):
    """(y, residual_out) of a recipe in PyTorch ops, rstd moved by `ulps`."""
    dtype = x.dtype
    res_out = None
    if residual is None:
        v = x.float()
    else:
        res_out = (x.float() + residual.float()).to(dtype)
        v = res_out.float() if normalized_sum == "rounded" else x.float() + residual.float()
    r = _rstd(v, x.shape[-1], ulps)
    wf = w.float() + offset
    if casting_mode == "llama":
        y = ((v * r).to(dtype).float() * wf).to(dtype)
    else:
        y = (v * r * wf).to(dtype)
    return y, res_out


def inputs(kind, shape, dtype, seed, device="cuda"):
    """(x, residual, weight) of a case."""
    m, n = shape
    x = make_input(kind, m, n, dtype, seed, device)
    r = make_input("random", m, n, dtype, seed + 1, device)
    g = torch.Generator(device=device).manual_seed(seed + 2)
    w = (1 + 0.1 * torch.randn(n, device=device, generator=g)).to(dtype)
    return x, r, w


def parse_quant_op(op):
    """"add_grp128_int8" -> (True, 128, torch.int8); "tok_fp8_ub" -> (False, None, e4m3)
    (vllm_case's suffixes: "_ub" a scale_ub, "_t" column-major group scales)."""
    add = op.startswith("add_")
    mode, fmt = (op[4:] if add else op).split("_")[:2]
    qdtype = torch.int8 if fmt == "int8" else torch.float8_e4m3fn
    return add, (None if mode == "tok" else int(mode[3:])), qdtype


def vllm_case(vl, op, x, r, w):
    """(vendor, preset, recipe): the outputs of vLLM's kernel, of rmsnorm's kernels with
    recipe="vllm", and recipe(ulps), vLLM's recipe in PyTorch ops with rstd moved by ulps;
    each a {field: tensor with rows first}."""
    m, n = x.shape
    fp8 = torch.float8_e4m3fn
    if op == "rms":
        out = torch.empty_like(x)
        vl.rms_norm(out, x, w, EPS)
        return ({"y": out}, {"y": rmsnorm.rms_norm(x, w, EPS, recipe=VLLM)},
                lambda k: {"y": recipe_y(x, w, casting_mode="gemma", ulps=k)[0]})
    if op == "add":
        xv, rv = x.clone(), r.clone()
        vl.fused_add_rms_norm(xv, rv, w, EPS)
        y, ro = rmsnorm.fused_add_rms_norm(x, r, w, EPS, recipe=VLLM)

        def recipe(k):
            y, ro = recipe_y(x, w, r, casting_mode="gemma", ulps=k)
            return {"y": y, "residual": ro}
        return {"y": xv, "residual": rv}, {"y": y, "residual": ro}, recipe
    if op in ("static_fp8", "add_static_fp8"):
        scale = torch.tensor([0.02], device=x.device)
        out = torch.empty(m, n, dtype=fp8, device=x.device)
        add = op == "add_static_fp8"

        def recipe(k):
            y, ro = recipe_y(x, w, r if add else None, casting_mode="gemma", ulps=k)
            got = {"q": quant_contract.quantize(y, fp8, scale=scale)[0]}
            if add:
                got["residual"] = ro
            return got
        if not add:
            vl.rms_norm_static_fp8_quant(out, x, w, scale, EPS)
            ours = rmsnorm.rms_norm_quant(x, w, EPS, scale=scale, recipe=VLLM)
            return {"q": out}, {"q": ours.out}, recipe
        rv = r.clone()
        vl.fused_add_rms_norm_static_fp8_quant(out, x, rv, w, scale, EPS)
        ours = rmsnorm.fused_add_rms_norm_quant(x, r, w, EPS, scale=scale, recipe=VLLM)
        return ({"q": out, "residual": rv}, {"q": ours.out, "residual": ours.residual_out},
                recipe)
    add, group, qdtype = parse_quant_op(op)
    # A bound below most rows' max |y| (about 4 for N(0, 1) rows): they saturate.
    scale_ub = torch.tensor([2.0], device=x.device) if op.endswith("_ub") else None
    transposed = op.endswith("_t")
    layout = {"transposed_scales": True} if transposed else {}
    rv = r.clone() if add else None
    out = torch.empty(m, n, dtype=qdtype, device=x.device)
    if group is None:
        scales = torch.empty(m, 1, device=x.device)
        vl.rms_norm_dynamic_per_token_quant(out, x, w, scales, EPS, scale_ub, rv)
    else:
        if transposed:
            scales = torch.empty(n // group, m, device=x.device).t()
        else:
            scales = torch.empty(m, n // group, device=x.device)
        vl.rms_norm_per_block_quant(out, x, w, scales, EPS, scale_ub, rv, group, transposed)
    vendor = {"q": out, "scales": scales}
    if add:
        vendor["residual"] = rv
        ours = rmsnorm.fused_add_rms_norm_quant(x, r, w, EPS, quant_dtype=qdtype,
                                                group_size=group, scale_ub=scale_ub,
                                                recipe=VLLM, **layout)
        preset = {"q": ours.out, "scales": ours.scales, "residual": ours.residual_out}
    else:
        ours = rmsnorm.rms_norm_quant(x, w, EPS, quant_dtype=qdtype, group_size=group,
                                      scale_ub=scale_ub, recipe=VLLM, **layout)
        preset = {"q": ours.out, "scales": ours.scales}

    def recipe(k):
        y, ro = recipe_y(x, w, r if add else None, casting_mode="llama",
                         normalized_sum="fp32", ulps=k)
        q, s = quant_contract.quantize(y, qdtype, group_size=group, scale_ub=scale_ub,
                                       quantizer="vllm_fused")
        got = {"q": q, "scales": s.reshape(scales.shape)}
        if add:
            got["residual"] = ro
        return got
    return vendor, preset, recipe


def flashinfer_case(fi, op, x, r, w):
    """As vllm_case, for FlashInfer's rmsnorm and fused_add_rmsnorm, and their Gemma forms
    (weight + 1: the preset with offset=1.0)."""
    gemma = "gemma" in op
    offset = 1.0 if gemma else 0.0
    if op in ("fi_rms", "fi_gemma_rms"):
        return ({"y": fi.rmsnorm(x, w, EPS, gemma=gemma)},
                {"y": rmsnorm.rms_norm(x, w, EPS, offset=offset, recipe=FLASHINFER)},
                lambda k: {"y": recipe_y(x, w, casting_mode="gemma", ulps=k,
                                         offset=offset)[0]})
    xv, rv = x.clone(), r.clone()
    fi.fused_add_rmsnorm(xv, rv, w, EPS, gemma=gemma)
    y, ro = rmsnorm.fused_add_rms_norm(x, r, w, EPS, offset=offset, recipe=FLASHINFER)

    def recipe(k):
        y, ro = recipe_y(x, w, r, casting_mode="gemma", normalized_sum="fp32", ulps=k,
                         offset=offset)
        return {"y": y, "residual": ro}
    return {"y": xv, "residual": rv}, {"y": y, "residual": ro}, recipe


def rows_equal(a, b):
    """Per row: every field's bits the same (NaNs as equal)."""
    ok = None
    for field, t in a.items():
        same = same_bits(t, b[field]).reshape(t.shape[0], -1).all(-1)
        ok = same if ok is None else ok & same
    return ok


# How far the vendor's rstd may be from the recipe's for its row to count as explained by the
# reduction order: its sum of squares of N fp32 terms in another order (per-thread strided
# runs, then a tree) differs by a few tens of ulps at most, rstd by half as many.
MAX_ULPS = 32


def rstd_ulps(outputs, recipe, max_ulps=MAX_ULPS):
    """For each of `outputs`, per row: the fewest units in the last place k (0 to max_ulps)
    by which rstd moved either way makes the recipe give the row's bits, or -1 where none
    does. recipe(k) is evaluated once for all the outputs."""
    found = [torch.full((next(iter(o.values())).shape[0],), -1, dtype=torch.int64,
                        device=next(iter(o.values())).device) for o in outputs]
    for k in range(max_ulps + 1):
        if all((f >= 0).all() for f in found):
            break
        candidates = [recipe(0)] if k == 0 else [recipe(k), recipe(-k)]
        for got, f in zip(outputs, found):
            hit = torch.zeros_like(f, dtype=torch.bool)
            for c in candidates:
                hit |= rows_equal(got, c)
            f[(f < 0) & hit] = k
    return found


def classify(vendor, preset, recipe, max_ulps=MAX_ULPS):
    """Row fractions of the vendor kernel's outputs: the recipe's bits; the recipe's with rstd
    1 ulp off; 2 to max_ulps off; none of these (the recipe misreads the kernel). The rows of
    the preset's outputs that none of these explain, the rows where the preset's outputs
    differ from the vendor's, and per field the fraction of elements that differ."""
    v, p = rstd_ulps([vendor, preset], recipe, max_ulps)
    out = {"rows_exact": (v == 0).float().mean().item(),
           "rows_rstd_ulp": (v == 1).float().mean().item(),
           "rows_rstd_ulps": (v >= 2).float().mean().item(),
           "rows_unexplained": (v < 0).float().mean().item(),
           "preset.rows_unexplained": (p < 0).float().mean().item(),
           "preset.rows_differ": (~rows_equal(vendor, preset)).float().mean().item()}
    for field, t in vendor.items():
        out[f"preset.{field}"] = frac_diff(t, preset[field])
    return out


VLLM_OPS = ("rms", "add", "static_fp8", "add_static_fp8", "tok_fp8", "tok_int8",
            "add_tok_fp8", "add_tok_int8", "tok_fp8_ub", "add_tok_fp8_ub", "grp64_fp8",
            "grp128_fp8", "grp128_int8", "grp64_int8", "add_grp64_fp8", "add_grp64_int8",
            "add_grp128_fp8", "add_grp128_int8", "grp128_fp8_t", "add_grp64_int8_t",
            "grp128_fp8_ub", "add_grp64_fp8_ub")
FI_OPS = ("fi_rms", "fi_add", "fi_gemma_rms", "fi_gemma_add")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "/tmp"),
                                                   "vendor_bits.json"))
    ap.add_argument("--shapes", default=None)
    ap.add_argument("--ops", default=None)
    args = ap.parse_args(argv)
    vl, fi, why = vendors.available()
    if vl is None and fi is None:
        print(f"vendor_bits: nothing to compare ({why})")
        return 2
    shapes = SHAPES if not args.shapes else tuple(
        tuple(int(v) for v in s.split("x")) for s in args.shapes.split(","))
    ops = args.ops.split(",") if args.ops else None
    rows, summary = [], collections.defaultdict(lambda: collections.defaultdict(list))
    seed = 0
    plan = []
    if vl is not None:
        plan += [(vllm_case, vl, op, d) for op in VLLM_OPS
                 for d in (torch.bfloat16, torch.float16)]
    if fi is not None:
        plan += [(flashinfer_case, fi, op, torch.bfloat16) for op in FI_OPS]
    for fn, lib, op, dtype in plan:
        if ops and op not in ops:
            continue
        for shape in shapes:
            if "grp" in op and shape[1] % 128:
                continue
            for kind in KINDS:
                seed += 3
                try:
                    x, r, w = inputs(kind, shape, dtype, seed)
                    result = classify(*fn(lib, op, x, r, w))
                except Exception as e:  # noqa: BLE001 - a row of the report, not a crash
                    print(f"{op} {dtype} {shape} {kind}: ERROR {type(e).__name__}: {e}")
                    continue
                row = {"op": op, "dtype": str(dtype).replace("torch.", ""),
                       "shape": list(shape), "kind": kind, **result}
                rows.append(row)
                for k, v in result.items():
                    summary[(op, row["dtype"])][k].append(v)
                cells = " ".join(f"{k}={v:.2e}" for k, v in result.items())
                print(f"{op:15s} {row['dtype']:8s} {m_n(shape):>10s} {kind:8s} {cells}",
                      flush=True)
    with open(args.json, "w") as f:
        json.dump({"vllm": getattr(vl, "info", None), "flashinfer": getattr(fi, "info", None),
                   "rows": rows}, f, indent=1)
    print("\n## against the vendor kernel, mean over cases (max): rows where the vendor's "
          f"recipe in PyTorch ops is exact, exact with rstd 1 ulp off, 2-{MAX_ULPS} ulps off, "
          "unexplained; "
          "preset.rows_unexplained: rows of rmsnorm's preset none of these explain; "
          "preset.rows_differ, preset.<field>: rows and elements where the preset's outputs "
          "differ from the vendor's")
    for (op, dtype), fields in summary.items():
        cells = "  ".join(f"{k} {sum(v) / len(v):.2e} ({max(v):.1e})"
                          for k, v in sorted(fields.items()))
        print(f"{op:15s} {dtype:8s} {cells}")
    return 0


def m_n(shape):
    return "x".join(str(v) for v in shape)


if __name__ == "__main__":
    sys.exit(main())
