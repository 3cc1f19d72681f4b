"""What a plain CMake configure of the package (CMakeLists.txt) and of librmsnorm (cpp/) decides
and says, as a first user meets it: the first thing it says when the Python has no torch (as
in pip's isolated build). Configure steps only: nothing is compiled."""

import os
import pathlib
import re
import shutil
import subprocess
import venv

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None, reason="no cmake")


def configure(source, build, *defines):
    """`cmake -S source -B build defines...`: (exit status, stdout and stderr as one text)."""
    done = subprocess.run(["cmake", "-S", str(source), "-B", str(build), *defines],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300)
    return done.returncode, done.stdout


def rmsnorm_messages(output):
    """The configure's own messages (`rmsnorm: ...`), in order: STATUS lines, and WARNING and
    FATAL_ERROR blocks (which CMake wraps, indented) joined back into one line each."""
    found = []
    for status, block in re.findall(r"^-- (rmsnorm: .*)$|^CMake \w+ at .*:\n((?:  .*\n)+)",
                                    output, re.M):
        text = status or " ".join(line.strip() for line in block.splitlines())
        if text.startswith("rmsnorm: "):
            found.append(text)
    return found


@pytest.fixture(scope="module")
def python_without_torch(tmp_path_factory):
    """A Python that cannot import torch: a bare venv, as pip's isolated build environment is
    to the torch a user installed."""
    where = tmp_path_factory.mktemp("bare-venv")
    venv.create(where, with_pip=False)
    python = where / "bin" / "python"
    assert subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0
    return python


def test_under_pip_a_python_without_torch_is_named_first_and_stops_the_build(
        tmp_path, python_without_torch):
    # What scikit-build-core passes (pyproject.toml): its Python and SKBUILD.
    rc, output = configure(ROOT, tmp_path, f"-DPython_EXECUTABLE={python_without_torch}",
                           "-DSKBUILD=2")
    assert rc != 0, output
    first = rmsnorm_messages(output)[0]
    assert first.startswith(f"rmsnorm: torch is not importable by {python_without_torch}"), output
    assert "--no-build-isolation" in first, first
    assert "CUDA" not in output.split(first)[0], output


def test_without_pip_a_python_without_torch_is_named_first(tmp_path, python_without_torch):
    rc, output = configure(ROOT, tmp_path, f"-DRMSNORM_PYTHON={python_without_torch}")
    assert rc == 0, output
    first = rmsnorm_messages(output)[0]
    assert first.startswith(f"rmsnorm: torch is not importable by {python_without_torch}"), output
    assert "torch ops" in first and "GPU kernels" in first, first
