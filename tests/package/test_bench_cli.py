"""The benchmark and sweep CLIs end to end at tiny shapes with a fake timer, on the CPU under
Triton's interpreter or on the GPU: every op, eager peer and table column runs, so a GPU run
does not die on plumbing. Timings are not checked; torch.compile peers are left out (slow)."""

import dataclasses
import itertools
import json
import re

import pytest
import torch

from rmsnorm.launch import configs
from rmsnorm_tools import bench, quant_sweep, sweep, table_gen
import helpers


@pytest.fixture
def fake_timer(monkeypatch, device):
    monkeypatch.setattr(bench, "DEVICE", device)
    ticks = itertools.count(1)

    def bench_ms(fn, warmup=0, rep=0):
        fn()
        fn()  # twice: a graph kept with retain_graph must survive its first backward
        return 1.0 / next(ticks)  # each launch "faster" than the last: the sweep moves on

    monkeypatch.setattr(bench, "bench_ms", bench_ms)


def test_bench_measures_every_op_and_peer(fake_timer, tmp_path, capsys):
    path = tmp_path / "bench.json"
    bench.main(["--op", "fwd", "add", "bwd", "fwdbwd", "--shapes", "5x64", "--peers", "eager",
                "--json", str(path)])
    rows = {row["op"]: row for row in json.loads(path.read_text())["rows"]}
    assert list(rows) == ["fwd", "add", "bwd", "fwdbwd"]
    for row in rows.values():
        assert all("us" in v for v in row["impls"].values()), row["impls"]
        assert row["bytes"] == bench.MOVED[row["op"]] * 5 * 64 * 2
    assert set(rows["bwd"]["impls"]) == {"rmsnorm", "torch_eager"}
    graphed = {"rmsnorm_graphed", "torch_eager_graphed"} if torch.cuda.is_available() else set()
    assert set(rows["fwdbwd"]["impls"]) == {"rmsnorm", "torch_eager", "hf_eager"} | graphed
    assert rows["bwd"]["dw_reduce_us"] > 0 and rows["bwd"]["dw_reduce_pct"] > 0
    assert all("dw_reduce_us" not in rows[op] for op in ("fwd", "add", "fwdbwd"))
    table = capsys.readouterr().out
    assert "| dw reduce us (% bwd); bwd without dw us |" in table and "fails" not in table


def test_bench_measures_the_quantized_ops_and_their_peers(fake_timer, tmp_path):
    path = tmp_path / "bench.json"
    bench.main(["--op", "quant", "add_quant", "--shapes", "3x128", "--quant", "static",
                "token", "group64", "--quant-dtype", "fp8", "int8", "--peers", "eager", "plain",
                "--json", str(path)])
    rows = json.loads(path.read_text())["rows"]
    assert len(rows) == 2 * 3 * 2
    for row in rows:
        assert set(row["impls"]) == {"rmsnorm", "rms_norm_then_quantize", "plain"}, row
        assert all("us" in v for v in row["impls"].values()), row["impls"]
    by_op = {row["op"]: row["bytes"] for row in rows}
    # bf16 in, one byte out, fp32 scales: per row (token), per row and group of 64.
    assert by_op["quant static fp8"] == 3 * 128 * 3
    assert by_op["quant token int8"] == 3 * 128 * 3 + 3 * 4
    assert by_op["add_quant group64 fp8"] == 3 * 128 * 7 + 3 * 2 * 4


def test_dw_reduction_replay_writes_the_backwards_dw(device, monkeypatch):
    monkeypatch.setattr(bench, "DEVICE", device)
    x, _, w = bench.make_inputs("bwd", 7, 48, torch.bfloat16)
    dy = bench.make_grad(x)
    rstd = bench.saved_rstd(x, w)
    allocated = []
    alloc = bench.launch_backward.alloc
    monkeypatch.setattr(bench.launch_backward, "alloc", lambda *a: allocated.append(alloc(*a)) or
                        allocated[-1])
    replay = bench.dw_reduce_fn(dy, x, w, rstd)
    dw = next(t for t in allocated if t.shape == w.shape)  # what the recorded call reduced into
    dw.fill_(float("nan"))
    replay()
    assert torch.equal(dw, bench.ops.backward(dy, x, w, rstd)[1])


@pytest.mark.parametrize("op, shape", [("fwd", "5x64"), ("add", "5x64"), ("bwd", "9x64"),
                                       ("bwd", "3x100")])
def test_sweep_writes_its_winner_into_the_launch_table(fake_timer, monkeypatch, tmp_path,
                                                       op, shape):
    # A few candidates only: on the GPU each new one is a kernel compile.
    real = sweep.shape_candidates
    monkeypatch.setattr(sweep, "shape_candidates",
                        lambda base, n, backward=False: real(base, n, backward)[:2])
    monkeypatch.setattr(sweep, "PROGRAMS_PER_SM", {"fwd": {"tile": (4,), "loop": (1,)},
                                                   "bwd": {"tile": (2,), "loop": (2,)}})
    path, table = tmp_path / "sweep.json", tmp_path / "table.py"
    with helpers.max_tile(64):  # 3x100 takes the loop path
        sweep.main(["--op", op, "--shapes", shape, "--json", str(path), "--table", str(table)])
    result = json.loads(path.read_text())[0]
    best = result["best"]
    assert best["path"] == ("loop" if shape == "3x100" else "tile")
    written = {}
    exec(table.read_text(), written)
    n = result["N"]
    rows = [configs.Rule(*r) for r in written["RULES"] if r[0] == op and r[1:3] == (2, None)]
    row = next(r for r in rows if r.max_n is None or r.max_n >= n)
    assert row.max_n == n and str(path.name) in row.swept
    for field in table_gen.LAUNCH_FIELDS:
        want = best[field] and best["path"] == "tile" if field == "dw_resident" else best[field]
        assert getattr(row, field) == want, field
    assert str(path.name) in written["SOURCES"][-1]


def test_a_sweep_at_two_sizes_ranks_launches_by_both(fake_timer, monkeypatch, tmp_path):
    real = sweep.shape_candidates
    monkeypatch.setattr(sweep, "shape_candidates",
                        lambda base, n, backward=False: real(base, n, backward)[:2])
    monkeypatch.setattr(sweep, "PROGRAMS_PER_SM", {"fwd": {"tile": (4,), "loop": (1,)},
                                                   "bwd": {"tile": (2,), "loop": (2,)}})
    # The smaller size is 2^23 / N rows; kept tiny here for the interpreter.
    monkeypatch.setattr(sweep.suite, "ELEMENTS", (1 << 26, 64 * 3))
    path = tmp_path / "sweep.json"
    sweep.main(["--op", "add", "--shapes", "5x64", "--small", "--json", str(path)])
    result = json.loads(path.read_text())[0]
    assert result["small"]["M"] == 3
    assert result["small"]["timing"] == "graph_hbm"
    assert all("gbps_small" in entry for entry in result["all"])
    assert result["best_score"] >= result["table_score"] > 0
    # The table keeps the sweep's choice by the score, and says what it measured at both.
    label = table_gen.swept_label(result, "s.json")
    assert f"at {result['small']['M']}x64" in label


def test_mismatches_counts_wrong_and_nan_elements():
    ref = torch.tensor([1.0, 2.0, -3.0, 4.0])
    assert sweep.mismatches(ref * 1.01, ref) == 0
    assert sweep.mismatches(torch.tensor([1.0, float("nan"), 3.0, 4.0]), ref) == 2


def test_the_suite_covers_every_width_at_both_sizes_and_decode():
    from rmsnorm_tools import suite
    cases = suite.cases()
    # The largest size is timed as single calls; the smaller one and decode, whose GPU time
    # is below the launcher's host time, from CUDA graphs (the smaller size over input sets
    # that do not fit the L2).
    big, small = max(suite.ELEMENTS), min(suite.ELEMENTS)
    assert set(cases) == (
        {(o, d, big // n, n, "median") for o in suite.OPS for d in suite.DTYPES
         for n in suite.WIDTHS}
        | {(o, d, small // n, n, "graph_hbm") for o in suite.OPS for d in suite.DTYPES
           for n in suite.WIDTHS}
        | {(o, d, m, n, "graph") for o in suite.DECODE_OPS for d in suite.DTYPES
           for m in suite.DECODE_ROWS for n in suite.DECODE_WIDTHS})


def test_the_launcher_peer_is_rmsnorm_timed_with_the_compiled_kernels_off(device, monkeypatch,
                                                                        tmp_path):
    # Each timing records the switch as it stands while the case's calls run.
    monkeypatch.setattr(bench, "DEVICE", device)
    switch = []

    def bench_ms(fn, warmup=0, rep=0):
        fn()
        switch.append(torch.ops.rmsnorm.use_compiled_kernels(None))
        return 1.0

    monkeypatch.setattr(bench, "bench_ms", bench_ms)
    before = torch.ops.rmsnorm.use_compiled_kernels(None)  # off in a RMSNORM_KERNELS=triton run
    path = tmp_path / "bench.json"
    bench.main(["--op", "fwd", "--shapes", "3x64", "--timing", "graph", "--peers",
                bench.LAUNCHER, "--json", str(path)])
    (row,) = json.loads(path.read_text())["rows"]
    assert row["timing"] == "graph"
    assert list(row["impls"]) == ["rmsnorm", bench.LAUNCHER]
    assert switch == [before, before, False]  # the copy ceiling, rmsnorm, the launcher
    assert torch.ops.rmsnorm.use_compiled_kernels(None) == before  # restored after


def test_suite_run_writes_graph_timed_decode_rows(fake_timer, monkeypatch, tmp_path):
    from rmsnorm_tools import suite
    monkeypatch.setattr(suite, "WIDTHS", (64,))
    monkeypatch.setattr(suite, "ELEMENTS", (64 * 5, 64 * 2))
    monkeypatch.setattr(suite, "DECODE_ROWS", (1, 3))
    monkeypatch.setattr(suite, "DECODE_WIDTHS", (32,))
    path = tmp_path / "suite.json"
    bench.main(["--suite", "--dtype", "bf16", "--json", str(path)])
    rows = json.loads(path.read_text())["rows"]
    assert [(r["op"], r["M"], r["N"], r["timing"]) for r in rows] == [
        ("fwd", 5, 64, "median"), ("fwd", 2, 64, "graph_hbm"), ("add", 5, 64, "median"),
        ("add", 2, 64, "graph_hbm"), ("bwd", 5, 64, "median"), ("bwd", 2, 64, "graph_hbm"),
        ("fwd", 1, 32, "graph"), ("fwd", 3, 32, "graph"), ("add", 1, 32, "graph"),
        ("add", 3, 32, "graph")]
    assert all(set(r["impls"]) == {"rmsnorm"} for r in rows)  # no peers by default


def row(op, m, n, pct, timing="median"):
    return {"op": op, "dtype": "bfloat16", "M": m, "N": n, "timing": timing,
            "impls": {"rmsnorm": {"pct_copy": pct} if pct is not None else {"error": "x"}}}


def test_a_case_that_falls_more_than_two_points_is_a_regression():
    from rmsnorm_tools import suite
    baseline = [row("fwd", 8, 128, 90.0), row("add", 8, 128, 90.0), row("bwd", 8, 128, 90.0),
                row("fwd", 1, 4096, 50.0, "graph"), row("fwd", 4, 4096, 50.0)]
    now = [row("fwd", 8, 128, 88.1), row("add", 8, 128, 87.9), row("bwd", 8, 128, None),
           row("fwd", 1, 4096, 45.0, "graph"), row("fwd", 2, 4096, 10.0)]
    found = suite.regressions(now, baseline)
    assert [k for k, _, _ in found] == [("add", "bfloat16", 8, 128, "median"),
                                        ("bwd", "bfloat16", 8, 128, "median"),
                                        ("fwd", "bfloat16", 1, 4096, "graph")]
    text = suite.format_regressions(found, "base.json")
    assert "3 cases fell" in text and "| bwd | bfloat16 | 8 x 128 | median | 90.0 | fails |" \
        in text
    assert "no case fell" in suite.format_regressions([], "base.json")


def test_bench_exits_1_when_the_baseline_shows_a_regression(fake_timer, tmp_path, capsys):
    first = tmp_path / "first.json"
    bench.main(["--op", "fwd", "--shapes", "5x64", "--peers", "--json", str(first)])
    data = json.loads(first.read_text())
    data["rows"][0]["impls"]["rmsnorm"]["pct_copy"] += 50  # the baseline was much faster
    first.write_text(json.dumps(data))
    with pytest.raises(SystemExit) as stop:
        bench.main(["--op", "fwd", "--shapes", "5x64", "--peers", "--baseline", str(first)])
    assert stop.value.code == 1
    assert "1 cases fell by more than 2.0 points" in capsys.readouterr().out


def test_a_case_that_fell_is_timed_again_and_counts_only_if_it_fell_twice(
        fake_timer, tmp_path, capsys, monkeypatch):
    first = tmp_path / "first.json"
    bench.main(["--op", "fwd", "add", "--shapes", "5x64", "--peers", "--json", str(first)])
    data = json.loads(first.read_text())
    for r in data["rows"]:
        r["impls"]["rmsnorm"]["pct_copy"] = 50.0
    first.write_text(json.dumps(data))
    # The first timing of each case reads 10% of copy; a second timing, only the fused add's
    # (a real loss) does again.
    timings = {}

    def run_shape(op, m, n, dtype, peers, warmup, rep, timing="median"):
        timings[op] = timings.get(op, 0) + 1
        pct = 10.0 if timings[op] == 1 or op == "add" else 60.0
        return {"op": op, "dtype": str(dtype).replace("torch.", ""), "M": m, "N": n,
                "timing": timing, "impls": {"rmsnorm": {"pct_copy": pct}}}

    monkeypatch.setattr(bench, "run_shape", run_shape)
    monkeypatch.setattr(bench, "format_table", lambda rows: "(table)")
    capsys.readouterr()
    now = tmp_path / "now.json"
    with pytest.raises(SystemExit) as stop:
        bench.main(["--op", "fwd", "add", "--shapes", "5x64", "--peers", "--json", str(now),
                    "--baseline", str(first)])
    assert stop.value.code == 1 and timings == {"fwd": 2, "add": 2}
    fell = capsys.readouterr().out.split("cases fell")[1]
    assert "| add |" in fell and "| fwd |" not in fell
    rows = {r["op"]: r for r in json.loads(now.read_text())["rows"]}
    assert rows["fwd"]["impls"]["rmsnorm"]["pct_copy"] == 60.0
    assert rows["fwd"]["timed_pct_copy"] == [10.0, 60.0]
    assert rows["add"]["timed_pct_copy"] == [10.0, 10.0]


def test_rotating_calls_each_input_set_in_turn():
    calls = []
    fn = bench.rotating([lambda i=i: calls.append(i) for i in range(3)])
    for _ in range(7):
        fn()
    assert calls == [0, 1, 2, 0, 1, 2, 0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="sizes sets by the GPU's L2")
def test_an_hbm_graph_case_takes_input_sets_three_times_the_l2():
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    nbytes = 32 * 2 ** 20
    sets = bench.input_sets("graph_hbm", nbytes)
    assert sets * nbytes >= 3 * l2 > (sets - 1) * nbytes
    assert bench.input_sets("graph", nbytes) == bench.input_sets("median", nbytes) == 1


def test_each_timed_single_call_waits_behind_its_flush_and_a_gpu_sleep(monkeypatch):
    # The GPU must still be busy when the host has launched the call: the call's start event
    # comes after the flush and the sleep, so the launcher's host time is not timed.
    log = []

    class Event:
        def __init__(self, enable_timing):
            pass

        def record(self):
            log.append("event")

        def elapsed_time(self, other):
            return 0.5

    class Flush:
        def zero_(self):
            log.append("flush")

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: log.append(("sleep", cycles)))
    ms = bench.single_calls_ms(lambda: log.append("call"), warmup=1, rep=2, flush=Flush())
    assert ms == 0.5
    events = [i for i, entry in enumerate(log) if entry == "event"]
    starts = events[2::2]  # after the two around the estimate's calls: each timed call's
    # rep ms of calls at the estimated ms per call (0.5 ms for five): 20.
    assert len(starts) == 20
    for i in starts:
        assert log[i - 2:i + 3] == ["flush", ("sleep", bench.HOST_SLACK_CYCLES), "event",
                                    "call", "event"]


def test_quant_sweep_times_the_tables_launch_and_its_variants(fake_timer, tmp_path, capsys):
    path = tmp_path / "quant-sweep.json"
    quant_sweep.main(["--op", "quant", "add_quant", "--modes", "token", "--shapes", "2x2048",
                      "--json", str(path)])
    cases = json.loads(path.read_text())
    assert [(c["op"], c["mode"]) for c in cases] == [("quant", "token"), ("add_quant", "token")]
    for case in cases:
        fused = case["op"] == "add_quant"
        table = configs.forward_launch(2048, 2, fused, 2, dtype="bf16")
        assert case["rows"][0]["launch"] == dataclasses.asdict(table)
        assert len(case["rows"]) > 1
        for row in case["rows"]:
            assert row["us"] > 0 and isinstance(row["same"], bool), row
        derived = configs.forward_launch(2048, 2, fused, 2, dtype="bf16", quantized="token")
        assert [r["launch"] for r in case["rows"] if r["quantized"]] == \
            [dataclasses.asdict(derived)]
    assert capsys.readouterr().out.count("best of the same bits") == 2


def test_quant_sweep_narrow_times_the_derived_launch_under_each_register_cap(fake_timer,
                                                                             tmp_path):
    path = tmp_path / "quant-sweep.json"
    quant_sweep.main(["--op", "quant", "--modes", "group128", "--shapes", "2x2048", "--caps",
                      "0", "96", "--narrow", "--json", str(path)])
    (case,) = json.loads(path.read_text())
    table = configs.forward_launch(2048, 2, False, 2, dtype="bf16")
    derived = configs.forward_launch(2048, 2, False, 2, dtype="bf16", quantized="group")
    want = [table, derived, dataclasses.replace(derived, max_registers=0),
            dataclasses.replace(derived, max_registers=96),
            dataclasses.replace(derived, w_resident=not derived.w_resident)]
    assert [r["launch"] for r in case["rows"]] == [dataclasses.asdict(w) for w in want]
    assert all(r["same"] for r in case["rows"]), case["rows"]
