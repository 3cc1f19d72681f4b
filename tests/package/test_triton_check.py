"""scripts/triton_check.sh (CI's check of the other Tritons of the range) where pip cannot
install, as on the GPU machine: skipped with a message and exit status 0, like
install_check.sh, whose test it shares. Where pip can, the test command runs it for real."""

import os
import shutil
import subprocess

import pytest

from helpers import ROOT

SCRIPT = os.path.join(ROOT, "scripts", "triton_check.sh")


def _run(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, TMPDIR=str(tmp_path),
               RMSNORM_TRITON_LOGS=str(tmp_path / "logs"), **extra)
    return subprocess.run(["bash", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.skipif(shutil.which("python3") is None, reason="no python3 on PATH")
def test_skipped_where_pip_cannot_install(tmp_path):
    empty = tmp_path / "index"
    empty.mkdir()
    done = _run(tmp_path, PIP_INDEX_URL=empty.as_uri(), RMSNORM_TRITONS="3.9.0")
    assert done.returncode == 0, done.stderr
    assert "triton check: SKIPPED: pip cannot install torch 2.13.0, triton 3.9.0" in \
        done.stderr or "triton check: SKIPPED: python3 cannot make a venv" in done.stderr, \
        done.stderr


def test_skipped_on_request(tmp_path):
    done = _run(tmp_path, RMSNORM_SKIP_TRITON_CHECK="1")
    assert done.returncode == 0 and "SKIPPED (RMSNORM_SKIP_TRITON_CHECK=1)" in done.stderr
