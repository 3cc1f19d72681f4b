"""The launch table and the launch heuristic around it.

The table itself is generated: `python -m rmsnorm_tools.sweep` measures launches on a GPU
and `python -m rmsnorm_tools.table_gen` writes the winners into one file per arch in
rmsnorm/launch/tables (docs/DEVELOPING.md, "Tuning the launch table"); this module reads it. The
Python launcher (rmsnorm.launch.ops) takes its launches through `forward_launch` and
`backward_launch`; the AOT compiler (rmsnorm.aot) compiles one kernel per row of `rules_for`,
and emits the rows' width bounds for the C++ runtime, so every path picks the same kernel for
the same shape.

A row serves the widths above the previous row's `max_n` up to its own: the sweep measured
it at its `max_n` (`swept`), and the widths below it, down to the last measured width, take
the same launch (docs/PERFORMANCE.md, "Tuning", gives what widths in between measured).

Paths:
- "tile": a row fits one tile of block_n columns (held in registers); `rows` rows per program
  step; programs loop over row blocks (persistent grid).
- "loop": any longer row; one program walks it twice in tiles of block_n (the second pass is
  served mostly from L2). No limit on N.
"""

import dataclasses
import functools
import typing

# Largest row, in elements, held in one tile; longer rows take the looped path. Above this the
# fp32 copy of the row no longer fits the registers of one program.
MAX_TILE = {2: 32768, 4: 32768, 8: 8192}
# The same for a forward tile kept in its 16-bit storage dtype (Launch.keep_stored): half the
# registers (ptxas: 65536 bf16 or fp16 values in 1024 threads at 64 registers, no spill).
MAX_KEPT_TILE = {2: 65536}


# Narrowest tile: shorter rows are masked. One floor keeps tiny rows off a family of
# specializations of their own (the AOT build compiles every one).
MIN_TILE = 16
# Shared memory a block may take on each GPU arch (the opt-in maximum), by compute capability;
# archs not listed take the smallest. The pipelined loads of one program may take all but
# SMEM_MARGIN of it (Triton's own scratch, e.g. for reductions, needs the rest): deeper
# pipelines are cut back one stage at a time. The table itself is tuned on sm_90.
SMEM_LIMIT = {80: 166912, 87: 166912, 90: 232448, 100: 232448, 103: 232448}
SMEM_LIMIT_DEFAULT = 101376  # sm_86, sm_89, sm_120: 99 KB
SMEM_MARGIN = 27 * 1024
DEFAULT_ARCH = 90  # what the interpreter and the CPU assume
# Programmatic dependent launch (rmsnorm.kernels.prior_grid) needs PTX's griddepcontrol, from
# sm_90 on: kernels for these archs wait on the prior grid (a no-op unless launched with PDL).
PDL_MIN_ARCH = 90
# A looped forward of fewer rows than the SMs // SPLIT_FORWARD_SM_DIVISOR[op] takes the split
# forward (rmsnorm.kernels.forward_split: the same bits, more programs). Measured on the H200
# (132 SMs) at 2^23 elements from CUDA graphs, bf16 (2026-12-01, docs/PERFORMANCE.md): the
# forward gains 25 points of copy at 32 rows and 9 at 64, loses 28 at 128; the fused add gains
# 18 at 32 rows, loses 2 at 64 and 13 at 128. So: below half the SMs for the forward, a
# quarter for the fused add. librmsnorm has no split forward; the op library asks it to refuse
# these calls (RMSNORM_LAUNCH_REFUSE_SPLIT_ROWS) and hands them to the Python launcher.
SPLIT_FORWARD_SM_DIVISOR = {"fwd": 2, "add": 4}


def compile_options(vectorised: bool, max_registers: int = 0) -> dict:
    """Compiler options of a kernel, the same on every path. A reduction whose threads hold
    one element of the row each (the unvectorised kernels) starts by adding a lane's product
    to its partner's, and FMA contraction fuses each lane's own product in, so the lanes that
    hold copies of the sum disagree in the last bit (rstd and y then show one copy or another
    at random; compute-sanitizer reports the race). Those kernels are compiled without it.
    Vectorised kernels sum several elements per thread first (fused or not, in one fixed
    order) and only then across lanes: they keep FMAs, which small rows need (n = 128 is
    ~20% slower without them). max_registers: Launch.max_registers (0: no cap)."""
    options = {"enable_fp_fusion": vectorised}
    if max_registers:
        options["maxnreg"] = max_registers
    return options


def row_vector(elem_bytes: int) -> int:
    """The forward kernels' VEC: elements of a row that each thread loads or stores at a time
    (at most: rows off 16 bytes take one), 16 bytes of the widest of the row's tensors
    (elem_bytes: x, residual, weight, y and residual_out; not a quantized output, whose
    bytes are fewer). Every access of the row takes as many, so the row has one layout, and
    its squares one order, in every kernel that normalizes it, whatever else the kernel
    reads or writes (rmsnorm.kernels.forward._row_cols)."""
    return 16 // elem_bytes


def waits_on_prior_grid(arch: int) -> bool:
    return arch >= PDL_MIN_ARCH


def split_forward_below(op: str, sm_count: int) -> int:
    """Looped rows of op ("fwd" or "add") fewer than this take the split forward."""
    return sm_count // SPLIT_FORWARD_SM_DIVISOR[op]


def widest_tile(elem_bytes: int, keep_stored: bool = False) -> int:
    """The widest tile (block_n x chunks) of elem_bytes-byte rows."""
    return MAX_KEPT_TILE.get(elem_bytes, MAX_TILE[elem_bytes]) if keep_stored \
        else MAX_TILE[elem_bytes]


def smem_budget(arch: int) -> int:
    return SMEM_LIMIT.get(arch, SMEM_LIMIT_DEFAULT) - SMEM_MARGIN


@dataclasses.dataclass(frozen=True)
class Launch:
    path: str  # "tile" or "loop" (see the module docstring)
    block_n: int  # columns per tile, a power of two
    rows: int  # rows per program per step (tile path); 1 otherwise
    num_warps: int
    num_stages: int  # software pipelining depth of the program's loop
    programs_per_sm: int  # persistent grid: min(work items, SMs * programs_per_sm) programs
    w_resident: bool  # tile path: weight held in registers across rows, else re-read per row
    # Backward tile path: the program's dw partial sums held in registers across its rows
    # (written once), else added to its partial row in global memory (L2) after every step,
    # which frees registers for wide rows. The loop path always does the latter.
    dw_resident: bool = True
    # Tile path: the row is held as `chunks` tiles of block_n columns, so that a width such
    # as 3 x 2048 takes no tile of the next power of two (1 elsewhere).
    chunks: int = 1
    # Forward tile path: the row is kept for its second pass (y) as loaded, two 16-bit values
    # to a register, and widened again there, rather than held in fp32: half the registers,
    # which lets a row of 65536 bf16 values stay in one program's registers (read once).
    keep_stored: bool = False
    # Registers a thread may take (Triton's maxnreg; 0: ptxas chooses): a cap that lets more
    # programs share an SM, set by quantized_launch only (the table's sweep does not vary it;
    # rmsnorm_tools.quant_sweep --caps does).
    max_registers: int = 0

    def grid(self, m: int, sm_count: int) -> int:
        """Number of programs for m rows on a device with sm_count multiprocessors."""
        work = -(-m // self.rows)
        return max(1, min(work, sm_count * self.programs_per_sm))


@dataclasses.dataclass(frozen=True)
class Rule:
    """One row of the launch table: the launch of op for rows of one element size's dtypes
    (`dtype` None), or of one dtype's own (`dtype` its name), whose width n is at most max_n
    and above the previous row's max_n (None: every longer row). Tile rows hold a row in one
    tile of block_n = next power of two of n columns (so a tile row never spans two powers of
    two), or in `chunks` tiles of a narrower block_n that together hold max_n; loop rows walk
    a row of any length in tiles of block_n. `swept` names the sweep measurements the row
    holds ("" when it was carried over from an earlier table without one)."""

    op: str  # "fwd", "add" (fused residual add + forward) or "bwd" (backward, both forms)
    # The widest streamed element's size, 2 (bf16, fp16), 4 (fp32) or 8 (fp64).
    elem_bytes: int
    # None: rows that serve every dtype of that size; a dtype's name ("fp16", dtypes.BYTES):
    # rows of that dtype's own, which serve it instead (the sweep measured it apart).
    dtype: typing.Optional[str]
    max_n: typing.Optional[int]
    path: str
    block_n: int
    rows: int
    num_warps: int
    num_stages: int
    programs_per_sm: int
    w_resident: bool
    dw_resident: bool = True
    chunks: int = 1
    keep_stored: bool = False
    swept: str = ""


def _derived_fp64(rules):
    """float64 rows (not swept: the path for gradcheck): the 4-byte rows with half the rows
    per program, tiles no wider than MAX_TILE[8] (longer rows take the loop row)."""
    out = []
    for r in rules:
        if (r.elem_bytes, r.dtype) != (4, None) or (r.path == "tile" and
                                                     r.block_n > MAX_TILE[8]):
            continue
        rows = max(1, r.rows // 2) if r.path == "tile" else r.rows
        block_n = min(r.block_n, MAX_TILE[8])
        out.append(dataclasses.replace(r, elem_bytes=8, rows=rows, block_n=block_n, swept=""))
    return out


@functools.lru_cache(maxsize=None)
def rules(arch: int = DEFAULT_ARCH) -> typing.Tuple[Rule, ...]:
    """The launch table of a GPU arch (rmsnorm/launch/tables: generated by the sweep), grouped by op
    and element size, each group by max_n."""
    from rmsnorm.launch import tables

    base = tuple(Rule(*row) for row in tables.table_for(arch).RULES)
    return base + tuple(_derived_fp64(base))


def rules_for(op: str, elem_bytes: int, arch: int = DEFAULT_ARCH,
              dtype: typing.Optional[str] = None) -> typing.Tuple[Rule, ...]:
    """The rows of one op for rows of `dtype` (a dtypes.BYTES name; None: dtypes mixed) whose
    widest element takes elem_bytes: the dtype's own rows where the table has them, else
    those of its element size; narrowest first (the last covers every longer row)."""
    if dtype is not None:
        own = tuple(r for r in rules(arch) if r.op == op and r.dtype == dtype)
        if own:
            return own
    return tuple(r for r in rules(arch)
                 if r.op == op and r.elem_bytes == elem_bytes and r.dtype is None)


OPS = ("fwd", "add", "bwd")

def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _stage_bytes(width, rows, elem_bytes, weight_bytes, streams, reloads_weight):
    """Bytes one pipeline stage of a program's loop loads into shared memory (cp.async)."""
    return width * (rows * elem_bytes * streams + (weight_bytes if reloads_weight else 0))


def _fit_stages(stages, per_stage, budget):
    while stages > 1 and (stages - 1) * per_stage > budget:
        stages -= 1
    return stages


def streams(op: str, fused: bool) -> int:
    """Row-sized tensors a program's pipelined loop loads: x (and the residual, fused) for the
    forward ops; x and dy (and the residual's gradient, fused) for the backward."""
    return (3 if fused else 2) if op == "bwd" else (2 if fused else 1)


def forward_launch(n: int, elem_bytes: int, fused: bool, weight_bytes: int = 0,
                   arch: int = DEFAULT_ARCH, dtype: typing.Optional[str] = None,
                   quantized: typing.Optional[str] = None) -> Launch:
    """The launch for rows of n elements of elem_bytes bytes (the widest of x and residual),
    all of `dtype` (a dtypes.BYTES name; None when they differ), plain or fused-add forward;
    weight_bytes is the weight's element size (0: no weight); arch the GPU's compute
    capability (major * 10 + minor); quantized: the quantized forward's launch, for its
    scales (QUANTIZED_SCALES: "static", "token" or "group"; quantized_launch)."""
    op = "add" if fused else "fwd"
    return _launch(op, n, elem_bytes, streams(op, fused), weight_bytes, arch, dtype, quantized)


def backward_launch(n: int, elem_bytes: int, fused: bool, weight_bytes: int = 0,
                    arch: int = DEFAULT_ARCH, dtype: typing.Optional[str] = None) -> Launch:
    """The backward launch for rows of n elements (elem_bytes: the widest of x, dy and, fused,
    the residual's gradient; dtype: theirs, as forward_launch's)."""
    return _launch("bwd", n, elem_bytes, streams("bwd", fused), weight_bytes, arch, dtype)


def rule_index(op: str, n: int, elem_bytes: int, arch: int = DEFAULT_ARCH,
               dtype: typing.Optional[str] = None) -> int:
    """Index in rules_for(op, elem_bytes, arch, dtype) of the row that serves rows of n
    elements: the first whose max_n is n or more (the last row takes every longer row)."""
    group = rules_for(op, elem_bytes, arch, dtype)
    for i, rule in enumerate(group[:-1]):
        if n <= rule.max_n:
            return i
    return len(group) - 1


# The narrowest tile (block_n x chunks) quantized_rule changes.
QUANTIZED_MIN_TILE = 2048
# The most programs per SM of a quantized forward whose scales come from its rows (per token
# or per group).
QUANTIZED_ROW_SCALE_PROGRAMS_PER_SM = 8
# Where the quantized forward's scales come from, by name, in the order of its kernels' QUANT
# codes 1, 2, 3 (rmsnorm.kernels.quantize's STATIC, TOKEN, GROUP; 0 is the plain forward):
# the one list the launcher's and the AOT build's names of the modes derive from.
QUANTIZED_SCALES = ("static", "token", "group")
# Register caps (Launch.max_registers) of the quantized forward on 2-byte rows (bf16, fp16),
# by (op, scales) and the table row's (tile columns, warps): a cap lets more programs share an
# SM (65536 registers), at the price of the spills ptxas makes to meet it. Chosen by
# `rmsnorm_tools.quant_sweep --caps 0 128 96 80 64 --narrow` on the H200 (2026-12-03, bf16 ->
# e4m3, 2^26 elements; docs/results/sweeps/h200-2026-12-03-quant-caps-3.json, the kernels of
# commit cf94d6b), the fastest where it beat the uncapped kernel by more than a point: e.g.
# the per-group forward at 16384 columns 40.9 -> 61.9% (one program of 8 warps per SM ->
# two), the per-group fused add at 16384 67.1 -> 89.4%. Per token, the fused add at 4096 and
# 8192 keeps the cap of the first sweeps (within a point of none in the third). Rows of other
# widths or warps, and of other element sizes, take no cap.
QUANTIZED_REGISTER_CAPS = {
    ("fwd", "static"): {(16384, 8): 80},
    ("fwd", "token"): {(4096, 4): 64, (16384, 8): 80},
    ("fwd", "group"): {(2048, 4): 64, (4096, 4): 64, (8192, 8): 64, (16384, 8): 128},
    ("add", "static"): {(16384, 16): 64},
    ("add", "token"): {(4096, 4): 128, (8192, 4): 128, (16384, 16): 64},
    ("add", "group"): {(4096, 4): 128, (8192, 4): 128, (16384, 16): 64},
}
# Tiles of this many columns or more re-read the weight per row (from L1); narrower ones hold
# it in registers. Measured as the caps were: at 2048 columns holding it took the static
# forward 85.7 -> 92.3%, the per-token forward 63.6 -> 73.9% and the per-token and per-group
# fused adds +3.4 and +2.2 points (the per-group forward -1.7, the static fused add -0.9); at
# 4096 the static forward lost 8.5 points and the per-group forward 6.5.
QUANTIZED_WEIGHT_REREAD_TILE = 4096


def quantized_rule(rule: Rule, row_scales: bool) -> Rule:
    """The quantized forward's form of a forward table row; row_scales: its scales come from
    the rows (per token, per group), not given (static). Its kernels hold more per element
    than the plain forward's (the row's max, its scale, the quotient), so the weight is
    re-read per row (from L1) rather than held in registers from tiles of
    QUANTIZED_WEIGHT_REREAD_TILE columns on (held below), and a tile takes one row where
    a row alone spans every thread of the program in whole 16-byte vectors; with row scales,
    at most QUANTIZED_ROW_SCALE_PROGRAMS_PER_SM programs per SM, each walking more rows with
    the next row's loads in flight while it quantizes one (quantized_launch adds a register
    cap). None of this changes which thread adds which squares, nor in what order (every
    access of the row takes row_vector's elements per thread, whatever the launch): the row's
    1/rms, and so y, stay the plain forward's bit for bit (which the quantized output must
    quantize). Measured on the H200
    at 2^26 elements (bf16 to e4m3, 2026-12-03, docs/PERFORMANCE.md "Quantized output":
    rmsnorm_tools.quant_sweep): the fused add at 4096-8192 columns +8 to +25 points of copy,
    the forward at 2048 +2 to +13 (the table's own rows were tuned for the plain forward
    only). Narrower tiles, where the table holds many rows per program, keep the table's
    launch (not measured)."""
    if rule.path != "tile" or rule.block_n * rule.chunks < QUANTIZED_MIN_TILE:
        return rule
    vec = 16 // rule.elem_bytes
    rows = 1 if rule.block_n >= 32 * rule.num_warps * vec else rule.rows
    per_sm = min(rule.programs_per_sm, QUANTIZED_ROW_SCALE_PROGRAMS_PER_SM) if row_scales \
        else rule.programs_per_sm
    held = rule.block_n * rule.chunks < QUANTIZED_WEIGHT_REREAD_TILE
    return dataclasses.replace(rule, rows=rows, w_resident=held, programs_per_sm=per_sm)


def quantized_launch(rule: Rule, scales: str, streams: int, weight_bytes: int,
                     arch: int = DEFAULT_ARCH) -> Launch:
    """The quantized forward's launch of a forward table row for scales (QUANTIZED_SCALES):
    quantized_rule's, under the register cap QUANTIZED_REGISTER_CAPS gives its row."""
    if scales not in QUANTIZED_SCALES:
        raise ValueError(f"scales is {scales!r}: one of {', '.join(QUANTIZED_SCALES)}")
    launch = rule_launch(quantized_rule(rule, scales != "static"), streams, weight_bytes, arch)
    caps = QUANTIZED_REGISTER_CAPS[(rule.op, scales)]
    tile = (launch.block_n * launch.chunks, launch.num_warps)
    cap = caps.get(tile, 0) if launch.path == "tile" and rule.elem_bytes == 2 else 0
    return dataclasses.replace(launch, max_registers=cap)


def fp32_sum_launch(launch: Launch, elem_bytes: int, weight_bytes: int,
                    arch: int = DEFAULT_ARCH, dtype: typing.Optional[str] = None) -> Launch:
    """The launch that normalizes the fused add's unrounded sum instead of `launch`: the sum
    is held in fp32, so a tile kept in its storage dtype (keep_stored) becomes an fp32 tile
    where one that wide fits the registers, else the table's looped launch; the split forward
    becomes the looped one (it normalizes the sum it wrote). Arguments as forward_launch's;
    the Python launcher and the AOT build both derive the launch here."""
    if launch.path == "tile" and launch.keep_stored:
        if launch.block_n * launch.chunks <= widest_tile(elem_bytes):
            return dataclasses.replace(launch, keep_stored=False)
        launch = forward_launch(widest_tile(elem_bytes, keep_stored=True) + 1, elem_bytes, True,
                                weight_bytes, arch, dtype)
    if launch.path == "split":
        launch = dataclasses.replace(launch, path="loop")
    return launch


def rule_launch(rule: Rule, streams: int, weight_bytes: int,
                arch: int = DEFAULT_ARCH) -> Launch:
    """The launch of a table row: its pipelining depth cut to the arch's shared memory for
    `streams` row streams and the weight's element size."""
    warps = max(1, min(rule.num_warps, rule.block_n * rule.chunks * rule.rows // 256))
    reloads_weight = rule.path != "tile" or not rule.w_resident
    per_stage = _stage_bytes(rule.block_n * rule.chunks, rule.rows, rule.elem_bytes,
                             weight_bytes, streams, reloads_weight)
    return Launch(rule.path, rule.block_n, rule.rows, warps,
                  _fit_stages(rule.num_stages, per_stage, smem_budget(arch)),
                  rule.programs_per_sm, rule.w_resident,
                  rule.dw_resident and rule.path == "tile", rule.chunks,
                  rule.keep_stored and rule.path == "tile")


@functools.lru_cache(maxsize=4096)  # on every call's path: keep the table walk off it
def _launch(op, n, elem_bytes, streams, weight_bytes, arch, dtype, quantized=None):
    rule = rules_for(op, elem_bytes, arch, dtype)[rule_index(op, n, elem_bytes, arch, dtype)]
    if quantized is None:
        return rule_launch(rule, streams, weight_bytes, arch)
    return quantized_launch(rule, quantized, streams, weight_bytes, arch)


def reduce_launch(n: int):
    """(block_p, block_c, num_warps) of the dw reduction over rows of n fp32 partials: column
    blocks narrow enough that about a hundred programs share the columns, and tiles of 8192
    partials, so that a program needs few steps down the partial rows (narrow rows have many).
    The tile does not depend on the number of partial rows (the backward's grid, which
    depends on the GPU): that keeps the AOT build to five reduction kernels per dtype, and
    the order of dw's sums the same on every GPU."""
    block_c = min(256, max(16, next_pow2(n) // 128))
    return 8192 // block_c, block_c, 8
