"""scripts/suite_report.py: a suite run's summary and the cases short of their goals."""

import json
import subprocess
import sys

from helpers import ROOT

SCRIPT = ROOT / "scripts" / "suite_report.py"


def row(op, dtype, m, n, timing, pct=None, us=None):
    impl = {k: v for k, v in (("pct_copy", pct), ("us", us)) if v is not None}
    return {"op": op, "dtype": dtype, "M": m, "N": n, "timing": timing,
            "impls": {"rmsnorm": impl}}


def report(tmp_path, rows, peers=()):
    suite, peer_file = tmp_path / "suite.json", tmp_path / "peers.json"
    suite.write_text(json.dumps({"device": "GPU", "torch": "x", "rows": rows}))
    peer_file.write_text(json.dumps({"rows": list(peers)}))
    done = subprocess.run([sys.executable, str(SCRIPT), str(suite), "--peers", str(peer_file)],
                          capture_output=True, text=True, check=True)
    return done.stdout


def test_every_goal_missed_is_listed_with_its_shortfall(tmp_path):
    out = report(tmp_path, [
        row("fwd", "bfloat16", 512, 131072, "median", pct=90.0),  # goal 95
        row("fwd", "bfloat16", 8192, 8192, "median", pct=97.5),  # meets 97
        row("fwd", "float32", 8192, 8192, "median", pct=95.0),  # bf16 - 2 = 95.5
        row("bwd", "float16", 4096, 16384, "graph_hbm", pct=91.0),  # goal 92
    ])
    misses = out.split("Cases short of their goal:")[1]
    assert "| fwd | bfloat16 | 512 x 131072 | median | 90.0% | 95.0% (N >= 32768) | 5.0 points |" \
        in misses
    assert "8192 x 8192 | median | 95.0% | 95.5% (bf16 - 2) | 0.5 points" in misses
    assert "| bwd | float16 | 4096 x 16384 | graph_hbm | 91.0% | 92.0%" in misses
    assert "| fwd | bfloat16 | 8192 x 8192 |" not in misses


def test_decode_is_held_to_the_fastest_peers_time(tmp_path):
    peers = [{"op": "fwd", "M": 1, "N": 4096, "timing": "graph",
              "impls": {"rmsnorm": {"us": 2.6}, "liger": {"us": 2.0}, "quack": {"us": 2.1}}}]
    out = report(tmp_path, [row("fwd", "bfloat16", 1, 4096, "graph", pct=40.0, us=2.4)], peers)
    assert "| 1 x 4096 | graph | 2.40 us | 2.00 us (liger) | 0.40 us |" in out


def test_the_summary_gives_each_groups_geometric_mean_and_worst_case(tmp_path):
    out = report(tmp_path, [row("add", "bfloat16", 64, 128, "median", pct=80.0),
                            row("add", "bfloat16", 64, 256, "median", pct=45.0)])
    assert "| add | bfloat16 | 60.0 (min 45.0 at 64 x 256) |" in out


def test_a_backward_whose_dw_costs_5_percent_or_more_is_listed(tmp_path):
    slow = row("bwd", "bfloat16", 4096, 16384, "median", pct=70.0, us=146.0)
    slow["bwd_no_dw_us"] = 113.0  # dw: 22.6% of the backward
    fast = row("bwd", "bfloat16", 16384, 4096, "median", pct=93.0, us=100.0)
    fast["bwd_no_dw_us"] = 96.0  # 4%
    out = report(tmp_path, [slow, fast]).split("Cases short of their goal:")[1]
    assert "| bwd | bfloat16 | 4096 x 16384 | median | dw 22.6% of the backward | < 5% | " \
        "17.6 points |" in out
    assert "16384 x 4096 | median | dw" not in out


def test_forward_and_backward_is_held_to_90_percent_from_a_cuda_graph(tmp_path):
    step = row("fwdbwd", "bfloat16", 4096, 16384, "median", pct=39.1)  # eager: host-bound
    step["impls"]["rmsnorm_graphed"] = {"pct_copy": 75.6}
    met = row("fwdbwd", "bfloat16", 16384, 4096, "median", pct=28.6)
    met["impls"]["rmsnorm_graphed"] = {"pct_copy": 92.0}
    out = report(tmp_path, [step, met])
    assert "| fwdbwd | bfloat16 | 83.4 (min 75.6 at 4096 x 16384) |" in out
    misses = out.split("Cases short of their goal:")[1]
    assert "| fwdbwd | bfloat16 | 4096 x 16384 | median | 75.6% | 90.0% (fwd+bwd from a CUDA " \
        "graph) | 14.4 points |" in misses
    assert "16384 x 4096" not in misses
