"""The report's words, JSON and PNG, on the walk-through's case: a fused add that normalizes
the unrounded fp32 sum (docs/COMPARE.md)."""

import json
import os

import pytest
import torch

from rmsnorm import compare
from rmsnorm.compare import adapters
from helpers import ROOT

EXAMPLE = os.path.join(str(ROOT),
                       "examples", "compare", "fused_add.py")


@pytest.fixture(scope="module")
def report():
    fused = adapters.inplace(adapters.load(f"{EXAMPLE}:fused_add_rms_norm"))
    x, w, r = compare.generate((40, 64), torch.bfloat16, residual=True,
                               weight_dtype=torch.bfloat16, seed=0)
    return compare.diagnose(fused, x, w, 1e-6, residual=r)


def test_the_fp32_sum_is_named_and_the_weight_left_undetermined(report):
    assert report.exact and "fused_add_fp32_sum" in report.names
    assert report.best["residual"] == "fp32"
    assert report.undetermined == ["weight"]  # a bf16 weight with offset 0
    text = report.summary()
    assert "normalizes the unrounded fp32 sum" in text
    assert "weight is undetermined" in text and "offset" in text


def test_rows_and_table_list_what_was_evaluated(report):
    assert report.rows[0].recipe == report.best_recipe and report.rows[0].exact
    assert 8 <= len(report.rows) <= 32
    # HF Llama's rounded sum differs from the candidate's y, not from its residual_out.
    llama = next(r for r in report.rows if "hf_llama" in r.names)
    assert llama.identical < 0.95 and llama.residual_identical == 1.0
    table = report.table()
    assert "fused_add_fp32_sum" in table and "residual_out identical" in table


def test_json_round_trips(report, tmp_path):
    doc = json.loads(report.to_json(tmp_path / "r.json"))
    assert doc == json.loads((tmp_path / "r.json").read_text())
    assert doc["best"] == report.best and doc["exact"] is True
    assert doc["undetermined"] == ["weight"] and len(doc["rows"]) == len(report.rows)
    assert doc["summary"] == report.summary()


def test_worst_elements_carry_inputs_and_all_three_values():
    x, w, _ = compare.generate((8, 32), torch.bfloat16, weight_dtype=torch.bfloat16, seed=3)
    truncated = compare.evaluate(compare.recipe("truncating_llama"), x, w).y
    report = compare.diagnose(None, x, w, y=truncated.clone().view(torch.int16).add(2)
                              .view(torch.bfloat16), worst=4)
    assert len(report.worst) == 4
    keys = {"row", "column", "ulps", "x", "weight", "candidate", "recipe", "float64"}
    assert keys <= set(report.worst[0])
    assert report.worst[0]["ulps"] >= report.worst[-1]["ulps"] > 0


def test_plot_writes_a_png(report, tmp_path):
    pytest.importorskip("matplotlib")
    path = report.plot(tmp_path / "r.png")
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
