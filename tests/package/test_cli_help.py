"""The CLIs' --help: usage, exit 0, nothing run; and the console scripts pyproject.toml
declares (rmsnorm-bench, rmsnorm-demo, rmsnorm-sweep, rmsnorm-compare) name each module's
main()."""

import importlib
import os
import re
import subprocess
import sys
import time

import pytest

from helpers import ROOT

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


def _help(module):
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("module", sorted(SCRIPTS.values()))
def test_help_has_no_lines_run_together(module):
    # A backslash ending a line inside a docstring joins it to the next, indentation and all:
    # a run of spaces mid-line. Runs of spaces are only for aligning example comments (#) and,
    # in the options list, the help column.
    for line in _help(module).splitlines():
        text = line.strip()
        if line.startswith("  -"):
            text = re.split(r" {2,}", text, maxsplit=1)[-1]
        assert not re.search(r"\S {2,}(?!#)\S", text), f"{module} --help: {line!r}"


def _not_in_the_wheel():
    """The repository's top folders that the wheel does not ship (pyproject.toml)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        shipped = set(tomllib.load(f)["tool"]["scikit-build"]["wheel"]["packages"])
    return {name for name in os.listdir(ROOT) if not name.startswith(".") and
            os.path.isdir(os.path.join(ROOT, name))} - shipped


@pytest.mark.parametrize("module", sorted(SCRIPTS.values()))
def test_help_names_no_file_an_install_lacks_but_as_a_checkouts(module):
    folders = "|".join(sorted(_not_in_the_wheel()))
    text = " ".join(_help(module).split())
    for found in re.finditer(rf"(?<![\w./-])(?:{folders})/[\w./-]*", text):
        assert text[:found.start()].endswith("a checkout's "), \
            f"{module} --help names {found.group()}, which an installed rmsnorm does not have"
