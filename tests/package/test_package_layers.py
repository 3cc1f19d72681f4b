"""The package's layers import downward only: the library never imports the tools
(rmsnorm_tools), the launcher and the PyTorch layer never import the oracle the tests hold
them against (rmsnorm.reference) nor the diagnosis tool built on it (rmsnorm.compare), and
the device code imports nothing of the host side."""

import ast

import pytest

from helpers import ROOT


def _imports(path):
    """Every module path.py imports, at any depth (function-level imports included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{alias.name}" for alias in node.names}
    return out


def _modules(folder):
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("folder, forbidden", [
    ("rmsnorm", ("rmsnorm_tools",)),
    ("rmsnorm/launch", ("rmsnorm.reference", "rmsnorm.pytorch", "rmsnorm.integrations",
                        "rmsnorm.compare")),
    ("rmsnorm/pytorch", ("rmsnorm.reference", "rmsnorm.compare")),
    ("rmsnorm/integrations", ("rmsnorm.reference", "rmsnorm.compare")),
    ("rmsnorm/kernels", ("rmsnorm.launch", "rmsnorm.pytorch", "rmsnorm.aot", "torch",
                         "rmsnorm.compare")),
])
def test_a_layer_never_imports_what_sits_above_it_or_the_oracle(folder, forbidden):
    for path in _modules(folder):
        bad = {m for m in _imports(path) if any(m == f or m.startswith(f + ".")
                                                for f in forbidden)}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


# The launcher's own layers: the entry points (ops, and the forward, backward and quantized
# launchers under it) sit on specs (which kernel a call gets), which sits on device and
# tensors; a lower layer never reaches up.
LAUNCHERS = ("rmsnorm.launch.ops", "rmsnorm.launch.forward", "rmsnorm.launch.backward",
             "rmsnorm.launch.quant")


@pytest.mark.parametrize("module, forbidden", [
    ("specs", LAUNCHERS),
    ("device", LAUNCHERS + ("rmsnorm.launch.specs", "rmsnorm.launch.tensors")),
    ("tensors", LAUNCHERS + ("rmsnorm.launch.specs", "rmsnorm.launch.device")),
])
def test_the_launchers_layers_import_downward_only(module, forbidden):
    path = ROOT / "rmsnorm" / "launch" / f"{module}.py"
    bad = {m for m in _imports(path) if any(m == f or m.startswith(f + ".") for f in forbidden)}
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from rmsnorm import reference\n")
    assert "rmsnorm.reference" in _imports(module)
