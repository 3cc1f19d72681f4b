"""The demo: rmsnorm's kernels against PyTorch, correctness and timing, as a small table.

On a GPU: real prefill and decode shapes, timed with triton.testing.do_bench against
torch.nn.functional.rms_norm and the HF LlamaRMSNorm recipe. Without one: the same kernels in
Triton's interpreter on the CPU, on small shapes (interpreter timings only show it runs).
A second table runs the quantized forward (norm to fp8, per-token and per-group scales)
against the unfused norm-then-quantize it replaces, which it must equal bit for bit.
"""

import argparse
import os
import statistics
import sys
import time


def _reexec_with_interpreter(argv):
    # Triton picks compiled vs interpreted when kernels are defined, at import: set the
    # switch, then start over.
    env = dict(os.environ, TRITON_INTERPRET="1")
    os.execve(sys.executable, [sys.executable, "-m", "rmsnorm_tools.demo", *argv], env)


def _time_us(fn, cuda):
    if cuda:
        from rmsnorm_tools.bench import bench_ms

        return bench_ms(fn) * 1e3
    fn()
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs) * 1e6


def parse_args(argv=None):
    from rmsnorm_tools.bench import prog_name

    p = argparse.ArgumentParser(
        prog=prog_name("rmsnorm_tools.demo"), description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status: 0 when every result is within the contract, 1 otherwise.")
    return p.parse_args(argv)


def main(argv=None):
    """`rmsnorm-demo` / `python -m rmsnorm_tools.demo`: prints the table, returns the exit
    status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parse_args(argv)  # --help (or a wrong argument) exits here, before anything runs
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and os.environ.get("TRITON_INTERPRET") != "1":
        _reexec_with_interpreter(argv)

    import torch.nn.functional as F

    import rmsnorm
    from rmsnorm import reference

    device = "cuda" if cuda else "cpu"
    dtype = torch.bfloat16
    if cuda:
        shapes = [("decode", 1, 4096), ("decode", 64, 4096), ("prefill", 16384, 4096),
                  ("prefill", 8192, 8192), ("qk-norm", 131072, 128), ("long", 1024, 65536)]
        where = f"GPU: {torch.cuda.get_device_name()}, compiled Triton kernels"
    else:
        shapes = [("decode", 1, 4096), ("prefill", 64, 1024), ("qk-norm", 256, 128)]
        where = "CPU: Triton interpreter (no GPU found); timings show it runs, not speed"
    print(f"rmsnorm {rmsnorm.__version__} demo, bf16, eps 1e-6. {where}\n")
    head = ("| shape | M x N | op | max rel err vs fp64 / 2^-8 | elems != recipe | "
            "rmsnorm us | F.rms_norm us | HF eager us |")
    print(head)
    print("|" + "---|" * head.count(" | ") + "---|")
    g = torch.Generator().manual_seed(0)
    failures = 0
    for label, m, n in shapes:
        x = torch.randn(m, n, generator=g).to(dtype).to(device)
        r = torch.randn(m, n, generator=g).to(dtype).to(device)
        w = (torch.randn(n, generator=g) * 0.5 + 1).to(dtype).to(device)
        with torch.no_grad():
            for op in ("norm", "add+norm"):
                if op == "norm":
                    y = rmsnorm.rms_norm(x, w)
                    src = x
                    fns = (lambda: rmsnorm.rms_norm(x, w),
                           lambda: F.rms_norm(x, (n,), w, 1e-6),
                           lambda: reference.hf_llama_rms_norm(x, w))
                else:
                    y, s = rmsnorm.fused_add_rms_norm(x, r, w)
                    src = reference.residual_add(x, r)
                    failures += not torch.equal(s, src)
                    fns = (lambda: rmsnorm.fused_add_rms_norm(x, r, w),
                           lambda: F.rms_norm(r + x, (n,), w, 1e-6),
                           lambda: reference.hf_llama_rms_norm(r + x, w))
                y64 = reference.float64_rms_norm(src, w)
                ulps = ((y.double() - y64).abs() / (y64.abs() * 2 ** -8 + 1e-30)).max()
                off = int((y != reference.hf_llama_rms_norm(src, w)).sum())
                failures += bool(ulps > 2.05) + bool(off > 0.01 * y.numel() + 1)
                times = [_time_us(fn, cuda) for fn in fns]
                print(f"| {label} | {m} x {n} | {op} | {ulps:.2f} | {off} of {y.numel()} | "
                      + " | ".join(f"{t:.1f}" for t in times) + " |")
        failures += _train_row(label, x, w, cuda)
    failures += _quant_table(shapes, device, cuda)
    print("\ncorrectness:", "OK" if failures == 0 else f"{failures} FAILURES")
    print("recipe: HF LlamaRMSNorm (casting_mode='llama'); one bf16 rounding errs by up to "
          "2^-8 relative, llama rounds twice")
    print("fwd+bwd: forward and backward through autograd; its error is the norm-wise relative "
          "error of dx and dw against float64 autograd")
    return 1 if failures else 0


def _quant_table(shapes, device, cuda):
    """rms_norm_quant (per token) and fused_add_rms_norm_quant (per group of 128, UE8M0
    scales) against rms_norm then vLLM's quantizer in PyTorch ops; returns the failures."""
    import torch

    import rmsnorm
    from rmsnorm import reference

    head = "| shape | M x N | op | elems != norm then quantize | fused us | unfused us |"
    print("\nQuantized output (fp8 e4m3, bf16 in):\n")
    print(head)
    print("|" + "---|" * head.count(" | ") + "---|")
    g = torch.Generator().manual_seed(2)
    failures = 0
    fp8 = torch.float8_e4m3fn
    for label, m, n in shapes:
        x, r = (torch.randn(m, n, generator=g).to(torch.bfloat16).to(device) for _ in range(2))
        w = (torch.randn(n, generator=g) * 0.5 + 1).to(torch.bfloat16).to(device)
        cases = (
            ("norm->fp8 per token", lambda: rmsnorm.rms_norm_quant(x, w),
             lambda: reference.quantize(rmsnorm.rms_norm(x, w), fp8)),
            ("add+norm->fp8 per 128, ue8m0",
             lambda: rmsnorm.fused_add_rms_norm_quant(x, r, w, group_size=128, ue8m0=True),
             lambda: reference.quantize(rmsnorm.fused_add_rms_norm(x, r, w)[0], fp8,
                                        group_size=128, use_ue8m0=True)))
        with torch.no_grad():
            for op, fused, unfused in cases:
                got, (q, scales) = fused(), unfused()
                off = int((got.out.view(torch.uint8) != q.view(torch.uint8)).sum()) + \
                    int((got.scales != scales).sum())
                failures += bool(off)
                times = [_time_us(fn, cuda) for fn in (fused, unfused)]
                print(f"| {label} | {m} x {n} | {op} | {off} of {q.numel() + scales.numel()} | "
                      + " | ".join(f"{t:.1f}" for t in times) + " |")
    return failures


def _train_row(label, x, w, cuda):
    """One training step (forward + backward through autograd) against float64 autograd and
    the same step with F.rms_norm and the HF recipe; returns 1 on a failure."""
    import torch
    import torch.nn.functional as F

    import rmsnorm
    from rmsnorm import reference

    m, n = x.shape
    dy = torch.randn(m, n, generator=torch.Generator().manual_seed(1)).to(x.dtype).to(x.device)

    def step(norm, xs=x, ws=w, ds=dy):
        xg, wg = xs.detach().requires_grad_(), ws.detach().requires_grad_()
        return torch.autograd.grad(norm(xg, wg), (xg, wg), ds)

    dx, dw = step(rmsnorm.rms_norm)
    dx64, dw64 = step(reference.float64_rms_norm, x.double(), w.double(), dy.double())
    err = max(((a.double() - b).norm() / b.norm()).item() for a, b in ((dx, dx64), (dw, dw64)))
    times = [_time_us(lambda norm=norm: step(norm), cuda)
             for norm in (rmsnorm.rms_norm, lambda a, b: F.rms_norm(a, (n,), b, 1e-6),
                          reference.hf_llama_rms_norm)]
    print(f"| {label} | {m} x {n} | fwd+bwd | {err / 2 ** -8:.2f} | - | "
          + " | ".join(f"{t:.1f}" for t in times) + " |")
    return int(not err <= 2 ** -8)


if __name__ == "__main__":
    sys.exit(main())
