"""Benchmark CLI (GPU): rmsnorm against the same-bytes copy ceiling and PyTorch, in one run.

    python -m rmsnorm.bench                      # forward and fused add, bf16, the issue's shapes
    python -m rmsnorm.bench --dtype bf16 fp16 fp32 --op fwd --shapes 16384x4096 1024x65536
    python -m rmsnorm.bench --peers eager compile --json results.json
    python -m rmsnorm.bench --overhead        # host microseconds per call, decode shape

Every figure is the median of triton.testing.do_bench (L2 flushed before each repeat).
GB/s counts the fewest bytes an op must move: forward reads x and writes y (2*M*N elements),
fused add reads x and residual and writes y and the sum (4*M*N). The ceiling of a shape is a
device-to-device copy (dst.copy_(src)) moving the same bytes, timed the same way in the same
run; "% copy" is the op's GB/s over it.
"""

import argparse
import json
import sys

import torch
import torch.nn.functional as F

import rmsnorm
from rmsnorm import reference

SHAPES = [(16384, 4096), (65536, 4096), (16384, 8192), (8192, 16384), (4096, 32768),
          (32768, 2048), (131072, 128), (524288, 128), (1024, 65536), (256, 262144)]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
EPS = 1e-6


def bench_ms(fn, warmup=25, rep=100):
    import triton.testing

    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def moved_elements(op, m, n):
    return m * n * (2 if op == "fwd" else 4)


def make_inputs(op, m, n, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, n, device="cuda", dtype=dtype, generator=g)
    w = (torch.randn(n, device="cuda", generator=g) * 0.5 + 1).to(dtype)
    r = torch.randn(m, n, device="cuda", dtype=dtype, generator=g) if op == "add" else None
    return x, r, w


def copy_gbps(nbytes, warmup=25, rep=100):
    """The ceiling: a device-to-device copy of nbytes/2 each way."""
    src = torch.randn(nbytes // 4, device="cuda", dtype=torch.float16)
    dst = torch.empty_like(src)
    ms = bench_ms(lambda: dst.copy_(src), warmup, rep)
    return nbytes / ms / 1e6


def peer_fns(op, x, r, w, peers):
    """Callables of the peers asked for, by name."""
    fns = {}
    n = x.shape[-1]
    if op == "fwd":
        if "eager" in peers:
            fns["torch_eager"] = lambda: F.rms_norm(x, (n,), w, EPS)
            fns["hf_eager"] = lambda: reference.hf_llama_rms_norm(x, w, EPS)
        if "compile" in peers:
            c_frms = torch.compile(lambda a, b: F.rms_norm(a, (n,), b, EPS), dynamic=False)
            c_hf = torch.compile(reference.hf_llama_rms_norm, dynamic=False)
            fns["compile_Frms"] = lambda: c_frms(x, w)
            fns["compile_hf"] = lambda: c_hf(x, w, EPS)
    else:
        def add_norm(a, res, b):
            s = res + a
            return reference.hf_llama_rms_norm(s, b, EPS), s

        if "eager" in peers:
            fns["torch_eager"] = lambda: F.rms_norm(r + x, (n,), w, EPS)
        if "compile" in peers:
            c_add = torch.compile(add_norm, dynamic=False)
            fns["compile_hf"] = lambda: c_add(x, r, w)
    return fns


def ours(op, x, r, w):
    if op == "fwd":
        return lambda: rmsnorm.rms_norm(x, w, EPS)
    return lambda: rmsnorm.fused_add_rms_norm(x, r, w, EPS)


def host_us_per_call(fn, calls=200):
    """Host time per call of a short loop that does not fill the launch queue: what a caller
    waits for when the GPU work is smaller than the launch cost (decode)."""
    import time

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def overhead_table(dtype=torch.bfloat16, m=1, n=4096):
    rows = []
    for op in ("fwd", "add"):
        x, r, w = make_inputs(op, m, n, dtype)
        fns = {"rmsnorm": ours(op, x, r, w), **peer_fns(op, x, r, w, ["eager"])}
        for name, fn in fns.items():
            rows.append((op, name, host_us_per_call(fn)))
    lines = [f"| op | impl | host us per call ({m} x {n}, {str(dtype)[6:]}) |", "|---|---|---|"]
    lines += [f"| {op} | {name} | {us:.1f} |" for op, name, us in rows]
    return "\n".join(lines)


def run_shape(op, m, n, dtype, peers, warmup, rep):
    x, r, w = make_inputs(op, m, n, dtype)
    nbytes = moved_elements(op, m, n) * x.element_size()
    row = {"op": op, "dtype": str(dtype).replace("torch.", ""), "M": m, "N": n,
           "bytes": nbytes, "copy_gbps": copy_gbps(nbytes, warmup, rep), "impls": {}}
    impls = {"rmsnorm": ours(op, x, r, w), **peer_fns(op, x, r, w, peers)}
    for name, fn in impls.items():
        try:
            ms = bench_ms(fn, warmup, rep)
        except Exception as e:  # a peer that fails at a shape is reported, not fatal
            row["impls"][name] = {"error": f"{type(e).__name__}: {e}"[:200]}
            continue
        gbps = nbytes / ms / 1e6
        row["impls"][name] = {"us": ms * 1e3, "gbps": gbps,
                              "pct_copy": 100 * gbps / row["copy_gbps"]}
    del x, r, w
    torch.cuda.empty_cache()
    return row


def format_table(rows):
    names = []
    for row in rows:
        names += [k for k in row["impls"] if k not in names]
    head = ["op", "dtype", "M x N", "copy GB/s"] + [f"{k} GB/s (%copy, us)" for k in names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["op"], row["dtype"], f"{row['M']} x {row['N']}",
                 f"{row['copy_gbps']:.0f}"]
        for k in names:
            v = row["impls"].get(k)
            if v is None:
                cells.append("")
            elif "error" in v:
                cells.append("fails")
            else:
                cells.append(f"{v['gbps']:.0f} ({v['pct_copy']:.1f}%, {v['us']:.1f})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_shape(text):
    m, n = text.lower().split("x")
    return int(m), int(n)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m rmsnorm.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", nargs="+", choices=["fwd", "add"], default=["fwd", "add"])
    p.add_argument("--dtype", nargs="+", choices=list(DTYPES), default=["bf16"])
    p.add_argument("--shapes", nargs="+", type=parse_shape, default=SHAPES,
                   metavar="MxN")
    p.add_argument("--peers", nargs="*", choices=["eager", "compile"], default=["eager"])
    p.add_argument("--warmup", type=float, default=25, help="do_bench warm-up, ms")
    p.add_argument("--rep", type=float, default=100, help="do_bench repeats, ms")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--overhead", action="store_true",
                   help="only measure host time per call at a decode shape")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("rmsnorm.bench needs a CUDA GPU (timing the interpreter means nothing)")
    if args.overhead:
        print(overhead_table())
        return
    rows = []
    for op in args.op:
        for dt in args.dtype:
            for m, n in args.shapes:
                rows.append(run_shape(op, m, n, DTYPES[dt], args.peers, args.warmup,
                                      args.rep))
                print(format_table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "rows": rows}, f, indent=1)
    print(format_table(rows))


if __name__ == "__main__":
    main()
