"""Writes a GPU arch's launch table (rmsnorm/launch/tables/sm<arch>.py) from sweep results.

    python -m rmsnorm_tools.table_gen --arch 90 docs/results/sweeps/h200-*.json

The table's rows start as the file's current rows; each sweep result (one op, dtype and
width N, from `python -m rmsnorm_tools.sweep --json`) then sets the row that serves N: it replaces
the row whose max_n is N or adds one, with the fastest launch the sweep measured there when
that beat the table's own launch by more than MARGIN, else with the table's (also when the
fastest is a split backward, which only explicit launches reach). The rows it
sets are its dtype's (FAMILY): bf16's set the 2-byte rows, except that a winner kept in its
storage dtype sets rows of bf16's own (KEPT_OWN_ROWS). A width between two measured ones
takes the row of the next measured width above it (the rule configs.rule_index applies), in
as few of its chunks as hold the width where it is a chunked tile (rows of fewer chunks are
added below it); the widest measured loop launch also takes every longer row. Neighbouring
rows with the same launch are merged. The result is deterministic: applying a table's own
SOURCES to it again gives the same table (tests/aot/test_table_gen.py checks that the committed
table is such a fixed point, so it cannot drift from its measurements by hand).
"""

import argparse
import dataclasses
import json
import pathlib
import re
import sys

from rmsnorm.launch import configs

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The rows a sweep result of each dtype sets (configs.Rule's elem_bytes and dtype): bf16's set
# the 2-byte rows, which serve fp16 too until fp16 is swept: its results set rows of its own,
# which start as a copy of the 2-byte rows (fp16 keeps more registers live than bf16 in the
# same kernel).
ROWS_OF = {"torch.bfloat16": (2, None), "torch.float16": (2, "fp16"),
           "torch.float32": (4, None)}
# A kept tile (keep_stored) widens its values again by their bits, which costs a shift in
# bf16 and several operations in fp16 (device call 4 of 2026-12-01: bf16's kept winners ran
# fp16 13-17 points slower at 16384 and 32768): a bf16 result whose winner is kept sets rows of
# bf16's own (started as a copy of the 2-byte rows), not the rows fp16 shares; once bf16 has
# rows of its own, its other results set both.
KEPT_OWN_ROWS = {"torch.bfloat16": "bf16"}
LAUNCH_FIELDS = ("path", "block_n", "rows", "num_warps", "num_stages", "programs_per_sm",
                 "w_resident", "dw_resident", "chunks", "keep_stored")


def table_path(arch: int) -> pathlib.Path:
    return ROOT / "rmsnorm" / "launch" / "tables" / f"sm{arch}.py"


def _launch_of(rule):
    return tuple(getattr(rule, f) for f in LAUNCH_FIELDS)


def swept_label(result, source):
    launch = "best" if kept_launch(result) is result["best"] else "table"
    pct = 100 * result[f"{launch}_gbps"] / result["copy_gbps"]
    dtype = result["dtype"].replace("torch.", "")
    small = result.get("small")
    at_small = (f", {100 * small[f'{launch}_gbps'] / small['copy_gbps']:.1f}% at "
                f"{small['M']}x{result['N']}" if small else "")
    return (f"{result['M']}x{result['N']} {dtype} {pct:.1f}%{at_small} "
            f"({pathlib.Path(source).name})")


# A sweep's winner replaces the launch the table had when it was swept only when it measured
# more than this much faster: single timings differ by a few percent, and a smaller gain at
# the swept row count is as likely a loss at another (the table serves every M).
MARGIN = 0.02


# Paths the sweep measures that the table cannot hold: the split backward runs only as an
# explicit launch of the Python launcher (the AOT build and librmsnorm have no split
# kernels), so a split winner leaves the table's launch in place.
EXPLICIT_ONLY_PATHS = ("split",)


def kept_launch(result):
    """The launch a sweep result puts in the table: its best, unless the table's own was
    within MARGIN of it (in GB/s, or in the score of a sweep timed at two sizes) or the best
    is on a path the table cannot hold (EXPLICIT_ONLY_PATHS)."""
    best, table = ((result["best_score"], result["table_score"]) if "best_score" in result
                   else (result["best_gbps"], result["table_gbps"]))
    if result["best"]["path"] in EXPLICIT_ONLY_PATHS or best <= table * (1 + MARGIN):
        return result["table"]
    return result["best"]


def rule_from_result(result, source):
    best = kept_launch(result)
    return configs.Rule(result["op"], *ROWS_OF[result["dtype"]], result["N"], best["path"],
                        best["block_n"], best["rows"], best["num_warps"], best["num_stages"],
                        best["programs_per_sm"], best["w_resident"],
                        best.get("dw_resident", True) and best["path"] == "tile",
                        best.get("chunks", 1),
                        best.get("keep_stored", False) and best["path"] == "tile",
                        swept_label(result, source))


def _check_group(group):
    for prev, rule in zip((None,) + group[:-1], group):
        widest = configs.widest_tile(rule.elem_bytes, rule.keep_stored)
        if rule.keep_stored and (rule.path != "tile" or rule.op == "bwd"):
            raise ValueError(f"{rule}: only forward tiles are kept in their storage dtype")
        if rule.chunks > 1:
            width = rule.block_n * rule.chunks
            low = prev.max_n + 1 if prev is not None else 1
            if rule.path != "tile":
                raise ValueError(f"{rule}: only tiles come in chunks")
            if not rule.block_n * (rule.chunks - 1) < low <= rule.max_n <= width \
                    or width > widest:
                raise ValueError(f"{rule}: {rule.chunks} chunks of {rule.block_n} must hold "
                                 f"each width it serves ({low} to {rule.max_n}) with none "
                                 f"left empty, at most {widest} elements")
        elif rule.path == "tile":
            bucket = max(configs.MIN_TILE, configs.next_pow2(rule.max_n))
            if rule.block_n != bucket or rule.block_n > widest:
                raise ValueError(f"{rule}: a tile row's block_n must be the next power of "
                                 f"two of its max_n ({bucket}), at most {widest}")
            if prev is not None and prev.max_n < rule.block_n // 2 and \
                    rule.block_n > configs.MIN_TILE:
                raise ValueError(f"{rule}: serves widths from {prev.max_n + 1}, below its "
                                 f"power of two's half: measure {rule.block_n // 2}")
    if group[-1].path != "loop" or group[-1].max_n is not None:
        raise ValueError(f"{group[-1]}: the last row of a group is a loop row for every "
                         "longer width (max_n None)")


def _fill_chunks(group):
    """A chunked tile row serves every width above the previous row's max_n; where the
    narrowest of them needs fewer of its chunks, rows of fewer chunks of the same tile come
    first (max_n: their chunks' width), so that no width loads a chunk that is all mask."""
    out = []
    for rule in group:
        low = out[-1].max_n + 1 if out else 1
        if rule.path == "tile" and rule.chunks > 1 and rule.max_n is not None:
            for chunks in range(-(-low // rule.block_n), rule.chunks):
                out.append(dataclasses.replace(rule, max_n=rule.block_n * chunks,
                                               chunks=chunks, swept=""))
        out.append(rule)
    return out


def _without_fills(group):
    """A group less the rows _fill_chunks added (unmeasured, fewer chunks of the row above
    them), which are added again for the rows that need them: one left from an earlier table
    would otherwise outlive the row it was cut from."""
    out = []
    for rule, above in zip(group, list(group[1:]) + [None]):
        fill = (above is not None and not rule.swept and 1 < rule.chunks < above.chunks
                and rule.max_n == rule.block_n * rule.chunks
                and dataclasses.replace(rule, chunks=above.chunks, max_n=above.max_n,
                                        swept=above.swept) == above)
        if not fill:
            out.append(rule)
    return out


def _merge(group):
    """Neighbouring rows of one launch become one (the wider's max_n, both labels)."""
    out = []
    for rule in group:
        if out and _launch_of(out[-1]) == _launch_of(rule):
            parts = out[-1].swept.split("; ") + rule.swept.split("; ")
            labels = "; ".join(dict.fromkeys(s for s in parts if s))
            rule = dataclasses.replace(rule, swept=labels)
            out.pop()
        out.append(rule)
    return out


def _points(rule):
    """A row as the measurements it merged (one row per label, at the label's width) and,
    where its own max_n is none of theirs, itself without a label: rows and points then
    merge back to the same table."""
    points = []
    for label in filter(None, rule.swept.split("; ")):
        n = int(re.match(r"\d+x(\d+) ", label).group(1))
        points.append(dataclasses.replace(rule, max_n=n, swept=label))
    if rule.max_n is None or all(p.max_n != rule.max_n for p in points):
        points.append(dataclasses.replace(rule, swept=""))
    return points


def _rows_set(new, dtype, groups):
    """The rows one result sets: those of its dtype (ROWS_OF), or for a kept winner of a dtype
    in KEPT_OWN_ROWS, that dtype's own (and the shared rows too once that dtype has rows of its
    own and the winner is not kept)."""
    own = KEPT_OWN_ROWS.get(dtype)
    if own is None:
        return [new]
    mine = dataclasses.replace(new, dtype=own)
    if new.keep_stored:
        return [mine]
    return [new, mine] if _group_of(mine) in groups else [new]


def _group_of(rule):
    return rule.op, rule.elem_bytes, rule.dtype


def generate(base, results):
    """The table's rows (configs.Rule, grouped by op, element size and dtype) from base rows
    and (result,
    source) pairs, applied in order."""
    groups = {}
    for rule in base:
        groups.setdefault(_group_of(rule), []).append(rule)
    groups = {key: [p for r in _without_fills(g) for p in _points(r)]
              for key, g in groups.items()}
    for result, source in results:
        for new in _rows_set(rule_from_result(result, source), result["dtype"], groups):
            key = _group_of(new)
            shared = (new.op, new.elem_bytes, None)
            if key not in groups and shared in groups:
                # A dtype's first result of its own: its rows start as its element size's.
                groups[key] = [dataclasses.replace(r, dtype=new.dtype) for r in groups[shared]]
            if key not in groups:
                raise ValueError(f"no base rows for op {new.op}, {new.elem_bytes}-byte "
                                 "elements")
            group = [r for r in groups[key] if r.max_n != new.max_n] + [new]
            groups[key] = sorted(group,
                                 key=lambda r: float("inf") if r.max_n is None else r.max_n)
    for key, group in groups.items():
        widest = [r for r in group if r.max_n is not None][-1]
        if widest.path == "loop" and widest.swept:
            # The widest measured loop launch also serves every longer row.
            group[-1] = dataclasses.replace(widest, max_n=None, swept="")

    def order(key):  # by op, then element size, each size's shared rows before a dtype's own
        op, elem_bytes, dtype = key
        return configs.OPS.index(op), elem_bytes, dtype is not None, dtype or ""

    out = []
    for key in sorted(groups, key=order):
        group = tuple(_merge(_fill_chunks(groups[key])))
        _check_group(group)
        out.extend(group)
    return tuple(out)


HEADER = '''"""Launch table for sm_{arch}. Generated by `python -m rmsnorm_tools.table_gen`
from the sweeps in SOURCES: do not edit; re-run the sweep (docs/DEVELOPING.md, "Tuning").
Rows whose `swept` is empty were carried over from the hand-kept table of 2026-11-29 (bf16
sweeps on an H200, docs/results/h200-sweep-bf16.json and h200-sweep-bwd.json, whose 4-byte
rows repeated the 2-byte ones), or hold fewer chunks of the measured row above them (the
widths that need fewer)."""

SOURCES = {sources!r}

# configs.Rule: op, elem_bytes, dtype (None: every dtype of that size; a name: rows of that
# dtype's own), max_n, path, block_n, rows, num_warps, num_stages, programs_per_sm,
# w_resident, dw_resident, chunks, keep_stored, then `swept`: "MxN dtype % of the same-bytes
# copy (sweep file)" of each measurement the row holds
RULES = (
{rows})
'''


def _row(rule):
    """A row as its tuple, the label on a line of its own."""
    launch = repr(dataclasses.astuple(rule)[:-1])[:-1]  # without its closing parenthesis
    return f"    {launch},\n     {rule.swept!r}),\n"


def render(arch, rules, sources):
    rows = "".join(_row(r) for r in rules)
    return HEADER.format(arch=arch, sources=tuple(sources), rows=rows)


def load_results(paths):
    """(result, source) pairs of sweep JSON files; source is the path relative to the
    repository when the file lies inside it."""
    out = []
    for path in paths:
        path = pathlib.Path(path).resolve()
        try:
            source = str(path.relative_to(ROOT))
        except ValueError:
            source = path.name
        out.extend((result, source) for result in json.loads(path.read_text()))
    return out


def write(arch, paths, out=None):
    """Applies the sweeps at paths to arch's table and writes it (to out, default the
    table's own file)."""
    from rmsnorm.launch import tables

    module = tables.table_for(arch)
    base = tuple(configs.Rule(*row) for row in module.RULES)
    results = load_results(paths)
    sources = list(module.SOURCES)
    for _, source in results:
        if source not in sources:
            sources.append(source)
    text = render(arch, generate(base, results), sources)
    pathlib.Path(out or table_path(arch)).write_text(text)
    return text


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m rmsnorm_tools.table_gen", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweeps", nargs="+", help="JSON files of python -m rmsnorm_tools.sweep --json")
    p.add_argument("--arch", type=int, default=configs.DEFAULT_ARCH,
                   help="compute capability, major*10+minor (default: 90)")
    p.add_argument("--out", help="where to write (default: rmsnorm/launch/tables/sm<arch>.py)")
    args = p.parse_args(argv)
    write(args.arch, args.sweeps, args.out)
    print(f"wrote {args.out or table_path(args.arch)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
