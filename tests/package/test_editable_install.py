"""An editable install (pip install --no-build-isolation -e .) imports the checkout's rmsnorm,
so its native part must land in the checkout's rmsnorm/_native, not under the install prefix
(site-packages), where the checkout's rmsnorm never looks. Here the CMake steps scikit-build-core
runs for an editable install, on a copy of the checkout; scripts/install_check.sh does the real
pip install -e."""

import os
import shutil
import subprocess
import sys

import pytest

from helpers import ROOT

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None, reason="no cmake")


def _run(*command, **kwargs):
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600, **kwargs)
    assert done.returncode == 0, done.stdout
    return done.stdout


def test_an_editable_install_puts_the_native_part_where_the_checkout_loads_it(tmp_path):
    src, build, prefix = tmp_path / "src", tmp_path / "build", tmp_path / "site-packages"
    _run("bash", str(ROOT / "scripts" / "copy_checkout.sh"), str(src))
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    # What scikit-build-core defines for `pip install -e` (pyproject.toml's defines too); no GPU
    # kernels, whatever torch this is: the AOT compile is not what is tested.
    _run("cmake", "-S", str(src), "-B", str(build), *generator, "-DSKBUILD=2",
         "-DSKBUILD_STATE=editable", f"-DPython_EXECUTABLE={sys.executable}",
         "-DCMAKE_BUILD_TYPE=Release", "-DRMSNORM_BUILD_TESTS=OFF", "-DRMSNORM_BUILD_BENCH=OFF",
         "-DRMSNORM_GPU=OFF")
    _run("cmake", "--build", str(build), "-j", str(os.cpu_count() or 1))
    _run("cmake", "--install", str(build), "--component", "python", "--prefix", str(prefix))
    assert not (prefix / "rmsnorm" / "_native").exists()
    # The checkout's rmsnorm, from outside it, as the editable install's import hook finds it.
    env = dict(os.environ, PYTHONPATH=str(src))
    ops = _run(sys.executable, "-c", "import rmsnorm; print(rmsnorm.status()['ops'])",
               cwd=tmp_path, env=env).strip()
    assert ops == f"loaded: {src.resolve() / 'rmsnorm' / '_native' / 'librmsnorm_torch.so'}"
