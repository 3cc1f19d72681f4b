"""Ahead-of-time compiler: every kernel specialization librmsnorm can launch, for each GPU arch,
compiled to a cubin (plus PTX for GPUs newer than any built arch), and the generated C++ that
embeds them and indexes them.

    python -m rmsnorm.aot --out build/aot --archs 80 89 90 100 [--jobs N]

No GPU is needed: kernels are compiled with `triton.compile(ASTSource(...), GPUTarget(...))`
(DESIGN.md, "AOT caveats"). The build is incremental: each kernel lands in a cache file named
by a hash of what decides its code (Triton's version, the kernel sources, the specialization,
the launch and the arch); only missing ones are compiled, and generated files are rewritten
only when their content changes.

What is compiled (the C API's scope, docs/CPP.md): plain forward, fused-add forward and
backward; x, residual, y and dy of one dtype (fp32, fp16, bf16), with the weight of that dtype
or none; both casting modes (fp32 needs one: rounding to fp32 changes nothing); the backward
with and without the fused add's gradient and with and without dw; every row of the arch's
launch table (rmsnorm.launch.configs.rules_for, the same rows the Python launcher reads: a tile
width or the looped path, and the launch measured for its widths); one-level row strides;
the dw reduction for each dw dtype and column block; the quantized forward (QUANT_*
below: a bounded subset, each spec costs CI build time); and the vendor recipes' options
where their presets take them (RECIPE_*). Each of the others comes in
three alignments, specialised as Triton's JIT specializes on the same facts (so that the C
path runs the very kernels the Python path compiles): ALIGN_VEC, 16-byte aligned pointers
with n and the row strides multiples of 16 (vector loads); ALIGN_PTR, aligned pointers
alone (rows of any width from aligned allocations); ALIGN_NONE, no assumption (pointers into
the middle of a row).
"""

import argparse
import concurrent.futures
import dataclasses
import hashlib
import json
import os
import pathlib
import random
import re
import sys
import time

from rmsnorm.aot.progress import Progress
from rmsnorm.launch import configs, dtypes

# Op, dtype and flag codes of a kernel's key, and its fields with their widths in bits, low
# bits first: the C++ runtime packs keys from the same (rmsnorm.aot.abi generates its header).
OPS = ("fwd", "add", "bwd", "reduce")
# dtypes.COMPILED: the names are the launch table's and Triton's own.
DTYPES = dtypes.COMPILED


def table_rows(op, dtype, arch):
    """The launch table's rows that serve op for dtype on arch (rmsnorm.launch.configs.rules_for, as
    the Python launcher reads them for tensors all of that dtype)."""
    from rmsnorm.launch import configs

    return configs.rules_for(op, dtypes.BYTES[dtype], arch, dtype)


ALIGN_NONE, ALIGN_PTR, ALIGN_VEC = 0, 1, 2

# The quantized forward's codes: its mode (rmsnorm.kernels.quantize's NONE, STATIC, TOKEN,
# GROUP: 0 is the plain forward), its format (rmsnorm_quant_format's values) and its group
# (an index into GROUP_SIZES: 0 for no groups).
QUANT_MODES = ("none",) + configs.QUANTIZED_SCALES
QFORMATS = ("e4m3", "int8", "e5m2")
QFORMAT_TYPES = {"e4m3": ("fp8e4nv", "float8e4nv"), "int8": ("i8", "int8"),
                 "e5m2": ("fp8e5", "float8e5")}  # (the pointer's, tl's dtype)
GROUP_SIZES = (0, 64, 128)
# What of it is compiled: every kernel is CI build time, so only what serving engines run
# (bf16/fp16 activations with their weight, fp8 e4m3 and int8, vectorised layouts); the rest
# is the Python launcher's (librmsnorm returns RMSNORM_ERROR_UNSUPPORTED for it).
QUANT_DTYPES = ("fp16", "bf16")
QUANT_FORMATS = ("e4m3", "int8")
QUANT_ALIGN = ALIGN_VEC

KEY_FIELDS = (("op", 2), ("dtype", 2), ("has_w", 1), ("llama", 1), ("has_dresidual", 1),
              ("has_dw", 1), ("align", 2), ("quant", 2), ("qformat", 2), ("group", 2),
              ("fp32_sum", 1), ("vllm_fused", 1), ("variant", 14))

# The vendor recipes' options (docs/USAGE.md, "Recipes"), compiled where a preset takes them
# and nowhere else (the rest is the Python launcher's): the fused add normalizing its
# unrounded sum (FlashInfer's fused add, vLLM's fused quantizers with a residual), for the
# activations whose sum rounding changes it (fp32's does not), with the weight, both casting
# modes; the fused quantizer's formulas (vLLM's per-token and per-group norm-quant kernels)
# with llama's casting, theirs. Vectorised layouts only, as the quantized forward.
RECIPE_DTYPES = ("fp16", "bf16")
RECIPE_ALIGN = ALIGN_VEC


def casting_modes(dtype, has_w):
    """The llama flags compiled for dtype: without a weight, or in fp32 (rounding to fp32
    changes nothing), both modes compute the same and one kernel (llama) serves both."""
    return (True, False) if has_w and dtype != "fp32" else (True,)


@dataclasses.dataclass(frozen=True)
class Spec:
    op: str
    dtype: str  # x, residual, y, dy, dx; the weight's when has_w; dw's for "reduce"
    has_w: bool = False
    llama: bool = False
    has_dresidual: bool = False
    has_dw: bool = False
    # fwd/add/bwd: the index of the launch table's row (table_rows(op, dtype, arch));
    # reduce: log2 of the reduction's BLOCK_C.
    variant: int = 0
    align: int = ALIGN_VEC
    # fwd/add with y quantized: the mode's code (QUANT_MODES), the format (QFORMATS) and the
    # group size (GROUP_SIZES); 0, "" and 0 for the plain forward.
    quant: int = 0
    qformat: str = ""
    group: int = 0
    # add: the unrounded sum is normalized (normalized_sum="fp32"); quantized: vLLM's fused
    # kernels' formulas (quantizer="vllm_fused").
    fp32_sum: bool = False
    vllm_fused: bool = False

    def key(self) -> int:
        values = dict(op=OPS.index(self.op), dtype=DTYPES.index(self.dtype), has_w=self.has_w,
                      llama=self.llama, has_dresidual=self.has_dresidual, has_dw=self.has_dw,
                      align=self.align, variant=self.variant, quant=self.quant,
                      qformat=QFORMATS.index(self.qformat) if self.quant else 0,
                      group=GROUP_SIZES.index(self.group), fp32_sum=self.fp32_sum,
                      vllm_fused=self.vllm_fused)
        key, shift = 0, 0
        for field, bits in KEY_FIELDS:
            if not 0 <= values[field] < 1 << bits:
                raise ValueError(f"{self}: {field} {values[field]} needs more than {bits} bits")
            key |= int(values[field]) << shift
            shift += bits
        return key


def specs(arch):
    """Every specialization of the C API for arch, in key order."""
    from rmsnorm.launch import configs

    out = []
    for dtype in DTYPES:
        for op in configs.OPS:
            variants = range(len(table_rows(op, dtype, arch)))
            for has_w in (False, True):
                for llama in casting_modes(dtype, has_w):
                    for has_dresidual in ((False, True) if op == "bwd" else (False,)):
                        for has_dw in ((False, True) if op == "bwd" and has_w else (False,)):
                            for variant in variants:
                                for align in (ALIGN_NONE, ALIGN_PTR, ALIGN_VEC):
                                    out.append(Spec(op, dtype, has_w, llama, has_dresidual, has_dw,
                                                    variant, align))
        for block_c in reduce_blocks():
            for align in (ALIGN_NONE, ALIGN_PTR, ALIGN_VEC):
                out.append(Spec("reduce", dtype, variant=block_c.bit_length() - 1,
                                align=align))
    for dtype in RECIPE_DTYPES:
        for variant in range(len(table_rows("add", dtype, arch))):
            for llama in casting_modes(dtype, True):
                out.append(Spec("add", dtype, True, llama, variant=variant, align=RECIPE_ALIGN,
                                fp32_sum=True))
    return sorted(out + quant_specs(arch), key=Spec.key)


def quant_specs(arch):
    """The quantized forward's specializations for arch: QUANT_DTYPES with their weight, both
    casting modes, plain and fused add, QUANT_FORMATS, every mode (per-group with each of
    GROUP_SIZES), every row of the launch table, QUANT_ALIGN. A row whose tile is not a
    multiple of the group has no per-group kernel (a group must not straddle two tiles: the
    kernels refuse to compile it); such rows serve widths no group divides (n <= 32 today)."""
    out = []
    for dtype in QUANT_DTYPES:
        for op in ("fwd", "add"):
            for variant, rule in enumerate(table_rows(op, dtype, arch)):
                for llama in (True, False):
                    for qformat in QUANT_FORMATS:
                        for quant, group in ((1, 0), (2, 0), *((3, g) for g in GROUP_SIZES[1:])):
                            if group and rule.block_n % group:
                                continue
                            spec = Spec(op, dtype, True, llama, variant=variant,
                                        align=QUANT_ALIGN, quant=quant, qformat=qformat,
                                        group=group)
                            out.append(spec)
                            # vLLM's fused per-token and per-group kernels (RECIPE_*): llama,
                            # and with a residual the unrounded sum.
                            if quant != 1 and llama and dtype in RECIPE_DTYPES:
                                out.append(dataclasses.replace(
                                    spec, align=RECIPE_ALIGN, vllm_fused=True,
                                    fp32_sum=op == "add"))
    return out


def family(spec):
    """The runtime's kernel family of spec (rmsnorm.aot.abi.FAMILIES): one parameter list."""
    if spec.quant:
        return "QuantForward"
    return {"fwd": "Forward", "add": "Forward", "bwd": "Backward", "reduce": "Reduce"}[spec.op]


def reduce_blocks():
    from rmsnorm.launch import configs

    return sorted({configs.reduce_launch(n)[1] for n in (1 << k for k in range(0, 31))})


def _launch(spec, arch):
    """The launch of spec's table row on arch (rmsnorm.launch.configs, as the Python path)."""
    from rmsnorm.launch import configs

    wb = dtypes.BYTES[spec.dtype] if spec.has_w else 0
    rule = table_rows(spec.op, spec.dtype, arch)[spec.variant]
    fused = spec.op == "add" or spec.has_dresidual
    streams = configs.streams(spec.op, fused)
    if spec.quant:
        launch = configs.quantized_launch(rule, QUANT_MODES[spec.quant], streams, wb, arch)
    else:
        launch = configs.rule_launch(rule, streams, wb, arch)
    if spec.fp32_sum:
        # As the Python launcher changes it (rmsnorm.launch.forward.launch_forward).
        launch = configs.fp32_sum_launch(launch, dtypes.BYTES[spec.dtype], wb, arch,
                                         spec.dtype)
    return launch


def _signature(spec, arch):
    """(kernel, signature, constexprs, pointers, ints, num_warps, num_stages): the last but
    two are the arguments ALIGN_PTR and ALIGN_VEC take as multiples of 16. The kernel and
    its constexprs are the launcher's (rmsnorm.launch.specs) for the same call: contiguous
    rows (one level of strides) of one dtype, compiled code (no soft bf16)."""
    import triton.language as tl

    from rmsnorm.kernels import backward
    from rmsnorm.launch import configs, specs

    pdl = configs.waits_on_prior_grid(arch)
    if spec.op == "reduce":
        consts, warps = specs.reduce_constexprs((1 << spec.variant) * 128, pdl_=pdl,
                                                soft_bf16=False)
        assert consts["BLOCK_C"] == 1 << spec.variant
        kernel = backward.dw_reduce_kernel
        pointers = _pointer_types(specs.REDUCE_POINTERS, spec.dtype)
        return kernel, {**pointers, "P": "i32", "N": "i32"}, consts, set(pointers), {"N"}, \
            warps, 1
    launch = _launch(spec, arch)
    if spec.op == "bwd":
        kernel = specs.backward_kernel(launch)
        pointers = _pointer_types(specs.BACKWARD_POINTERS, spec.dtype)
        consts = specs.backward_constexprs(
            launch, has_dresidual=spec.has_dresidual, has_w=spec.has_w, has_dw=spec.has_dw,
            two_level=False, llama=spec.llama, acc_dtype=tl.float32, pdl_=pdl,
            soft_bf16=False)
    else:
        quantized, code_type = None, None
        if spec.quant:
            code_type, code_dtype = QFORMAT_TYPES[spec.qformat]
            quantized = specs.Quantized(spec.quant, getattr(tl, code_dtype), spec.group,
                                        spec.vllm_fused)
        # Y holds the codes when quantized; UNQ (the activations' dtype) the unquantized y.
        pointers = _pointer_types(specs.forward_pointers(quantized), spec.dtype, code_type)
        kernel = specs.forward_kernel(launch, quantized)
        consts = specs.forward_constexprs(
            launch, fused=spec.op == "add", has_w=spec.has_w, two_level=False,
            llama=spec.llama, acc_dtype=tl.float32,
            vec=configs.row_vector(dtypes.BYTES[spec.dtype]), fp32_sum=spec.fp32_sum,
            pdl_=pdl, soft_bf16=False, quantized=quantized)
    types = {}
    for name in kernel.arg_names:
        if name in consts:
            types[name] = "constexpr"
        elif name in pointers:
            types[name] = pointers[name]
        elif name in ("eps", "offset"):
            types[name] = "fp32"
        else:
            # 32-bit, as the JIT types an int below 2^31 (offsets are formed in 64 bits
            # inside): the C runtime launches at most 2^30 rows at a time and refuses
            # strides of 2^31 elements or more.
            types[name] = "i32"
    # n and the row strides (the names s*_o / s*_i), which the JIT specializes on; not the
    # quantized forward's scale strides and flags (ss_row, store_unq, ...: do_not_specialize).
    ints = {"N"} | {n for n in kernel.arg_names if re.fullmatch(r"s\w+_[oi]", n)}
    return kernel, types, consts, set(pointers), ints, launch.num_warps, launch.num_stages


def _pointer_types(names, dtype, y_type=None):
    """Triton's pointer types of the parameters `names` for activations of dtype (y_type: Y's
    own, the quantized codes')."""
    from rmsnorm.launch import specs

    return {name: "*fp32" if name in specs.FP32_POINTERS else
            "*" + (y_type if name == "Y" and y_type else dtype) for name in names}


def _compile_inputs(spec, arch):
    """(kernel, ASTSource arguments, compile options): everything that decides the code."""
    from rmsnorm.launch import configs

    kernel, types, consts, pointers, ints, warps, stages = _signature(spec, arch)
    names = kernel.arg_names
    aligned = (pointers if spec.align >= ALIGN_PTR else set()) | \
        (ints if spec.align == ALIGN_VEC else set())
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    cap = 0 if spec.op == "reduce" else _launch(spec, arch).max_registers
    options = dict(num_warps=warps, num_stages=stages,
                   **configs.compile_options(spec.align == ALIGN_VEC, cap))
    return kernel, dict(signature=types, constexprs=consts, attrs=attrs), options


def compile_one(spec, arch):
    """Compiles spec for arch: a dict of the cubin, the PTX and the image's metadata."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from rmsnorm.launch import configs

    kernel, source, options = _compile_inputs(spec, arch)
    compiled = triton.compile(ASTSource(fn=kernel, **source),
                              target=GPUTarget("cuda", arch, 32), options=options)
    md = compiled.metadata
    if md.global_scratch_size or getattr(md, "profile_scratch_size", 0):
        raise RuntimeError(f"{spec} needs global scratch memory, which librmsnorm does not "
                           "allocate")

    limit = configs.SMEM_LIMIT.get(arch, configs.SMEM_LIMIT_DEFAULT)
    if md.shared > limit:
        raise RuntimeError(f"{spec} on sm_{arch} takes {md.shared} bytes of shared memory, "
                           f"more than the arch's {limit}: lower its stages in "
                           "rmsnorm.launch.configs")
    from rmsnorm.aot.abi import ptx_parameters

    # The parameters the kernel takes, as its PTX declares them: the build checks them against
    # the runtime's ABI (rmsnorm.aot.abi) from the metadata alone, which a carried cache holds
    # without the PTX.
    ptx = compiled.asm["ptx"]
    return dict(name=md.name, num_warps=md.num_warps, shared=md.shared,
                parameters=ptx_parameters(ptx, md.name), cubin=compiled.asm["cubin"], ptx=ptx)


def grid_facts(spec, arch):
    """(rows per program step, programs per SM, looped) of spec's launch on arch: the grid,
    which the runtime computes and the compiled code does not depend on, and whether it is
    the loop path's (one program walks each row)."""
    if spec.op == "reduce":
        return 1, 1, False  # one program per BLOCK_C columns
    launch = _launch(spec, arch)
    return launch.rows, launch.programs_per_sm, launch.path == "loop"


def _sources_hash():
    import triton

    h = hashlib.sha256(triton.__version__.encode())
    package = pathlib.Path(__file__).resolve().parents[1]
    for path in sorted([*package.joinpath("kernels").glob("*.py"),
                        *(package / "launch" / f for f in ("configs.py", "specs.py")),
                        package / "aot" / "build.py"]):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _cache_path(cache, spec, arch, sources):
    """The cache entry of spec's code: named by what decides it (not by the spec: specs of
    table rows that differ only in their grid share one entry)."""
    kernel, source, options = _compile_inputs(spec, arch)
    what = json.dumps([sources, arch, kernel.__name__, source["signature"],
                       {k: str(v) for k, v in source["constexprs"].items()},
                       sorted(str(k) for k in source["attrs"]), options], sort_keys=True)
    digest = hashlib.sha256(what.encode()).hexdigest()[:24]
    return cache / f"sm{arch}" / f"{digest}.json"


def _compile_to(args):
    spec, arch, path = args
    # Line info (for profilers) triples a cubin's size and changes no instruction.
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
    result = compile_one(spec, arch)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Temporary names of this process's own: two builds sharing a cache may compile the same
    # entry at once, and each must rename only its own files (the results are the same).
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    tmp.with_suffix(".cubin").write_bytes(result.pop("cubin"))
    tmp.with_suffix(".ptx").write_text(result.pop("ptx"))
    tmp.write_text(json.dumps(result))
    for ext in (".cubin", ".ptx"):
        os.replace(tmp.with_suffix(ext), path.with_suffix(ext))
    os.replace(tmp, path)  # last: the .json marks a complete entry
    return spec, arch


def build(out, archs, jobs, ptx_arch):
    out = pathlib.Path(out)
    cache = out / "cache"
    sources = _sources_hash()
    per_arch = {arch: specs(arch) for arch in archs}
    paths = {(spec, arch): _cache_path(cache, spec, arch, sources)
             for arch in archs for spec in per_arch[arch]}
    todo = {}
    for (spec, arch), path in paths.items():
        if not path.exists() and path not in todo:
            todo[path] = (spec, arch, path)
    total = len(paths)
    print(f"rmsnorm.aot: {total} kernels for sm_{', sm_'.join(map(str, archs))}; "
          f"{len(todo)} to compile with {jobs} processes", file=sys.stderr, flush=True)
    if todo:
        import multiprocessing

        # Kernels of one op and width sit together in specs() and differ in cost: a shuffled
        # order (fixed, so reruns match) makes the rate so far a fair estimate of the rest.
        work = list(todo.values())
        random.Random(0).shuffle(work)
        progress = Progress(len(work))
        ctx = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            for _ in pool.map(_compile_to, work, chunksize=4):
                progress.step()
    from rmsnorm.aot.emit import emit

    emit(out, per_arch, lambda spec, arch: paths[(spec, arch)], ptx_arch)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output folder (cache and generated files)")
    p.add_argument("--archs", nargs="+", type=int, default=[80, 89, 90, 100],
                   help="compute capabilities, major*10+minor (default: 80 89 90 100)")
    p.add_argument("--jobs", type=int, default=0, help="processes (0: all cores)")
    p.add_argument("--list", action="store_true", help="print the specializations and exit")
    p.add_argument("--stamp", help="file to date, once the build is done, to the time it began "
                                   "(the build tool's record of it)")
    args = p.parse_args(argv)
    began = time.time()
    archs = sorted(set(args.archs))
    if args.list:
        for arch in archs:
            for spec in specs(arch):
                print(f"sm_{arch}", spec.key(), spec)
        return 0
    # PTX of a plain (not "a") arch JITs on later GPUs; Triton builds sm_90 and up as sm_90a.
    plain = [a for a in archs if a < 90]
    build(args.out, archs, args.jobs or os.cpu_count() or 1, plain[0] if plain else None)
    if args.stamp:
        # Dated to the start, not the end: an input edited while the kernels compiled is then
        # newer than the stamp, and the next build runs the step again.
        pathlib.Path(args.stamp).touch()
        os.utime(args.stamp, (began, began))
    return 0


if __name__ == "__main__":
    sys.exit(main())
