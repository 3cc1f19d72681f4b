"""The CLIs' --help: usage, exit 0, nothing run; and the console scripts pyproject.toml
declares (rmsnorm-bench, rmsnorm-demo, rmsnorm-sweep, rmsnorm-compare) name each module's
main()."""

import importlib
import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = {"rmsnorm-bench": "rmsnorm_tools.bench", "rmsnorm-demo": "rmsnorm_tools.demo",
           "rmsnorm-sweep": "rmsnorm_tools.sweep", "rmsnorm-compare": "rmsnorm.compare"}
# Where a script's main() lives when it is not the module `python -m` runs (a package's
# __main__ calls it).
ENTRY = {"rmsnorm.compare": "rmsnorm.compare.cli"}


@pytest.mark.parametrize("module", sorted(SCRIPTS.values()))
def test_help_prints_usage_and_runs_nothing(module):
    env = dict(os.environ, PYTHONPATH=ROOT)
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    seconds = time.monotonic() - t0
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m {module} [-h]"), done.stdout
    # Nothing ran: no table, no result (the demo takes tens of seconds on the CPU; the GPU
    # tools exit 1 without a GPU).
    assert "| shape |" not in done.stdout and "correctness:" not in done.stdout, done.stdout
    assert "Bit-identical" not in done.stdout, done.stdout
    assert seconds < 60, f"--help took {seconds:.0f} s"


def test_console_scripts_call_each_modules_main():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    entries = {name: ENTRY.get(module, module) for name, module in SCRIPTS.items()}
    assert scripts == {name: f"{module}:main" for name, module in entries.items()}
    for module in entries.values():
        assert callable(importlib.import_module(module).main)
