"""The README's quickstart is the two commands, and its CPU example runs as written."""

import os
import re
import subprocess
import sys

from helpers import ROOT


def _readme_blocks(lang):
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return re.findall(rf"```{lang}\n(.*?)```", f.read(), re.S)


def test_quickstart_is_the_two_commands():
    commands = [line.split("#")[0].strip() for line in _readme_blocks("bash")[0].splitlines()]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]


def test_the_cpu_example_runs():
    example = next(b for b in _readme_blocks("python") if "TRITON_INTERPRET" in b)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = ROOT
    done = subprocess.run([sys.executable, "-c", example], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
