"""When the op library is missing, the error says which rmsnorm was imported and the quick way
out: a checkout's source tree (often the current folder, hiding an installed rmsnorm) is built
in place with scripts/build_native.sh, not with the long test build; an installed package is
reinstalled."""

import os
import subprocess
import sys

import torch

from rmsnorm.pytorch import native

from helpers import ROOT


def _source_tree(tmp_path):
    """A checkout's layout without its native part: what missing() tells a source tree by."""
    (tmp_path / "scripts").mkdir(parents=True)
    (tmp_path / "scripts" / "build_native.sh").touch()
    (tmp_path / "pyproject.toml").touch()
    (tmp_path / "rmsnorm").mkdir()
    return tmp_path / "rmsnorm"


def _installed(where):
    package = where / "rmsnorm"
    (package / "_native").mkdir(parents=True)
    (package / "__init__.py").touch()
    (package / "_native" / "librmsnorm_torch.so").touch()
    return package


def test_a_source_tree_points_to_the_in_place_build_not_the_test_build(tmp_path):
    said = native.missing(_source_tree(tmp_path), search_path=[])
    assert f"the source tree at {tmp_path}, not an installed package" in said, said
    assert "bash scripts/build_native.sh" in said and "test_cpp.sh" not in said, said
    if torch.version.cuda is None:
        assert "under a minute" in said, said


def test_a_source_tree_that_hides_an_installed_rmsnorm_names_it(tmp_path):
    package = _source_tree(tmp_path / "checkout")
    site = _installed(tmp_path / "site-packages")
    said = native.missing(package, search_path=[str(tmp_path / "checkout"),
                                                str(tmp_path / "site-packages")])
    assert f"run from outside {tmp_path / 'checkout'}" in said and str(site) in said, said


def test_an_installed_package_is_reinstalled(tmp_path):
    package = _installed(tmp_path)
    (package / "_native" / "librmsnorm_torch.so").unlink()
    said = native.missing(package, search_path=[])
    assert said.endswith("Reinstall rmsnorm: pip install --no-build-isolation ."), said
    assert "source tree" not in said


def test_importing_a_checkout_without_its_native_part_from_its_root_says_so(tmp_path):
    checkout = tmp_path / "checkout"
    subprocess.run(["bash", str(ROOT / "scripts" / "copy_checkout.sh"), str(checkout)],
                   check=True)
    assert not (checkout / "rmsnorm" / "_native").exists()
    # `python -c` from the checkout's root: the current folder comes first on the path.
    code = "import torch, rmsnorm; rmsnorm.rms_norm(torch.ones(2, 8))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", code], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert f"the source tree at {checkout.resolve()}, not an installed package" in last, last
    assert "bash scripts/build_native.sh" in last and "test_cpp.sh" not in last, last
