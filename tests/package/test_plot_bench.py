"""scripts/plot_bench.py writes the PNG plots of docs/PERFORMANCE.md, from a small synthetic run
and from the committed baseline and peers' JSON."""

import importlib.util
import json
import os
import random

import pytest

pytest.importorskip("matplotlib", reason="scripts/plot_bench.py needs matplotlib "
                    "(requirements/ci.txt); this Python has none (as on the GPU machine)")

from rmsnorm_tools import suite  # noqa: E402

from helpers import ROOT

RESULTS = os.path.join(ROOT, "docs", "results")
PNGS = ("fwd_pct_copy.png", "add_pct_copy.png", "bwd_pct_copy.png", "decode_us.png")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _script():
    # A script, not a package module: loaded from its path as `python scripts/...` would run it.
    spec = importlib.util.spec_from_file_location(
        "plot_bench", os.path.join(ROOT, "scripts", "plot_bench.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(rng, op, dtype, m, n, timing, peer_names=None):
    copy_gbps = rng.uniform(2000, 4500)
    if peer_names is None:  # a suite row: rmsnorm only, every field
        pct = rng.uniform(20, 110)
        return {"op": op, "dtype": dtype, "M": m, "N": n, "timing": timing, "bytes": 2 * m * n,
                "copy_gbps": copy_gbps,
                "impls": {"rmsnorm": {"us": rng.uniform(2, 500), "gbps": copy_gbps * pct / 100,
                                      "pct_copy": pct}}}
    # A peers' row: rounded like the tables, us at decode shapes, GB/s elsewhere.
    unit = "us" if timing == "graph" else "gbps"
    return {"op": op, "M": m, "N": n, "timing": timing, "copy_gbps": round(copy_gbps),
            "impls": {name: {"pct_copy": rng.randint(10, 100), unit: round(rng.uniform(2, 4000))}
                      for name in peer_names}}


def _synthetic(tmp_path):
    rng = random.Random(12)
    widths = (128, 768, 4096, 65536)
    rows = []
    for dtype in ("bfloat16", "float32"):
        for op in suite.OPS:
            rows += [_row(rng, op, dtype, m, n, timing)
                     for m, n, timing in suite.throughput_shapes() if n in widths]
        rows += [_row(rng, op, dtype, m, n, "graph") for op in suite.DECODE_OPS
                 for m in suite.DECODE_ROWS for n in suite.DECODE_WIDTHS]
    everyone = ["rmsnorm", "quack", "liger", "flashinfer", "compile", "torch"]
    peers = [_row(rng, op, None, m, n, "median", everyone)
             for op in ("fwd", "add", "fwdbwd") for m, n in ((16384, 4096), (1024, 65536))]
    # Decode: a missing cell (no compile) is left out of the row, as in the committed JSON.
    peers += [_row(rng, op, None, m, n, "graph", everyone[:4] + everyone[5:])
              for op in suite.DECODE_OPS for m, n in ((1, 4096), (256, 8192))]
    baseline_path, peers_path = tmp_path / "baseline.json", tmp_path / "peers.json"
    baseline_path.write_text(json.dumps({"device": "Test GPU", "rows": rows}))
    peers_path.write_text(json.dumps({"date": "2026-01-01", "rows": peers}))
    return str(baseline_path), str(peers_path)


def _check_pngs(written, out):
    assert sorted(os.path.basename(p) for p in written) == sorted(PNGS)
    for name in PNGS:
        with open(os.path.join(out, name), "rb") as f:
            data = f.read()
        assert data.startswith(PNG_MAGIC), name
        assert len(data) > 10_000, f"{name}: {len(data)} bytes, an empty plot?"


def test_plots_of_a_synthetic_run(tmp_path):
    baseline, peers = _synthetic(tmp_path)
    out = str(tmp_path / "plots")
    written = _script().main(["--baseline", baseline, "--peers", peers, "--out", out])
    _check_pngs(written, out)


def test_plots_of_the_committed_baseline_and_peers(tmp_path):
    out = str(tmp_path / "plots")
    written = _script().main(["--baseline", os.path.join(RESULTS, "h200-baseline.json"),
                              "--peers", os.path.join(RESULTS, "h200-peers.json"), "--out", out])
    _check_pngs(written, out)
