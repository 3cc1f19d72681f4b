"""The Triton releases rmsnorm supports: one range (rmsnorm.launch.triton_versions.TESTED), which
pyproject.toml declares and no wider, every minor release of which CI installs and tests, and
outside which `import rmsnorm` warns once and runs."""

import os
import re
import subprocess
import sys
import tomllib
import warnings

import pytest

from rmsnorm.launch import triton_versions

from helpers import ROOT


def _minor(version):
    return tuple(int(p) for p in version.split(".")[:2])


def _ci_pin():
    text = (ROOT / "requirements" / "ci.txt").read_text()
    return re.search(r"^triton==(\S+)$", text, re.M)[1]


def _other_tritons():
    lines = (ROOT / "requirements" / "other-tritons.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_pyproject_declares_the_tested_range_and_no_wider():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    triton = [d for d in deps if d.startswith("triton")]
    (lo_major, lo_minor), (hi_major, hi_minor) = triton_versions.TESTED
    assert triton == [f"triton>={lo_major}.{lo_minor},<{hi_major}.{hi_minor + 1}"]


def test_ci_installs_one_release_of_every_minor_in_the_range():
    tested = [_ci_pin(), *_other_tritons()]
    minors = [_minor(v) for v in tested]
    assert len(set(minors)) == len(minors), f"two releases of one minor: {tested}"
    lo, hi = triton_versions.TESTED
    assert sorted(minors) == [(lo[0], m) for m in range(lo[1], hi[1] + 1)]
    assert lo[0] == hi[0]  # a range over majors would need its own enumeration


def test_ci_runs_the_other_releases():
    test_sh = (ROOT / "scripts" / "test.sh").read_text()
    assert "scripts/triton_check.sh" in test_sh
    check = (ROOT / "scripts" / "triton_check.sh").read_text()
    assert "requirements/other-tritons.txt" in check


@pytest.mark.parametrize("version", ["3.6.0", "3.7.1", "3.8.0", "3.9.0", "3.9.1",
                                     "3.7.0+git4a2f", "3.8.0rc1"])
def test_a_tested_release_is_silent(version):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        triton_versions.check(version)


@pytest.mark.parametrize("version", ["3.5.1", "3.10.0", "4.0.0", "2.3.0", "nightly"])
def test_another_warns_naming_the_tested_range(version):
    with pytest.warns(triton_versions.UntestedTritonWarning) as caught:
        triton_versions.check(version)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"triton {version} is outside" in message and "3.6 to 3.9" in message


def test_import_warns_once_on_an_untested_triton_and_runs():
    # A child process: rmsnorm is imported once per process, with the version Triton reports.
    code = ("import warnings; warnings.simplefilter('always')\n"
            "import triton; triton.__version__ = '3.10.0'\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always')\n"
            "    import rmsnorm\n"
            "import torch\n"
            "x = torch.randn(2, 8)\n"
            "assert torch.equal(rmsnorm.rms_norm(x, None), rmsnorm.reference.contract_rms_norm(x, None)[0])\n"
            "ours = [w for w in caught if issubclass(w.category, rmsnorm.UntestedTritonWarning)]\n"
            "print(len(ours), ours[0].message if ours else '')\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    count, _, message = done.stdout.strip().partition(" ")
    assert count == "1" and "triton 3.10.0 is outside" in message
