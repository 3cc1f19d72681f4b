"""The quantized kernels sum each row's squares in the order the plain forward does, so that
their y (and rstd) are the plain forward's bits: Triton reduces in the layout its layout
passes give the row, and a one-byte store would pull 16 elements into each thread (another
order, y off by an ulp). Compiled for sm_90 on the CPU, as the AOT build compiles librmsnorm's
kernels, in a child process (the session may run Triton's interpreter). The widths include
rows whose quantized launch differs from the plain one (configs.quantized_rule)."""

import json
import subprocess
import sys

_PROBE = r"""
import json, re
from rmsnorm.aot import build as aot
from rmsnorm.launch import configs

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

out = []
for dtype, n, op in (("bf16", 384, "fwd"), ("f16", 4096, "add"), ("bf16", 7168, "fwd"),
                     ("bf16", 65536 * 2, "fwd"), ("bf16", 2048, "fwd"), ("f32", 1536, "fwd"),
                     ("f16", 3072, "add"), ("bf16", 32768, "fwd")):
    eb = aot.ELEM_BYTES[dtype]
    variant = configs.rule_index(op, n, eb, 90, aot.TABLE_DTYPES[dtype])
    plain = aot.Spec(op, dtype, True, True, variant=variant)
    for quant, qformat, group in ((1, "e4m3", 0), (2, "int8", 0), (3, "e4m3", 128)):
        q = aot.Spec(op, dtype, True, True, variant=variant, quant=quant, qformat=qformat,
                     group=group)
        out.append([dtype, n, op, quant, qformat, reduce_layout(plain), reduce_layout(q)])
print(json.dumps(out))
"""


def test_quantized_kernels_sum_rows_in_the_plain_forwards_layout():
    probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                           timeout=600, env={"PATH": "/usr/bin:/bin", **_env()})
    assert probe.returncode == 0, probe.stderr[-3000:]
    for dtype, n, op, quant, qformat, plain, quantized in json.loads(probe.stdout):
        assert quantized == plain, f"{op} {dtype} n={n} quant={quant} {qformat}: rows summed " \
                                   f"in {quantized}, the plain forward in {plain}"


def _env():
    import os
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env
