"""rmsnorm-compare: a candidate imported, planted or saved as tensors, diagnosed and written as
JSON and PNG; bad arguments and failing candidates exit non-zero with the reason."""

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from rmsnorm import compare
from rmsnorm.compare import cli, space

from helpers import ROOT

EXAMPLE = os.path.join(ROOT, "examples", "compare", "fused_add.py")


def run(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_an_imported_in_place_fused_add_is_diagnosed(capsys, tmp_path):
    code, out, _ = run(capsys, "--impl", f"{EXAMPLE}:fused_add_rms_norm", "--convention",
                       "inplace", "--residual", "--shapes", "20x64", "--json",
                       str(tmp_path / "r.json"))
    assert code == 0
    assert "fused_add_fp32_sum" in out and "normalizes the unrounded fp32 sum" in out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["exact"] is True and doc["best"]["residual"] == "fp32"


def test_a_planted_recipe_per_shape_with_plots(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    code, out, _ = run(capsys, "--recipe", "upcast=none,store=truncate", "--dtype", "fp16",
                       "--shapes", "10x32", "15x48", "--plot", str(tmp_path / "p.png"))
    assert code == 0 and out.count("Bit-identical to") == 2
    assert out.count("== ") == 2
    for shape in ("10x32", "15x48"):
        assert (tmp_path / f"p_{shape}.png").read_bytes()[:4] == b"\x89PNG"


def test_an_rmsnorm_function_with_keywords(capsys):
    # rmsnorm's own forward (on the CPU: its kernel under the interpreter where the tests set
    # it, else the contract's PyTorch ops), its casting mode passed by --kwarg.
    code, out, _ = run(capsys, "--impl", "rmsnorm:rms_norm", "--kwarg", "casting_mode='gemma'",
                       "--shapes", "8x32")
    assert code == 0 and "Bit-identical to HF Gemma" in out, out
    # contract_rms_norm returns (y, rstd): a pair where a norm returns y is a bad output.
    code, _, err = run(capsys, "--impl", "rmsnorm.reference:contract_rms_norm", "--kwarg",
                       "casting_mode='gemma'", "--shapes", "8x32")
    assert code == 1 and "returned 2 values; without a residual" in err, err


@pytest.mark.parametrize("fmt", ["pt", "safetensors"])
def test_saved_tensors_are_diagnosed(capsys, tmp_path, fmt):
    x, w, r = compare.generate((12, 64), torch.bfloat16, residual=True, seed=4)
    ev = space.evaluate(space.recipe("truncating_llama"), x, w, residual=r)
    tensors = {"x": x, "weight": w, "residual": r, "y": ev.y, "residual_out": ev.residual_out}
    path = tmp_path / f"t.{fmt}"
    if fmt == "pt":
        torch.save(tensors, path)
    else:
        safetensors = pytest.importorskip("safetensors.torch")
        safetensors.save_file(tensors, path)
    code, out, _ = run(capsys, "--tensors", str(path))
    assert code == 0
    assert "Bit-identical to HF Llama with truncating conversions" in out


def test_bad_arguments_exit_2_with_the_reason(capsys, tmp_path):
    code, _, err = run(capsys, "--impl", "no_such_module_xyz:f")
    assert code == 2 and "no_such_module_xyz" in err
    code, _, err = run(capsys, "--recipe", "store=sometimes")
    assert code == 2 and "store" in err
    torch.save({"x": torch.randn(2, 8)}, tmp_path / "t.pt")
    code, _, err = run(capsys, "--tensors", str(tmp_path / "t.pt"))
    assert code == 2 and "has no y" in err
    with pytest.raises(SystemExit) as e:
        cli.main(["--recipe", "hf_llama", "--shapes", "12by4"])
    assert e.value.code == 2


def test_a_saved_y_no_norm_returns_is_the_candidates_failure(capsys, tmp_path):
    x, w, _ = compare.generate((4, 16), torch.bfloat16, seed=3)
    y = space.evaluate(space.Recipe(), x, w).y.double()
    torch.save({"x": x, "weight": w, "y": y}, tmp_path / "t.pt")
    code, out, err = run(capsys, "--tensors", str(tmp_path / "t.pt"))
    assert (code, out) == (1, "") and "y is torch.float64" in err, err


def test_the_ulp_columns_name_ys_dtype_not_only_the_inputs(capsys, tmp_path):
    # bf16 x with an fp32 weight: HF Llama's y is fp32 and the ulps are fp32's (2^16 times
    # finer than the bf16 of the header); HF Gemma's y is bf16.
    code, out, _ = run(capsys, "--recipe", "hf_llama", "--shapes", "8x32", "--dtype", "bf16")
    assert code == 0 and "== 8x32 bf16" in out
    assert "| max ulp of fp32 y | mean ulp of fp32 y |" in out, out
    code, out, _ = run(capsys, "--recipe", "hf_gemma", "--shapes", "8x32", "--dtype", "bf16")
    assert "| max ulp of bf16 y | mean ulp of bf16 y |" in out, out
    # The worst elements too: one fp32 element of a saved y nudged by an ulp.
    x, w, _ = compare.generate((8, 32), torch.bfloat16, seed=5)
    y = space.evaluate(space.Recipe(), x, w).y
    y[0, 0] = torch.nextafter(y[0, 0], torch.tensor(math.inf))
    torch.save({"x": x, "weight": w, "y": y}, tmp_path / "t.pt")
    code, out, _ = run(capsys, "--tensors", str(tmp_path / "t.pt"))
    assert code == 0 and "worst elements (row, column: candidate / recipe / float64, ulps of " \
        "fp32 y):\n  0, 0:" in out, out


def fresh_python(*args):
    """A new interpreter, from the checkout, on args; it must succeed."""
    done = subprocess.run([sys.executable, *args], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def test_python_m_runs_the_same_main():
    done = fresh_python("-m", "rmsnorm.compare", "--recipe", "hf_gemma", "--shapes", "6x32",
                        "--dtype", "bf16")
    assert "Bit-identical to HF Gemma" in done.stdout


def test_import_and_diagnose_need_neither_matplotlib_nor_transformers():
    code = ("import sys, torch; from rmsnorm import compare; "
            "x, w, _ = compare.generate((4, 16), torch.bfloat16); "
            "compare.diagnose(lambda x, w, e: compare.evaluate(compare.Recipe(), x, w, e).y, "
            "x, w).summary(); "
            "print(sorted(m for m in ('matplotlib', 'transformers') if m in sys.modules))")
    done = fresh_python("-c", code)
    assert done.stdout.strip() == "[]"


def test_the_adapters_come_with_import_compare_as_the_doc_uses_them():
    # In a fresh interpreter: here another test may have imported rmsnorm.compare.adapters.
    code = ("import sys, torch; from rmsnorm import compare; "
            "x, w, _ = compare.generate((4, 16), torch.bfloat16, weight_dtype=torch.bfloat16); "
            "print(compare.diagnose(compare.adapters.hf(torch.nn.RMSNorm), x, w).names); "
            "print(sorted(m for m in ('matplotlib', 'transformers') if m in sys.modules))")
    done = fresh_python("-c", code)
    names, heavy = done.stdout.strip().splitlines()
    assert "'torch'" in names and heavy == "[]", done.stdout
