"""The launch table is generated from sweep results (rmsnorm_tools.table_gen): the committed table
is exactly what its sweeps give, every width has one row, and a width between two measured
ones takes the row of the next measured width above it."""

import dataclasses
import json
import re

import pytest

from rmsnorm.aot import build as aot, emit as aot_emit
from rmsnorm.launch import configs, tables
from rmsnorm_tools import table_gen


def _result(op, n, dtype="torch.bfloat16", m=64, pct=90.0, table_pct=50.0, **launch):
    table = dict(path="tile", block_n=max(configs.MIN_TILE, configs.next_pow2(n)), rows=1,
                 num_warps=4, num_stages=2, programs_per_sm=8, w_resident=True,
                 dw_resident=True, chunks=1)
    best = dict(table, **launch)
    return {"op": op, "M": m, "N": n, "dtype": dtype, "copy_gbps": 100.0, "best": best,
            "best_gbps": pct, "table": table, "table_gbps": table_pct}


def _base():
    return tuple(configs.Rule(*row) for row in tables.table_for(90).RULES)


def _shared(rule):
    """A row every 2-byte dtype shares (not one of a dtype's own)."""
    return rule.elem_bytes == 2 and rule.dtype is None


def test_the_committed_table_is_what_its_sweeps_give():
    module = tables.table_for(90)
    results = table_gen.load_results([table_gen.ROOT / s for s in module.SOURCES])
    assert module.SOURCES, "the table names the sweeps it comes from"
    regenerated = table_gen.render(90, table_gen.generate(_base(), results), module.SOURCES)
    assert regenerated == table_gen.table_path(90).read_text()


def test_every_group_ends_with_a_loop_row_for_every_longer_width():
    for op in configs.OPS:
        for eb in (2, 4, 8):
            group = configs.rules_for(op, eb)
            assert group[-1].path == "loop" and group[-1].max_n is None
            bounds = [r.max_n for r in group[:-1]]
            assert bounds == sorted(set(bounds)), (op, eb)


def test_a_measured_width_sets_the_row_that_serves_it():
    new = table_gen.generate(_base(), [(_result("fwd", 6144, rows=3), "s.json")])
    fwd = [r for r in new if r.op == "fwd" and _shared(r)]
    row = next(r for r in fwd if r.max_n is not None and r.max_n >= 6144)
    assert (row.max_n, row.block_n, row.rows) == (6144, 8192, 3)
    assert row.swept == "64x6144 bfloat16 90.0% (s.json)"
    # Widths above it, up to the next measured one, keep that one's row.
    above = next(r for r in fwd if r.max_n is not None and r.max_n > 6144)
    assert above.max_n == 8192 and above.rows != 3


def test_widths_between_measured_ones_take_the_next_measured_row_above():
    group = configs.rules_for("fwd", 2)
    for lower, upper in zip(group[:-2], group[1:-1]):
        for n in {lower.max_n + 1, (lower.max_n + upper.max_n) // 2, upper.max_n}:
            assert group[configs.rule_index("fwd", n, 2)] == upper
    assert configs.rule_index("fwd", 10**9, 2) == len(group) - 1


def test_a_winner_within_the_margin_keeps_the_tables_launch():
    close = _result("fwd", 4096, rows=9, pct=90.0, table_pct=90.0 / (1 + table_gen.MARGIN))
    far = _result("fwd", 4096, rows=9, pct=90.0, table_pct=85.0)
    for result, rows in ((close, 1), (far, 9)):
        fwd = [r for r in table_gen.generate(_base(), [(result, "s.json")])
               if r.op == "fwd" and _shared(r) and r.max_n == 4096]
        assert [r.rows for r in fwd] == [rows]
        assert "s.json" in fwd[0].swept  # measured either way


def test_a_split_backward_winner_keeps_the_tables_launch():
    # The AOT build and librmsnorm have no split kernels: a table row must not name one.
    result = _result("bwd", 32768, pct=90.0, table_pct=40.0, path="split", block_n=4096,
                     dw_resident=False)
    bwd = [r for r in table_gen.generate(_base(), [(result, "s.json")])
           if r.op == "bwd" and _shared(r) and r.max_n == 32768]
    assert [(r.path, r.block_n) for r in bwd] == [("tile", 32768)]
    assert "s.json" in bwd[0].swept


def test_neighbouring_rows_of_one_launch_are_merged():
    results = [(_result("add", 1536, rows=5, block_n=2048), "a.json"),
               (_result("add", 2048, rows=5), "b.json")]
    add = [r for r in table_gen.generate(_base(), results) if r.op == "add" and _shared(r)]
    merged = [r for r in add if r.rows == 5 and r.block_n == 2048]
    assert len(merged) == 1 and merged[0].max_n == 2048
    assert merged[0].swept.count("a.json") == 1 and "b.json" in merged[0].swept
    assert not any(r.max_n == 1536 for r in add)


def test_the_widest_measured_loop_also_serves_longer_rows():
    result = _result("fwd", 1 << 22, path="loop", block_n=4096, rows=1, num_warps=16)
    fwd = [r for r in table_gen.generate(_base(), [(result, "s.json")])
           if r.op == "fwd" and _shared(r)]
    assert fwd[-1].max_n is None and fwd[-1].num_warps == 16 and "s.json" in fwd[-1].swept


def test_a_tile_row_wider_than_its_widths_power_of_two_is_refused():
    with pytest.raises(ValueError, match="next power of two"):
        table_gen.generate(_base(), [(_result("fwd", 3000, block_n=8192), "s.json")])


def test_fp32_results_set_the_four_byte_rows_only():
    new = table_gen.generate(_base(), [(_result("fwd", 4096, "torch.float32", rows=7), "s")])
    assert [(r.elem_bytes, r.dtype, r.rows) for r in new if r.op == "fwd"
            and r.max_n == 4096] == \
        [(r.elem_bytes, r.dtype, r.rows) for r in _base() if r.op == "fwd" and r.max_n == 4096
         and (r.elem_bytes, r.dtype) != (4, None)] + [(4, None, 7)]


def test_writing_the_table_records_its_sources(tmp_path):
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps([_result("bwd", 3072, rows=1)]))
    out = tmp_path / "sm90.py"
    table_gen.write(90, [sweep], out)
    written = {}
    exec(out.read_text(), written)
    assert written["SOURCES"][-1] == "sweep.json"
    rows = [configs.Rule(*r) for r in written["RULES"]]
    assert any(r.op == "bwd" and r.max_n == 3072 and "sweep.json" in r.swept for r in rows)


def test_the_cpp_runtime_gets_the_tables_width_bounds():
    line = aot_emit._width_rules(90)[0]
    # Innermost braces: three rows of counts (by op), then nine lists of bounds.
    groups = [g.split(", ") for g in re.findall(r"\{([^{}]*)\}", line)]
    counts = [c for row in groups[:3] for c in row]
    bounds = groups[3:]
    assert len(counts) == len(bounds) == 9
    for op_index, op in enumerate(configs.OPS):
        for dtype_index, dtype in enumerate(("fp32", "fp16", "bf16")):
            group = aot.table_rows(op, dtype, 90)
            i = op_index * 3 + dtype_index
            assert counts[i] == str(len(group))
            assert bounds[i] == [str(r.max_n) if r.max_n is not None else "INT64_MAX"
                                 for r in group]


def test_rows_keep_their_launch_fields():
    # The sweep's JSON and the table share the launch's field names; a register cap is the
    # quantized forward's alone (configs.quantized_rule), never swept into the table.
    fields = {f.name for f in dataclasses.fields(configs.Launch)}
    assert set(table_gen.LAUNCH_FIELDS) == fields - {"max_registers"}


def test_every_aot_kernel_launches_as_the_python_launcher_does_at_its_rows_widths():
    from rmsnorm.aot import build as aot
    from rmsnorm.launch import dtypes

    for spec in aot.specs(90):
        if spec.op == "reduce":
            continue
        eb = dtypes.BYTES[spec.dtype]
        wb = eb if spec.has_w else 0
        dtype = spec.dtype
        group = configs.rules_for(spec.op, eb, 90, dtype)
        low = group[spec.variant - 1].max_n + 1 if spec.variant else 1
        high = group[spec.variant].max_n or 4 * low
        for n in {low, high}:
            if spec.op == "bwd":
                want = configs.backward_launch(n, eb, spec.has_dresidual, wb, 90, dtype)
            else:
                # The quantized forward's: its launch of its own, for its mode's scales.
                quantized = aot.QUANT_MODES[spec.quant] if spec.quant else None
                want = configs.forward_launch(n, eb, spec.op == "add", wb, 90, dtype, quantized)
            assert aot._launch(spec, 90) == want, (spec, n)


@pytest.fixture
def fp16_rows(monkeypatch):
    """The committed table without its fp16 rows, plus those that a first fp16 sweep of the
    backward at 128 gives: rows=4 where bf16's have 16."""
    result = _result("bwd", 128, "torch.float16", rows=4, num_warps=2, programs_per_sm=8)
    base = tuple(r for r in _base() if r.dtype != "fp16")
    new = table_gen.generate(base, [(result, "fp16.json")])
    monkeypatch.setattr(configs, "rules", lambda arch=90: new + tuple(configs._derived_fp64(new)))
    configs._launch.cache_clear()  # launches are cached by width and dtype
    yield new
    configs._launch.cache_clear()


def test_a_fp16_result_gives_fp16_rows_of_its_own_starting_as_the_two_byte_rows(fp16_rows):
    fp16 = [r for r in fp16_rows if r.op == "bwd" and r.dtype == "fp16"]
    shared = [r for r in fp16_rows if r.op == "bwd" and _shared(r)]
    assert shared == [r for r in _base() if r.op == "bwd" and _shared(r)]
    assert fp16 != [r for r in _base() if r.op == "bwd" and r.dtype == "fp16"]
    assert [(r.max_n, r.rows) for r in fp16 if r.max_n == 128] == [(128, 4)]
    assert [dataclasses.replace(r, dtype=None) for r in fp16 if r.max_n != 128] == \
        [r for r in shared if r.max_n != 128]
    assert not any(r.dtype == "fp16" for r in fp16_rows if r.op != "bwd")


def test_tensors_all_fp16_take_fp16s_rows_and_mixed_ones_the_shared_rows(fp16_rows):
    assert configs.backward_launch(128, 2, False, 2, dtype="fp16").rows == 4
    assert configs.backward_launch(128, 2, False, 2, dtype="bf16").rows == 16
    assert configs.backward_launch(128, 2, False, 2).rows == 16
    assert configs.forward_launch(128, 2, False, 2, dtype="fp16") == \
        configs.forward_launch(128, 2, False, 2, dtype="bf16")
    # The AOT build compiles fp16's kernels from its own rows, and the C++ runtime gets their
    # width bounds.
    rows = aot.table_rows("bwd", "fp16", 90)
    assert rows == configs.rules_for("bwd", 2, 90, "fp16") != aot.table_rows("bwd", "bf16", 90)
    fp16 = [s for s in aot.specs(90) if s.op == "bwd" and s.dtype == "fp16"]
    assert max(s.variant for s in fp16) == len(rows) - 1
    at_128 = configs.rule_index("bwd", 128, 2, 90, "fp16")
    assert aot._launch(aot.Spec("bwd", "fp16", True, True, variant=at_128), 90).rows == 4
    assert "{" + ", ".join(str(r.max_n) if r.max_n else "INT64_MAX" for r in rows) + "}" in \
        "".join(aot_emit._width_rules(90))


def test_the_launcher_names_the_streamed_tensors_dtype_when_they_share_one():
    import torch

    from rmsnorm.launch import specs

    h, b = torch.zeros(2, dtype=torch.float16), torch.zeros(2, dtype=torch.bfloat16)
    assert specs.table_dtype(h, None, h) == "fp16"
    assert specs.table_dtype(b) == "bf16"
    assert specs.table_dtype(h, b) is None


def test_a_kept_forward_tile_may_hold_65536_two_byte_values_and_an_fp32_one_may_not():
    kept = _result("fwd", 65536, block_n=32768, chunks=2, num_warps=32, w_resident=False,
                   keep_stored=True)
    rows = [r for r in table_gen.generate(_base(), [(kept, "s.json")])
            if r.op == "fwd" and r.dtype == "bf16" and r.max_n == 65536]
    assert [(r.path, r.block_n, r.chunks, r.keep_stored) for r in rows] == \
        [("tile", 32768, 2, True)]
    held = dict(kept["best"], keep_stored=False)
    with pytest.raises(ValueError, match="at most 32768 elements"):
        table_gen.generate(_base(), [(dict(kept, best=held), "s.json")])


def test_only_forward_tiles_are_kept_in_their_storage_dtype():
    with pytest.raises(ValueError, match="only forward tiles are kept"):
        table_gen.generate(_base(), [(_result("bwd", 4096, keep_stored=True), "s.json")])


def test_widths_that_need_fewer_chunks_of_a_chunked_row_get_a_row_of_fewer():
    # 4 x 16384 serves 32769 ... 65536; 32769 ... 49152 take 3 of those chunks, not 4 with
    # one all mask.
    kept = _result("fwd", 65536, block_n=16384, chunks=4, num_warps=32, w_resident=False,
                   keep_stored=True)
    base = [r for r in _base() if (r.op, r.dtype) != ("fwd", "bf16") or r.max_n is None
            or r.max_n <= 32768]
    fwd = [r for r in table_gen.generate(base, [(kept, "s.json")])
           if r.op == "fwd" and r.dtype == "bf16"]
    wide = [(r.max_n, r.block_n, r.chunks, bool(r.swept)) for r in fwd
            if r.max_n is not None and 32768 < r.max_n <= 65536]
    assert wide == [(49152, 16384, 3, False), (65536, 16384, 4, True)]


def test_a_chunked_row_that_would_leave_a_chunk_empty_is_refused():
    rows = [configs.Rule("fwd", 2, None, 32768, "tile", 32768, 1, 16, 2, 4, False),
            configs.Rule("fwd", 2, None, 65536, "tile", 16384, 1, 32, 1, 4, False, True, 4,
                         True),
            configs.Rule("fwd", 2, None, None, "loop", 16384, 1, 16, 3, 6, False, False)]
    with pytest.raises(ValueError, match="32769 to 65536"):
        table_gen._check_group(tuple(rows))


def test_a_kept_bf16_winner_sets_bf16s_own_rows_and_leaves_the_rows_fp16_shares():
    # bf16 widens a kept tile with a shift, fp16 with several operations: bf16's measurement
    # of a kept tile says nothing of fp16's.
    base = tuple(r for r in _base() if r.dtype != "bf16")
    kept = _result("fwd", 16384, block_n=16384, num_warps=8, rows=1, keep_stored=True)
    new = table_gen.generate(base, [(kept, "k.json")])
    at = {r.dtype: r for r in new if r.op == "fwd" and r.max_n == 16384 and r.elem_bytes == 2}
    assert at["bf16"].keep_stored and "k.json" in at["bf16"].swept
    assert at[None] == next(r for r in base if r.op == "fwd" and _shared(r)
                         and r.max_n == 16384)
    # bf16's own rows started as the shared ones.
    assert [dataclasses.replace(r, dtype=None) for r in new if r.op == "fwd"
            and r.dtype == "bf16" and r.max_n != 16384] == \
        [r for r in new if r.op == "fwd" and _shared(r) and r.max_n != 16384]
    # Once bf16 has rows of its own, a winner that is not kept sets both.
    held = _result("fwd", 4096, rows=9)
    both = table_gen.generate(new, [(held, "h.json")])
    assert {r.dtype: r.rows for r in both if r.op == "fwd" and r.max_n == 4096
            and r.elem_bytes == 2} == \
        {None: 9, "bf16": 9}


def test_no_row_that_fp16_or_mixed_dtypes_read_keeps_a_tile_swept_only_in_bf16():
    for r in _base():
        if r.keep_stored:
            assert r.dtype == "bf16", r
