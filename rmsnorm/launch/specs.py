"""Which kernel a call gets: the launch table's row for its shape and dtypes, and the
kernel's specialization (constexprs, grid, sizes and strides, alignment class) prepared for
its launch. The forward, backward and quantized launchers ask here; nothing else decides it.

The caches are keyed by everything the prepared kernel depends on (shape, strides, dtypes,
device, options): a Prepared reuses the code it compiled for the first call's arguments."""

import functools
from typing import NamedTuple

import torch
import triton.language as tl

from rmsnorm.kernels.backward import bwd_loop_kernel, bwd_tile_kernel, dw_reduce_kernel
from rmsnorm.kernels.backward_split import bwd_cols_kernel, bwd_dot_kernel
from rmsnorm.kernels.forward import (fwd_loop_kernel, fwd_quant_loop_kernel,
                                     fwd_quant_tile_kernel, fwd_tile_kernel)
from rmsnorm.kernels.forward_split import fwd_scale_kernel, fwd_sumsq_kernel
from rmsnorm.launch import configs, dtypes
from rmsnorm.launch.device import (INTERPRETED, INTERPRETER_PROGRAMS, arch, grid, pdl, programs,
                                   sm_count)
from rmsnorm.launch.layout import plan_rows
from rmsnorm.launch.runner import Prepared

# dtypes' names by torch dtype: table_dtype runs on every launch the table picks.
_NAMES = {getattr(torch, attr): name for attr, name in dtypes.TORCH.items()}

# The split backward's row segment, in tiles of the launch's block_n (a prototype constant).
SPLIT_SEG_TILES = 8


def table_dtype(*streamed):
    """The table's name of the streamed tensors' dtype; None when they differ (rows of the
    widest element's size then serve)."""
    kinds = {t.dtype for t in streamed if t is not None}
    return _NAMES.get(kinds.pop()) if len(kinds) == 1 else None


def forward_launch(x, residual, weight, quantized=None):
    """The launch table's launch for the forward of x's rows (with the fused add's residual;
    quantized: the quantized forward's scales, configs.QUANTIZED_SCALES)."""
    fused = residual is not None
    return configs.forward_launch(
        x.shape[-1], max(x.element_size(), residual.element_size() if fused else 0), fused,
        weight.element_size() if weight is not None else 0, arch(x.device),
        table_dtype(x, residual), quantized)


def fp32_sum_launch(launch, x, residual, weight):
    """configs.fp32_sum_launch for x's rows."""
    return configs.fp32_sum_launch(
        launch, max(x.element_size(), residual.element_size()),
        weight.element_size() if weight is not None else 0, arch(x.device),
        table_dtype(x, residual))


def backward_launch(dy, x, weight, dresidual):
    """The launch table's launch for the backward of x's rows."""
    widest = max(t.element_size() for t in (x, dy, dresidual) if t is not None)
    return configs.backward_launch(x.shape[-1], widest, dresidual is not None,
                                   weight.element_size() if weight is not None else 0,
                                   arch(x.device), table_dtype(x, dy, dresidual))


def check_launch(launch, n, op):
    """Refuses, by name, an explicit launch (tests, the sweep) that cannot serve rows of n
    elements for op ("fwd" or "bwd")."""
    if launch.path == "tile" and launch.block_n * launch.chunks < n:
        raise ValueError(f"launch {launch} holds {launch.block_n * launch.chunks} columns; "
                         f"the rows have {n}")
    if launch.keep_stored and op == "bwd":
        raise ValueError(f"launch {launch}: keep_stored is a forward tile's; the backward "
                         "holds its rows in fp32")
    if launch.keep_stored and launch.path != "tile":
        raise ValueError(f"launch {launch}: keep_stored is for tile launches (a looped row "
                         "is read again, not kept)")


def split_below(device, fused):
    """Looped rows fewer than this take the split forward (configs.SPLIT_FORWARD_SM_DIVISOR)."""
    if INTERPRETED:
        return INTERPRETER_PROGRAMS
    return configs.split_forward_below("add" if fused else "fwd", sm_count(device))


def as_twin(plan, n):
    """Whether the row strides of `plan` make Triton compile the kernel that the same rows
    laid out contiguously (row stride n) get: each stride below 2^31 exactly when n is
    (Triton types larger ones as 64-bit) and a multiple of 16 exactly when n is (the JIT
    specializes on it, and a kernel knowing its rows aligned sums them in another order)."""
    if plan.rows == 1:
        return True
    levels = 2 if plan.two_level else 1
    return all((st < 2 ** 31) == (n < 2 ** 31) and (st % 16 == 0) == (n % 16 == 0)
               for pair in plan.strides.values() for st in pair[:levels])


def row_vector(row_dtypes):
    """configs.row_vector of the widest of the row's dtypes (None: a tensor the call lacks)."""
    return configs.row_vector(max(d.itemsize for d in row_dtypes if d is not None))


def strides_of(plan, n):
    """The row strides the kernel gets. A single row's are never used: it gets n, as
    librmsnorm passes them, since the JIT specializes on a stride's divisibility by 16 and
    both paths must compile the same kernel."""
    if plan.rows == 1:
        return {name: (n, 0) for name in plan.strides}
    return plan.strides


def acc(dtype):
    return tl.float64 if dtype == torch.float64 else tl.float32


class Quantized(NamedTuple):
    """The quantized epilogue's constexprs: its mode (rmsnorm.kernels.quantize's STATIC,
    TOKEN, GROUP), the codes' Triton dtype, the group size (0: no groups) and whether vLLM's
    fused kernels' formulas quantize (quantizer="vllm_fused")."""
    mode: int
    code_dtype: object
    group_size: int
    vllm_fused: bool


# The compiled kernels' pointer parameters, in order: the launcher passes its tensors so, and
# the AOT build types them (FP32_POINTERS are fp32 whatever the activations' dtype; the
# quantized forward's Y holds its codes).
FORWARD_POINTERS = ("X", "RESIDUAL", "W", "Y", "RESIDUAL_OUT", "RSTD")
QUANT_POINTERS = FORWARD_POINTERS + ("SCALE", "SCALE_UB", "UNQ")
BACKWARD_POINTERS = ("DY", "X", "W", "RSTD", "DX", "DRESIDUAL", "DWP")
REDUCE_POINTERS = ("DWP", "DW")
FP32_POINTERS = frozenset({"RSTD", "DWP", "SCALE", "SCALE_UB"})


def forward_pointers(quantized):
    return FORWARD_POINTERS if quantized is None else QUANT_POINTERS


# The kernel and constexprs of a specialization, for the launcher's calls (below) and for the
# AOT build's kernels (rmsnorm.aot.build): both take them from here, so that a compiled kernel
# is the one the launcher runs for the same call.

def forward_kernel(launch, quantized):
    if quantized is not None:
        return fwd_quant_tile_kernel if launch.path == "tile" else fwd_quant_loop_kernel
    return fwd_tile_kernel if launch.path == "tile" else fwd_loop_kernel


def forward_constexprs(launch, *, fused, has_w, two_level, llama, acc_dtype, vec, fp32_sum,
                       pdl_, soft_bf16, quantized=None):
    """The forward's constexprs, the fused add's and the quantized forward's (quantized: a
    Quantized; None for y unquantized)."""
    flags = dict(BLOCK_N=launch.block_n, ROWS=launch.rows, NUM_STAGES=launch.num_stages,
                 W_RESIDENT=launch.w_resident, CHUNKS=launch.chunks,
                 KEEP_STORED=launch.keep_stored, HAS_RESIDUAL=fused, HAS_W=has_w,
                 TWO_LEVEL=two_level, LLAMA=llama, ACC=acc_dtype, SOFT_BF16=soft_bf16,
                 PDL=pdl_, VEC=vec, NORMALIZE_FP32_SUM=fp32_sum)
    if quantized is not None:
        flags.update(QUANT=quantized.mode, Q_DTYPE=quantized.code_dtype,
                     GROUP_SIZE=quantized.group_size, QUANTIZER_FUSED=quantized.vllm_fused)
    return flags


def backward_kernel(launch):
    return bwd_tile_kernel if launch.path == "tile" else bwd_loop_kernel


def backward_constexprs(launch, *, has_dresidual, has_w, has_dw, two_level, llama, acc_dtype,
                        pdl_, soft_bf16):
    return dict(BLOCK_N=launch.block_n, ROWS=launch.rows, NUM_STAGES=launch.num_stages,
                W_RESIDENT=launch.w_resident, DW_RESIDENT=launch.dw_resident,
                CHUNKS=launch.chunks, HAS_DRESIDUAL=has_dresidual, HAS_W=has_w, HAS_DW=has_dw,
                TWO_LEVEL=two_level, LLAMA=llama, ACC=acc_dtype, SOFT_BF16=soft_bf16,
                PDL=pdl_)


def reduce_constexprs(n, *, pdl_, soft_bf16):
    """(constexprs, num_warps) of the dw reduction over rows of n partials."""
    block_p, block_c, warps = configs.reduce_launch(n)
    return dict(BLOCK_P=block_p, BLOCK_C=block_c, SOFT_BF16=soft_bf16, PDL=pdl_), warps


@functools.lru_cache(maxsize=4096)
def forward_spec(shape, device, x_meta, residual_meta, y_meta, residual_out_meta, w_dtype,
                 has_rstd, casting_mode, launch, quantized=None, unquantized_dtype=None,
                 fp32_sum=False):
    """(prepared kernel, sizes and strides, whether the strides are the contiguous twin's
    kind: as_twin) for one call signature, or None when the rows need more than two levels
    of strides. quantized: the quantized epilogue's Quantized; unquantized_dtype: its y's
    dtype (y_meta is then the quantized output's)."""
    fused = residual_meta is not None
    named = {"x": x_meta, "y": y_meta, "residual": residual_meta,
             "residual_out": residual_out_meta}
    strides = {k: m[0][:-1] for k, m in named.items() if m is not None}
    plan = plan_rows(shape[:-1], strides)
    if plan is None:
        return None
    n = shape[-1]
    # A quantized y stands for its unquantized twin, which the kernel also stores (bf16 x,
    # fp16 weight: an fp32 y).
    row_dtypes = (x_meta[1], w_dtype, unquantized_dtype or y_meta[1],
                  *(m[1] for m in (residual_meta, residual_out_meta) if m is not None))
    st = strides_of(plan, n)
    zero = (0, 0)
    sizes = (plan.rows, n, plan.inner, plan.rows if has_rstd else 0,
             *st["x"], *st.get("residual", zero), *st["y"], *st.get("residual_out", zero))
    flags = forward_constexprs(launch, fused=fused, has_w=w_dtype is not None,
                               two_level=plan.two_level, llama=casting_mode == "llama",
                               acc_dtype=acc(x_meta[1]), vec=row_vector(row_dtypes),
                               fp32_sum=fp32_sum, pdl_=pdl(device), soft_bf16=INTERPRETED,
                               quantized=quantized)
    kernel = forward_kernel(launch, quantized)
    pointers = len(forward_pointers(quantized))
    return (prepare(kernel, grid(launch, plan.rows, device), pointers, flags,
                    launch.num_warps, (n, *sizes[4:]), launch.max_registers),
            sizes, as_twin(plan, n))


@functools.lru_cache(maxsize=1024)
def split_forward_spec(device, items, fused, has_w, two_level, casting_mode, row_dtypes,
                       launch, ints):
    """The split forward's two prepared kernels (sums of squares, then the scaling). Every
    dtype they see is in the key (`row_dtypes`: x, residual, weight, y, residual_out)."""
    common = dict(BLOCK_N=launch.block_n, TWO_LEVEL=two_level, ACC=acc(row_dtypes[0]),
                  SOFT_BF16=INTERPRETED, PDL=pdl(device), VEC=row_vector(row_dtypes))
    programs_ = min(items, programs(launch, device))
    sumsq = prepare(fwd_sumsq_kernel, programs_, 4, dict(common, HAS_RESIDUAL=fused),
                    launch.num_warps, ints)
    scale = prepare(fwd_scale_kernel, programs_, 5,
                    dict(common, HAS_W=has_w, LLAMA=casting_mode == "llama"),
                    launch.num_warps, ints)
    return sumsq, scale


@functools.lru_cache(maxsize=4096)
def backward_spec(shape, device, dy_meta, x_meta, dx_meta, dresidual_meta, w_dtype, need_dw,
                  casting_mode, launch):
    """(prepared kernel, sizes and strides, as_twin) for one backward call signature, or
    None when the rows need more than two levels of strides. Every dtype the kernel sees is
    in the key."""
    named = {"dy": dy_meta, "x": x_meta, "dx": dx_meta, "dresidual": dresidual_meta}
    strides = {k: m[0][:-1] for k, m in named.items() if m is not None}
    plan = plan_rows(shape[:-1], strides)
    if plan is None:
        return None
    st = strides_of(plan, shape[-1])
    sizes = (plan.rows, shape[-1], plan.inner,
             *st["dy"], *st["x"], *st["dx"], *st.get("dresidual", (0, 0)))
    flags = backward_constexprs(launch, has_dresidual=dresidual_meta is not None,
                                has_w=w_dtype is not None, has_dw=need_dw,
                                two_level=plan.two_level, llama=casting_mode == "llama",
                                acc_dtype=acc(x_meta[1]), pdl_=pdl(device),
                                soft_bf16=INTERPRETED)
    kernel = backward_kernel(launch)
    return (prepare(kernel, grid(launch, plan.rows, device), len(BACKWARD_POINTERS), flags,
                    launch.num_warps, (shape[-1], *sizes[3:])), sizes,
            as_twin(plan, shape[-1]))


def split_backward_plan(rows, n, launch, device):
    """(segments, column blocks, rows per group, groups) of the split backward: the row's
    segments of SPLIT_SEG_TILES tiles for the dot products, and the groups of rows whose dw
    partials one program of a column block sums."""
    segments = -(-n // (launch.block_n * SPLIT_SEG_TILES))
    col_blocks = -(-n // launch.block_n)
    rows_per_group = -(-rows // max(1, min(rows, programs(launch, device) // col_blocks)))
    return segments, col_blocks, rows_per_group, -(-rows // rows_per_group)


def split_backward_kernels(rows, n, ints, launch, device, has_w, two_level, dtype,
                           has_dresidual, need_dw, casting_mode):
    """The split backward's two prepared kernels (the row's dot products by segment, then
    dx and the dw partials by column block); ints: n and the strides."""
    segments, col_blocks, _, groups = split_backward_plan(rows, n, launch, device)
    common = dict(HAS_W=has_w, TWO_LEVEL=two_level, ACC=acc(dtype), PDL=pdl(device))
    dot = prepare(bwd_dot_kernel, min(rows * segments, programs(launch, device)), 5,
                  dict(common, BLOCK_N=launch.block_n, SEG_TILES=SPLIT_SEG_TILES,
                       NUM_STAGES=launch.num_stages), launch.num_warps, ints)
    cols = prepare(bwd_cols_kernel, groups * col_blocks, 8,
                   dict(common, BLOCK_N=launch.block_n, BLOCK_S=configs.next_pow2(segments),
                        NUM_STAGES=launch.num_stages, HAS_DRESIDUAL=has_dresidual,
                        HAS_DW=need_dw, LLAMA=casting_mode == "llama", SOFT_BF16=INTERPRETED),
                   launch.num_warps, ints)
    return dot, cols


@functools.lru_cache(maxsize=1024)
def reduce_spec(n, partial_dtype, dw_dtype, device):
    """The dw reduction over rows of n partials. The dtypes and the device are part of
    the key: the compiled kernel Prepared reuses is specific to them."""
    flags, warps = reduce_constexprs(n, pdl_=pdl(device), soft_bf16=INTERPRETED)
    return prepare(dw_reduce_kernel, -(-n // flags["BLOCK_C"]), len(REDUCE_POINTERS), flags,
                   warps, (n,))


def prepare(kernel, grid_, n_pointers, flags, num_warps, ints, max_registers=0):
    """ints: the int arguments Triton specializes on (n and the row strides)."""
    # Constexprs in the kernel's parameter order: the compiled launcher takes them so.
    constexprs = {name: flags[name] for name in kernel.arg_names if name in flags}
    assert len(constexprs) == len(flags), "a flag is not a parameter of the kernel"
    return Prepared(kernel, grid_, n_pointers, constexprs, num_warps,
                    all(v % 16 == 0 for v in ints), max_registers)
