"""SASS instructions per element of the AOT-compiled kernels, no GPU needed: the evidence an
instruction-bound kernel's speed rests on (docs/PERFORMANCE.md, "Quantized output").

    python -m rmsnorm_tools.sass_count [--n 2048 4096 ...] [--ops fwd add] [--dtype bf16]

For each width, op and quantized mode (and the plain forward for comparison) it compiles the
kernel the launch table picks for rows of n elements (rmsnorm.aot.build's spec: the same code
librmsnorm runs), disassembles it with the cuobjdump Triton ships, and counts the instructions
of its row loop: the body between the loop's head and its backward branch, which one program
runs once per row step. Per element = that count / the elements a thread holds per step
(rows x tile columns / threads). The bound that implies: an SM issues 4 warp instructions a
clock, so at a clock of f and B bytes of HBM a second, moving b bytes an element, a kernel can
spend at most 4 * 32 * SMs * f * b / B thread instructions an element and keep up (26 on an
H200 at 3 bytes an element, all issue slots full).
"""

import argparse
import pathlib
import re
import subprocess
import sys
import tempfile

from rmsnorm.aot import build
from rmsnorm.launch import configs, dtypes

MODES = {"plain": (0, 0), "static": (1, 0), "token": (2, 0), "group128": (3, 128)}
_INSTRUCTION = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?);")
_TARGET = re.compile(r"\b(?:BRA|BRX)\b.*?(0x[0-9a-f]+)")


def cuobjdump():
    import triton

    return pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def sass(cubin):
    """[(address, instruction text)] of the cubin's one kernel."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([str(cuobjdump()), "-sass", f.name], capture_output=True,
                              text=True, check=True).stdout
    return [(int(m.group(1), 16), m.group(2)) for m in map(_INSTRUCTION.match, text.splitlines())
            if m]


def row_loop(instructions):
    """The instructions of the longest loop: from a backward branch's target to the branch."""
    best = []
    for i, (address, text) in enumerate(instructions):
        m = _TARGET.search(text)
        if m and int(m.group(1), 16) <= address:
            start = int(m.group(1), 16)
            body = [t for a, t in instructions[:i + 1] if a >= start]
            best = max(best, body, key=len)
    return best


def spec_for(op, dtype, n, mode, qformat, arch=90):
    quant, group = MODES[mode]
    variant = configs.rule_index(op, n, dtypes.BYTES[dtype], arch, dtype)
    return build.Spec(op, dtype, True, True, variant=variant, align=build.ALIGN_VEC,
                      quant=quant, qformat=qformat if quant else "", group=group)


def count(spec, arch=90):
    """(kernel instructions, row-loop instructions, elements a thread holds per row step)."""
    compiled = build.compile_one(spec, arch)
    instructions = sass(compiled["cubin"])
    loop = row_loop(instructions)
    launch = build._launch(spec, arch)
    per_thread = launch.rows * launch.block_n * launch.chunks / (32 * launch.num_warps)
    return len(instructions), len(loop), per_thread


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    p.add_argument("--ops", nargs="+", default=["fwd", "add"], choices=["fwd", "add"])
    p.add_argument("--dtype", default="bf16", choices=list(build.QUANT_DTYPES))
    p.add_argument("--formats", nargs="+", default=["e4m3", "int8"],
                   choices=list(build.QUANT_FORMATS))
    args = p.parse_args(argv)
    print("| op | n | mode | format | kernel | row loop | elements / thread | per element |")
    print("|---|---|---|---|---|---|---|---|")
    for op in args.ops:
        for n in args.n:
            for mode in MODES:
                for qformat in (["-"] if mode == "plain" else args.formats):
                    spec = spec_for(op, args.dtype, n, mode, qformat)
                    total, loop, per_thread = count(spec)
                    print(f"| {op} | {n} | {mode} | {qformat} | {total} | {loop} | "
                          f"{per_thread:g} | {loop / per_thread:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
