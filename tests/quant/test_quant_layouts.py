"""The quantized kernels sum each row's squares in the order the plain forward does, so that
their y (and rstd) are the plain forward's bits: Triton reduces in the layout its layout
passes give the row, which follow the kernel's accesses (a one-byte store would pull 16
elements into each thread; an aligned weight beside rows off 16 bytes, read per row, or a
launch of one row per program, pulled the row to the weight's vectors). Compiled for sm_90 on
the CPU, as the AOT build compiles librmsnorm's kernels, in a child process (the session may
run Triton's interpreter). The widths include rows whose quantized launch differs from the
plain one (configs.quantized_rule), and rows off 16 bytes (the AOT build's ALIGN_PTR kernels,
the JIT's for such widths): float32 at 4096 x 5125 once differed in most rows."""

import json
import subprocess
import sys

from helpers import ROOT

_PROBE = r"""
import json, re
from rmsnorm.aot import build as aot
from rmsnorm.launch import configs, dtypes

def reduce_layout(spec):
    kernel, source, options = aot._compile_inputs(spec, 90)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    ttgir = triton.compile(ASTSource(fn=kernel, **source), target=GPUTarget("cuda", 90, 32),
                           options=options).asm["ttgir"]
    layouts = dict(re.findall(r"^(#\w+) = (.*)$", ttgir, re.M))
    first = next(re.search(r"\(tensor<([^,]+), (#\w+)>\)", line) for line in ttgir.splitlines()
                 if line.strip().startswith("})") and "tensor" in line)
    # The tile's columns and the layout (rows per program may differ: configs.quantized_rule
    # takes one row where a row alone spans every thread, which leaves the columns' order).
    return [first.group(1).split("x")[-2], layouts.get(first.group(2), first.group(2))]

def reduce_layouts(spec):
    # Every layout the kernel reduces in (the plain forward's only reductions: rows' sums).
    kernel, source, options = aot._compile_inputs(spec, 90)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    ttgir = triton.compile(ASTSource(fn=kernel, **source), target=GPUTarget("cuda", 90, 32),
                           options=options).asm["ttgir"]
    layouts = dict(re.findall(r"^(#\w+) = (.*)$", ttgir, re.M))
    found = re.findall(r"^\s*\}\) : \(tensor<[^,]+, (#\w+)>\)", ttgir, re.M)
    return sorted({layouts.get(name, name) for name in found})

def sum_layouts(spec):
    return reduce_layout(spec), reduce_layouts(spec)

out = []
for dtype, n, op, align in (
        ("bf16", 384, "fwd", aot.ALIGN_VEC), ("fp16", 4096, "add", aot.ALIGN_VEC),
        ("bf16", 7168, "fwd", aot.ALIGN_VEC), ("bf16", 65536 * 2, "fwd", aot.ALIGN_VEC),
        ("bf16", 2048, "fwd", aot.ALIGN_VEC), ("fp32", 1536, "fwd", aot.ALIGN_VEC),
        ("fp16", 3072, "add", aot.ALIGN_VEC), ("bf16", 32768, "fwd", aot.ALIGN_VEC),
        ("fp32", 5125, "add", aot.ALIGN_PTR), ("fp32", 4095, "fwd", aot.ALIGN_PTR),
        ("bf16", 3000, "fwd", aot.ALIGN_PTR), ("bf16", 4097, "add", aot.ALIGN_PTR),
        ("fp16", 12289, "add", aot.ALIGN_NONE), ("bf16", 70001, "add", aot.ALIGN_PTR)):
    eb = dtypes.BYTES[dtype]
    variant = configs.rule_index(op, n, eb, 90, dtype)
    plain, plain_all = sum_layouts(aot.Spec(op, dtype, True, True, variant=variant, align=align))
    for quant, qformat, group in ((1, "e4m3", 0), (2, "int8", 0), (3, "e4m3", 128)):
        if group and n % group:
            continue
        q = aot.Spec(op, dtype, True, True, variant=variant, align=align, quant=quant,
                     qformat=qformat, group=group)
        out.append([dtype, n, op, align, quant, qformat, plain, plain_all, reduce_layout(q)])
print(json.dumps(out))
"""


def test_quantized_kernels_sum_rows_in_the_plain_forwards_layout():
    probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                           timeout=600, env={"PATH": "/usr/bin:/bin", **_env()})
    assert probe.returncode == 0, probe.stderr[-3000:]
    for dtype, n, op, align, quant, qformat, plain, plain_all, quantized in \
            json.loads(probe.stdout):
        what = f"{op} {dtype} n={n} align={align}"
        # One layout in the plain kernel too: its stored rstd and its y's once came from two.
        assert len(plain_all) == 1, f"{what}: the plain forward sums rows in {plain_all}"
        assert quantized == plain, f"{what} quant={quant} {qformat}: rows summed in " \
                                   f"{quantized}, the plain forward in {plain}"


def _env():
    import os
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = str(ROOT)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env
