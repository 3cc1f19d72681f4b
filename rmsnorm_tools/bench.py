r"""Benchmark CLI (GPU): rmsnorm against the same-bytes copy ceiling and PyTorch, in one run.

    python -m rmsnorm_tools.bench                      # forward and fused add, bf16, LLM shapes
    python -m rmsnorm_tools.bench --dtype bf16 fp16 fp32 --op fwd --shapes 16384x4096 1024x65536
    python -m rmsnorm_tools.bench --op bwd fwdbwd --peers eager compile   # training
    python -m rmsnorm_tools.bench --peers eager compile --json results.json
    python -m rmsnorm_tools.bench --overhead        # host microseconds per call, decode shape
    python -m rmsnorm_tools.bench --op fwd --shapes 5461x1536 --timing graph_hbm \
        --peers rmsnorm_launcher                    # compiled kernels vs the Python launcher
    python -m rmsnorm_tools.bench --suite --json run.json --baseline earlier.json
    python -m rmsnorm_tools.bench --op quant add_quant --quant token group128 \
        --quant-dtype fp8 int8 --peers compile plain   # norm + fp8/int8 quantization, fused

Every figure is a median of single calls timed as triton.testing.do_bench times them (L2
flushed before each), each queued behind a GPU sleep (HOST_SLACK_CYCLES) so that the
launcher's host time is not timed;
"graph"-timed cases (the suite's decode shapes) time 100 calls captured in one CUDA graph
and report the time per call, inputs warm in L2 as in a decode step; "graph_hbm" cases (the
suite's 2^23-element shapes) do the same over input sets that together exceed the L2 three
times, so that they move HBM bytes; their copy ceilings are timed the same way. --suite runs
the fixed cases of rmsnorm_tools.suite; --baseline compares the run with an earlier one's JSON
(the H200 baseline the project holds its changes to is a checkout's
docs/results/h200-baseline.json; an installed rmsnorm does not ship it) and exits 1 when a
case's % of copy fell by more than two points in two timings (each case that fell is timed
again, and the better timing kept, with both in its row's `timed_pct_copy`).
GB/s counts the fewest bytes an op must move: forward reads x and writes y (2*M*N elements),
fused add reads x and residual and writes y and the sum (4*M*N), backward ("bwd") reads x and
dy and writes dx (3*M*N), forward + backward through autograd ("fwdbwd") both (5*M*N); the
weight, dw and per-row scalars are not counted. The quantized forwards count bytes: "quant"
reads x and writes one byte per element plus the scales (4 bytes per row, or per row and
group), "add_quant" also reads the residual and writes the sum; their peers are the unfused
composition (rms_norm, or HF's norm under "compile", then vLLM's quantizer in PyTorch ops,
rmsnorm.reference.quantize) and "plain", rmsnorm's own unquantized call of the same shape
(whose time the decode goal compares; its % of copy is over the quantized op's bytes). The ceiling of a shape is a device-to-device
copy (dst.copy_(src)) moving the same bytes, timed the same way in the same run; "% copy" is
the op's GB/s over it.

"bwd" is the backward alone: rmsnorm's ops.backward (dx, the dw partials and their reduction)
from an rstd saved once; the peers replay the backward of a graph built once (retain_graph).
Its "dw reduce" column is rmsnorm's dw reduction kernel alone, over that backward's partial
rows and launched as ops launches it, and its share of the backward's time. That share is an
upper bound: timed alone, the partials come from HBM (L2 flushed); in the backward they were
just written and may still sit in L2.
"""

import argparse
import contextlib
import functools
import itertools
import json
import os
import statistics
import sys
from unittest import mock

import torch
import torch.nn.functional as F

import rmsnorm
from rmsnorm import reference
from rmsnorm.launch import backward as launch_backward, ops, specs
from rmsnorm_tools import suite

SHAPES = [(16384, 4096), (65536, 4096), (16384, 8192), (8192, 16384), (4096, 32768),
          (32768, 2048), (131072, 128), (524288, 128), (1024, 65536), (256, 262144)]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
EPS = 1e-6
# Elements each op must move, per element of x (see the docstring).
MOVED = {"fwd": 2, "add": 4, "bwd": 3, "fwdbwd": 5, "quant": None, "add_quant": None}
QUANT_OPS = ("quant", "add_quant")
# --quant modes: the keywords of rms_norm_quant (a static scale is made on the GPU per case).
QUANT_MODES = {"static": dict(scale=0.02), "token": {}, "group64": dict(group_size=64),
               "group128": dict(group_size=128),
               "group128_ue8m0": dict(group_size=128, ue8m0=True, transposed_scales=True)}
QUANT_DTYPES = {"fp8": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2, "int8": torch.int8}
# The peer that is rmsnorm's unquantized call of a quantized case.
PLAIN = "plain"
BACKWARD_OPS = ("bwd", "fwdbwd")
# The peer that is rmsnorm itself with CUDA calls sent to the Python launcher
# (rmsnorm.use_compiled_kernels(False)): the compiled kernels' route against Triton's JIT, in
# one run.
LAUNCHER = "rmsnorm_launcher"
# Calls per CUDA graph of a "graph"-timed case.
GRAPH_CALLS = 100
# Where inputs are made. The tests set "cpu" to run the plumbing under Triton's interpreter
# with a fake timer; a real measurement needs CUDA.
DEVICE = "cuda"


def check_device(prog):
    if DEVICE == "cuda" and not torch.cuda.is_available():
        sys.exit(f"{prog} needs a CUDA GPU (timing the interpreter means nothing)")


# GPU cycles each timed single call waits behind, after its L2 flush and before its start
# event (about 200 us at the H200's 1.98 GHz): the Python launcher's host time per call (30-100
# us on the H200's host) is then spent while the GPU is still busy, and the call's time is its
# GPU time. Without it a call that takes longer to launch than the flush takes to run is timed
# waiting for its launch: the 2^26-element bf16 forward (70 us of GPU time) read 73-95% of copy
# as single calls in a run where its CUDA-graph replays read 96-99% (docs/PERFORMANCE.md,
# "Between the two baselines").
HOST_SLACK_CYCLES = 400_000
# Bytes written before each timed call to flush the L2 (what triton.testing.do_bench writes).
FLUSH_BYTES = 256 * 1024 * 1024


def bench_ms(fn, warmup=25, rep=100):
    """Median ms of fn as single calls, each after an L2 flush, as triton.testing.do_bench
    times them (warmup and rep in ms of calls), and on CUDA each queued behind
    HOST_SLACK_CYCLES of GPU sleep."""
    if DEVICE != "cuda":  # the CPU plumbing tests
        import triton.testing

        return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=DEVICE)
    return single_calls_ms(fn, warmup, rep, flush)


def single_calls_ms(fn, warmup, rep, flush):
    """bench_ms's timing on CUDA: flush (a tensor) is zeroed before each timed call."""
    fn()
    torch.cuda.synchronize()
    first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    first.record()
    for _ in range(5):  # as timed, sleep included: rep bounds the whole time it takes
        flush.zero_()
        torch.cuda._sleep(HOST_SLACK_CYCLES)
        fn()
    last.record()
    torch.cuda.synchronize()
    estimate = max(first.elapsed_time(last) / 5, 1e-3)
    for _ in range(max(1, int(warmup / estimate))):
        fn()
    timed = []
    for _ in range(max(1, int(rep / estimate))):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush.zero_()
        torch.cuda._sleep(HOST_SLACK_CYCLES)
        start.record()
        fn()
        end.record()
        timed.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in timed)


def moved_elements(op, m, n):
    return m * n * MOVED[op]


def moved_bytes(op, m, n, dtype, quant=None):
    """The fewest bytes op must move (the module docstring)."""
    if op not in QUANT_OPS:
        return moved_elements(op, m, n) * dtype.itemsize
    streams = 3 if op == "add_quant" else 1  # x (+ residual read, sum written)
    group = QUANT_MODES[quant[0]].get("group_size")
    scales = 0 if quant[0] == "static" else m * (n // group if group else 1) * 4
    return m * n * (streams * dtype.itemsize + 1) + scales


def quant_kwargs(quant):
    """rms_norm_quant's keywords for a (mode, quant dtype name) pair."""
    mode, qdtype = quant
    kw = dict(QUANT_MODES[mode], quant_dtype=QUANT_DTYPES[qdtype])
    if "scale" in kw:
        kw["scale"] = torch.tensor([kw["scale"]], dtype=torch.float32, device=DEVICE)
    return kw


def make_inputs(op, m, n, dtype, seed=0):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    x = torch.randn(m, n, device=DEVICE, dtype=dtype, generator=g)
    w = (torch.randn(n, device=DEVICE, generator=g) * 0.5 + 1).to(dtype)
    r = torch.randn(m, n, device=DEVICE, dtype=dtype, generator=g) \
        if op in ("add", "add_quant") else None
    return x, r, w


def make_grad(x, seed=1):
    """dy, the gradient reaching the norm's output: random, shaped like x."""
    g = torch.Generator(device=x.device).manual_seed(seed)
    return torch.randn(x.shape, device=x.device, dtype=x.dtype, generator=g)


def saved_rstd(x, w):
    """The rstd our forward saves for the backward."""
    return ops.forward(x, w, EPS, return_rstd=True)[2]


def copy_gbps(nbytes, warmup=25, rep=100, timing="median", sets=1):
    """The ceiling: a device-to-device copy of nbytes/2 each way, timed as the op is (over as
    many buffer pairs as the op has input sets)."""
    pairs = []
    for _ in range(sets):
        src = torch.randn(nbytes // 4, device=DEVICE, dtype=torch.float16)
        pairs.append((src, torch.empty_like(src)))
    ms = TIMERS[timing](rotating([lambda s=s, d=d: d.copy_(s) for s, d in pairs]), warmup, rep)
    return nbytes / ms / 1e6


def input_sets(timing, nbytes):
    """How many input sets a case cycles through. A "graph_hbm" case takes enough that one
    replay's working set is three times the L2 cache, so that its calls read and write HBM as
    one large batch does, not the L2 the previous replay left warm; other cases take one."""
    if timing != "graph_hbm" or DEVICE != "cuda":
        return 1
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    return max(1, min(GRAPH_CALLS, -(-3 * l2 // nbytes)))


def rotating(fns):
    """One callable that calls each of fns in turn (one per input set)."""
    turn = itertools.cycle(fns)
    return lambda: next(turn)()


def graph_ms_per_call(fn, warmup=25, rep=100, calls=GRAPH_CALLS):
    """GPU time per call of `calls` calls of fn captured in one CUDA graph and replayed: what a
    decode step under CUDA graphs pays, without the host's launch cost."""
    if DEVICE != "cuda":  # the CPU plumbing tests: no graphs there
        return bench_ms(fn, warmup, rep)
    replay = graphed(lambda: [fn() for _ in range(calls)])
    return bench_ms(replay, warmup, rep) / calls


# How run_shape times a case: "median" (do_bench of single calls), "graph" (per call of a
# CUDA graph's replay, inputs warm in L2 as in a decode step) or "graph_hbm" (the same over
# input sets that do not fit the L2: input_sets). Looked up when called, so that a test's
# fake bench_ms is used.
TIMERS = {"median": lambda fn, w, r: bench_ms(fn, w, r),
          "graph": lambda fn, w, r: graph_ms_per_call(fn, w, r),
          "graph_hbm": lambda fn, w, r: graph_ms_per_call(fn, w, r)}


def _leaves(x, w):
    return x.detach().requires_grad_(), w.detach().requires_grad_()


def backward_only(f, x, w, dy):
    """The backward (dx and dw) of f(x, w) alone: the graph is built by the first call, which
    do_bench makes before it times anything, and kept for the next ones."""
    xg, wg = _leaves(x, w)
    graph = functools.cache(lambda: f(xg, wg))
    return lambda: torch.autograd.grad(graph(), (xg, wg), dy, retain_graph=True)


def forward_backward(f, x, w, dy):
    """f(x, w) and its backward (dx and dw) through autograd, both in every call."""
    xg, wg = _leaves(x, w)
    return lambda: torch.autograd.grad(f(xg, wg), (xg, wg), dy)


def graphed(fn):
    """fn captured once in a CUDA graph, replayed by each call: the GPU time of fn without the
    host's launch costs (what a training step under CUDA graphs pays)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (compile, autograd state) outside the capture
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def quant_peer_fns(op, x, r, w, peers, quant):
    """The unfused compositions a quantized call replaces, and rmsnorm's plain call."""
    kw = quant_kwargs(quant)
    qkw = dict(scale=kw.get("scale"), group_size=kw.get("group_size"),
               use_ue8m0=kw.get("ue8m0", False))
    qdtype = kw["quant_dtype"]

    def hf_then_quantize(a, res, b):
        if res is not None:
            a = res + a
        return reference.quantize(reference.hf_llama_rms_norm(a, b, EPS), qdtype, **qkw), a

    fns = {}
    if "eager" in peers:
        if op == "quant":
            fns["rms_norm_then_quantize"] = lambda: reference.quantize(
                rmsnorm.rms_norm(x, w, EPS), qdtype, **qkw)
        else:
            fns["rms_norm_then_quantize"] = lambda: reference.quantize(
                rmsnorm.fused_add_rms_norm(x, r, w, EPS)[0], qdtype, **qkw)
    if "compile" in peers:
        compiled = torch.compile(hf_then_quantize, dynamic=False)
        fns["compile_hf_quantize"] = lambda: compiled(x, r, w)
    if PLAIN in peers:
        fns[PLAIN] = (lambda: rmsnorm.rms_norm(x, w, EPS)) if op == "quant" else \
            (lambda: rmsnorm.fused_add_rms_norm(x, r, w, EPS))
    return fns


def peer_fns(op, x, r, w, peers, dy=None, quant=None):
    """Callables of the peers asked for, by name."""
    if op in QUANT_OPS:
        return quant_peer_fns(op, x, r, w, peers, quant)
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
    elif op == "add":
        def add_norm(a, res, b):
            s = res + a
            return reference.hf_llama_rms_norm(s, b, EPS), s

        if "eager" in peers:
            fns["torch_eager"] = lambda: F.rms_norm(r + x, (n,), w, EPS)
        if "compile" in peers:
            c_add = torch.compile(add_norm, dynamic=False)
            fns["compile_hf"] = lambda: c_add(x, r, w)
    else:
        def frms(a, b):
            return F.rms_norm(a, (n,), b, EPS)

        def hf(a, b):
            return reference.hf_llama_rms_norm(a, b, EPS)

        timed = backward_only if op == "bwd" else forward_backward
        if "eager" in peers:
            fns["torch_eager"] = timed(frms, x, w, dy)
            if op == "fwdbwd":
                fns["hf_eager"] = timed(hf, x, w, dy)
            if op == "fwdbwd" and x.is_cuda:
                fns["torch_eager_graphed"] = graphed(timed(frms, x, w, dy))
        if "compile" in peers:
            fns["compile_Frms"] = timed(torch.compile(frms, dynamic=False), x, w, dy)
            fns["compile_hf"] = timed(torch.compile(hf, dynamic=False), x, w, dy)
    return fns


def ours(op, x, r, w, dy=None, quant=None):
    if op == "quant":
        kw = quant_kwargs(quant)
        return lambda: rmsnorm.rms_norm_quant(x, w, EPS, **kw)
    if op == "add_quant":
        kw = quant_kwargs(quant)
        return lambda: rmsnorm.fused_add_rms_norm_quant(x, r, w, EPS, **kw)
    if op == "fwd":
        return lambda: rmsnorm.rms_norm(x, w, EPS)
    if op == "add":
        return lambda: rmsnorm.fused_add_rms_norm(x, r, w, EPS)
    if op == "bwd":
        rstd = saved_rstd(x, w)
        bwd = torch.ops.rmsnorm.bwd.default
        return lambda: bwd(dy, x, w, rstd, None, 0.0, "llama", True)
    return forward_backward(lambda a, b: rmsnorm.rms_norm(a, b, EPS), x, w, dy)


def dw_reduce_fn(dy, x, w, rstd):
    """rmsnorm's dw reduction alone, over the very partial rows one ops.backward call wrote
    (caught where the backward's launcher allocates its outputs, so their number is whatever
    it chose), launched as it launches it (specs.reduce_spec)."""
    allocated, alloc = [], launch_backward.alloc

    def recording_alloc(*args):
        allocated.append(alloc(*args))
        return allocated[-1]

    with mock.patch.object(launch_backward, "alloc", recording_alloc):
        dx, dw = ops.backward(dy, x, w, rstd)
    partials = [t for t in allocated if t is not dx and t is not dw]
    if len(partials) != 1 or partials[0].dim() != 2:
        raise RuntimeError(f"expected one dw partials tensor, ops allocated "
                           f"{[tuple(t.shape) for t in partials]}")
    partials = partials[0]
    programs, n = partials.shape
    reduce = specs.reduce_spec(n, partials.dtype, dw.dtype, partials.device)
    return lambda: reduce(partials, dw, programs, n)


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


def host_us_rounds(cases, rounds=9, calls=200):
    """{name: (median, min, max)} of host_us_per_call over `rounds` rounds, the cases timed in
    turn within each round: the host's speed drifts by a third within a run, so cases timed
    one after another in single loops can differ by more than they really do. A case is a
    callable, or (callable, context manager factory) for a setting held while it is timed."""
    times = {name: [] for name in cases}
    for _ in range(rounds):
        for name, case in cases.items():
            fn, setting = case if isinstance(case, tuple) else (case, contextlib.nullcontext)
            with setting():
                times[name].append(host_us_per_call(fn, calls))
    return {name: (statistics.median(t), min(t), max(t)) for name, t in times.items()}


@contextlib.contextmanager
def python_launcher_only():
    previous = rmsnorm.use_compiled_kernels(False)
    try:
        yield
    finally:
        rmsnorm.use_compiled_kernels(previous)


def overhead_table(dtype=torch.bfloat16, m=1, n=4096):
    """Host microseconds per call at a decode shape: rmsnorm's public functions (the C++ op
    route), the same with CUDA tensors sent to the Python launcher, torch's own, and a
    compiled two-layer block with either norm; each the median of interleaved rounds
    (host_us_rounds), with their spread."""
    rows = []
    for op in ("fwd", "add", "fwdbwd"):
        x, r, w = make_inputs(op, m, n, dtype)
        dy = make_grad(x) if op in BACKWARD_OPS else None
        cases = {"rmsnorm": ours(op, x, r, w, dy), **peer_fns(op, x, r, w, ["eager"], dy),
                 "rmsnorm, Python launcher": (ours(op, x, r, w, dy), python_launcher_only)}
        rows += [(op, name, us) for name, us in host_us_rounds(cases).items()]
    rows += _compiled_block_rows(dtype, m, n)
    lines = [f"| op | impl | host us per call ({m} x {n}, {str(dtype)[6:]}), median | "
             "min - max of the rounds |", "|---|---|---|---|"]
    lines += [f"| {op} | {name} | {med:.1f} | {lo:.1f} - {hi:.1f} |"
              for op, name, (med, lo, hi) in rows]
    return "\n".join(lines)


def _compiled_block_rows(dtype, m, n):
    """norm -> linear -> fused add + norm, under torch.compile(fullgraph=True), inference:
    with rmsnorm's functions, and with torch's F.rms_norm (and the add) compiled by Inductor."""
    x, r, w = make_inputs("add", m, n, dtype)
    linear = torch.nn.Linear(n, n, bias=False, device=x.device, dtype=dtype)

    def ours_block(a, res):
        return rmsnorm.fused_add_rms_norm(linear(rmsnorm.rms_norm(a, w, EPS)), res, w, EPS)

    def torch_block(a, res):
        s = res + linear(F.rms_norm(a, (n,), w, EPS))
        return F.rms_norm(s, (n,), w, EPS), s

    cases = {}
    for name, block in (("rmsnorm", ours_block), ("torch F.rms_norm", torch_block)):
        compiled = torch.compile(block, fullgraph=True, dynamic=False)
        cases[name] = (functools.partial(compiled, x, r), torch.no_grad)
    return [("compiled block", name, us) for name, us in host_us_rounds(cases).items()]


def _error(e):
    return f"{type(e).__name__}: {e}"[:200]


def run_shape(op, m, n, dtype, peers, warmup, rep, timing="median", quant=None):
    """One case's row; quant: (mode, quant dtype name) of a quantized op."""
    if "compile" in peers:
        # dynamic=False compiles each shape anew on the same code objects; past dynamo's
        # recompile limit (8) a peer would silently run eagerly. Start each shape afresh.
        torch._dynamo.reset()
    nbytes = moved_bytes(op, m, n, dtype, quant)
    sets = []  # (x, residual, weight, dy) of each input set
    for seed in range(input_sets(timing, nbytes)):
        x, r, w = make_inputs(op, m, n, dtype, seed=2 * seed)
        sets.append((x, r, w, make_grad(x, seed=2 * seed + 1) if op in BACKWARD_OPS else None))
    x, r, w, dy = sets[0]
    row = {"op": op if quant is None else f"{op} {quant[0]} {quant[1]}",
           "dtype": str(dtype).replace("torch.", ""), "M": m, "N": n,
           "timing": timing, "input_sets": len(sets), "bytes": nbytes,
           "copy_gbps": copy_gbps(nbytes, warmup, rep, timing, len(sets)), "impls": {}}
    impls = {"rmsnorm": rotating([ours(op, *s, quant=quant) for s in sets])}
    if op == "fwdbwd" and x.is_cuda:
        impls["rmsnorm_graphed"] = graphed(ours(op, x, r, w, dy))
    if LAUNCHER in peers:
        impls[LAUNCHER] = impls["rmsnorm"]  # the same calls, timed under python_launcher_only
    per_set = [peer_fns(op, *s[:3], peers, s[3], quant=quant) for s in sets]
    impls.update({name: rotating([fns[name] for fns in per_set]) for name in per_set[0]})
    for name, fn in impls.items():
        try:
            # The switch is read when a call is made, and a graph-timed case captures its
            # calls inside the timer: held for the whole timing.
            with python_launcher_only() if name == LAUNCHER else contextlib.nullcontext():
                ms = TIMERS[timing](fn, warmup, rep)
        except Exception as e:  # a peer that fails at a shape is reported, not fatal
            row["impls"][name] = {"error": _error(e)}
            continue
        gbps = nbytes / ms / 1e6
        row["impls"][name] = {"us": ms * 1e3, "gbps": gbps,
                              "pct_copy": 100 * gbps / row["copy_gbps"]}
    if op == "bwd" and timing == "median" and "us" in row["impls"]["rmsnorm"]:
        try:
            rstd = saved_rstd(x, w)
            us = bench_ms(dw_reduce_fn(dy, x, w, rstd), warmup, rep) * 1e3
            row["dw_reduce_us"] = us
            row["dw_reduce_pct"] = 100 * us / row["impls"]["rmsnorm"]["us"]
            # What dw costs inside the backward (partial rows written, then reduced): the
            # same call without dw, timed the same way.
            no_dw = bench_ms(functools.partial(ops.backward, dy, x, w, rstd, need_dw=False),
                             warmup, rep) * 1e3
            row["bwd_no_dw_us"] = no_dw
        except Exception as e:
            row["dw_reduce_error"] = _error(e)
    del x, r, w, dy, impls, sets, per_set
    torch.cuda.empty_cache()
    return row


def format_table(rows):
    names = []
    for row in rows:
        names += [k for k in row["impls"] if k not in names]
    dw_column = any(row["op"] == "bwd" for row in rows)
    head = ["op", "dtype", "M x N", "copy GB/s"] + [f"{k} GB/s (%copy, us)" for k in names]
    head += ["dw reduce us (% bwd); bwd without dw us"] if dw_column else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        timing = row.get("timing", "median")
        shape = f"{row['M']} x {row['N']}" + ("" if timing == "median" else f" ({timing})")
        cells = [row["op"], row["dtype"], shape, f"{row['copy_gbps']:.0f}"]
        for k in names:
            v = row["impls"].get(k)
            if v is None:
                cells.append("")
            elif "error" in v:
                cells.append("fails")
            else:
                cells.append(f"{v['gbps']:.0f} ({v['pct_copy']:.1f}%, {v['us']:.1f})")
        if dw_column:
            if "dw_reduce_us" in row:
                cells.append(f"{row['dw_reduce_us']:.1f} ({row['dw_reduce_pct']:.1f}%); "
                             f"no dw: {row.get('bwd_no_dw_us', float('nan')):.1f}")
            else:
                cells.append("fails" if "dw_reduce_error" in row else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_shape(text):
    m, n = text.lower().split("x")
    return int(m), int(n)


def write_json(path, rows):
    device = torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE
    with open(path, "w") as f:
        json.dump({"device": device, "torch": torch.__version__, "rows": rows}, f, indent=1)


def prog_name(module):
    """The name a CLI was run by, for its usage line: the console script (rmsnorm-bench,
    rmsnorm-demo, rmsnorm-sweep) or `python -m <module>`."""
    name = os.path.basename(sys.argv[0])
    return name if name.startswith("rmsnorm-") else f"python -m {module}"


def main(argv=None):
    """`rmsnorm-bench` / `python -m rmsnorm_tools.bench`."""
    p = argparse.ArgumentParser(prog=prog_name("rmsnorm_tools.bench"), description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", nargs="+", choices=list(MOVED),
                   help="default: fwd add (with --suite: fwd add bwd)")
    p.add_argument("--dtype", nargs="+", choices=list(DTYPES),
                   help="default: bf16 (with --suite: bf16 fp16 fp32)")
    p.add_argument("--shapes", nargs="+", type=parse_shape, default=SHAPES,
                   metavar="MxN")
    p.add_argument("--quant", nargs="+", choices=list(QUANT_MODES), default=["token"],
                   help="scale modes of --op quant add_quant (default token)")
    p.add_argument("--quant-dtype", nargs="+", choices=list(QUANT_DTYPES), default=["fp8"],
                   help="formats of --op quant add_quant (default fp8: float8_e4m3fn)")
    p.add_argument("--peers", nargs="*", choices=["eager", "compile", LAUNCHER, PLAIN],
                   help="default: eager (with --suite: none); %s is rmsnorm's own call with "
                        "CUDA tensors sent to the Python launcher" % LAUNCHER)
    p.add_argument("--timing", choices=list(TIMERS), default="median",
                   help="how --shapes are timed (default median: single calls; graph, "
                        "graph_hbm: per call of a CUDA graph's replay, as the suite times "
                        "its decode and 2^23-element cases)")
    p.add_argument("--suite", action="store_true",
                   help="the fixed suite of rmsnorm_tools.suite (every width a model uses at 2^26 "
                        "and 2^23 elements, and decode timed from CUDA graphs) instead of "
                        "--shapes")
    p.add_argument("--baseline", metavar="PATH",
                   help="a JSON of an earlier run (--json; the H200's: a checkout's "
                        "docs/results/h200-baseline.json): print every case whose %% of copy "
                        f"fell by more than {suite.POINTS} points, and exit 1 if any did")
    p.add_argument("--warmup", type=float, default=25, help="do_bench warm-up, ms")
    p.add_argument("--rep", type=float, default=100, help="do_bench repeats, ms")
    p.add_argument("--json", metavar="PATH",
                   help="also write the results as JSON (rewritten after every shape)")
    p.add_argument("--overhead", action="store_true",
                   help="only measure host time per call at a decode shape")
    args = p.parse_args(argv)
    check_device("rmsnorm_tools.bench")
    if args.overhead:
        print(overhead_table())
        return
    if args.suite:
        todo = suite.cases(args.dtype or suite.DTYPES, args.op or suite.OPS)
        peers = args.peers or []
    else:
        todo = [(op, dt, m, n, args.timing) for op in args.op or ["fwd", "add"]
                for dt in args.dtype or ["bf16"] for m, n in args.shapes]
        quants = list(itertools.product(args.quant, args.quant_dtype))
        todo = [case + q for case in todo
                for q in ([(q,) for q in quants] if case[0] in QUANT_OPS else [()])]
        peers = ["eager"] if args.peers is None else args.peers
    baseline = suite.load_rows(args.baseline) if args.baseline else None  # fail early
    rows = []
    for op, dt, m, n, timing, *quant in todo:
        rows.append(run_shape(op, m, n, DTYPES[dt], peers, args.warmup, args.rep, timing,
                              *quant))
        print(format_table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
        if args.json:  # a run cut short by a time limit keeps the shapes done
            write_json(args.json, rows)
    fell = {k for k, _, _ in suite.regressions(rows, baseline)} if baseline is not None else ()
    for i, row in enumerate(rows):
        # Timed again: one case's single timing can read up to 20 points low in a run and not
        # in the next (two suite runs of the same code, 2026-12-01); a slower kernel reads low
        # in both.
        if suite.key(row) in fell:
            op, dt, m, n, timing = suite.key(row)
            again = run_shape(op, m, n, getattr(torch, dt), peers, args.warmup, args.rep, timing)
            rows[i] = suite.better_timing(row, again)
    if fell and args.json:
        write_json(args.json, rows)
    print(format_table(rows))
    if baseline is not None:
        found = suite.regressions(rows, baseline)
        print(suite.format_regressions(found, args.baseline))
        if found:
            sys.exit(1)


if __name__ == "__main__":
    main()
