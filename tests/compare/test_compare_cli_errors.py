"""rmsnorm-compare on bad input: exit 2 (exit 1 means the candidate failed) with one line naming
the argument and what is wrong, before anything is diagnosed or printed; never a traceback."""

import os
import sys

import pytest
import torch

from rmsnorm.compare import cli

X = torch.linspace(-2, 2, 64).reshape(4, 16).bfloat16()


class NotATensor:  # a class torch.load(weights_only=True) refuses to unpickle
    pass


def refused(capsys, *argv):
    """The one line rmsnorm-compare printed, having exited 2 and printed no report."""
    code = cli.main(list(argv))
    out = capsys.readouterr()
    assert code == 2, (code, out.err)
    assert out.out == "", out.out
    lines = out.err.strip().splitlines()
    assert len(lines) == 1, out.err
    return lines[0]


def saved(tmp_path, name, content):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        torch.save(content, path)
    return str(path)


def truncated(path):
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:len(data) // 2])
    return path


def test_a_truncated_pt_file(capsys, tmp_path):
    path = truncated(saved(tmp_path, "t.pt", {"x": X, "y": X.clone()}))
    line = refused(capsys, "--tensors", path)
    assert "--tensors" in line and "t.pt" in line and "torch.save" in line


def test_a_file_of_random_bytes(capsys, tmp_path):
    path = saved(tmp_path, "r.pt", bytes(range(256)) * 8)
    assert "--tensors" in refused(capsys, "--tensors", path)


def test_a_pt_file_holding_a_class_torch_load_refuses(capsys, tmp_path):
    path = saved(tmp_path, "c.pt", {"x": X, "y": X.clone(), "note": NotATensor()})
    line = refused(capsys, "--tensors", path)
    assert "NotATensor" in line and "weights_only" in line


def test_a_truncated_safetensors_file(capsys, tmp_path):
    safetensors = pytest.importorskip("safetensors.torch")
    path = str(tmp_path / "t.safetensors")
    safetensors.save_file({"x": X, "y": X.clone()}, path)
    line = refused(capsys, "--tensors", truncated(path))
    assert "--tensors" in line and "safetensors" in line


def test_a_missing_file(capsys, tmp_path):
    assert "no file" in refused(capsys, "--tensors", str(tmp_path / "none.pt"))


def test_an_entry_that_is_not_a_tensor_is_named(capsys, tmp_path):
    path = saved(tmp_path, "l.pt", {"x": X.tolist(), "y": X})
    line = refused(capsys, "--tensors", path)
    assert "x in" in line and "is a list, not a tensor" in line


def test_an_unknown_key_is_named_not_ignored(capsys, tmp_path):
    # A misspelt "weight" would otherwise be diagnosed as a norm without one.
    path = saved(tmp_path, "k.pt", {"x": X, "w": torch.ones(16), "y": X})
    line = refused(capsys, "--tensors", path)
    assert "'w'" in line and "weight" in line


def test_an_eps_that_is_not_a_number(capsys, tmp_path):
    path = saved(tmp_path, "e.pt", {"x": X, "y": X, "eps": "small"})
    assert "eps in" in refused(capsys, "--tensors", path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is usable here")
def test_device_cuda_without_cuda(capsys):
    line = refused(capsys, "--recipe", "hf_llama", "--device", "cuda")
    assert line.startswith(f"{cli.prog_name()}: error: --device cuda:"), line


def test_device_nonsense(capsys):
    assert "--device 'nonsense'" in refused(capsys, "--recipe", "hf_llama", "--device",
                                            "nonsense")


@pytest.mark.parametrize("option", ["--json", "--plot"])
def test_output_into_a_folder_that_does_not_exist_is_refused_before_running(
        capsys, tmp_path, option):
    pytest.importorskip("matplotlib")
    line = refused(capsys, "--recipe", "hf_llama", option, str(tmp_path / "no" / "r.out"))
    assert option in line and "no folder" in line


def test_output_onto_a_folder_is_refused(capsys, tmp_path):
    assert "is a folder" in refused(capsys, "--recipe", "hf_llama", "--json", str(tmp_path))


# The second would run for ever on main: generating 2^40 rows one at a time.
@pytest.mark.parametrize("shape", ["1x1099511627776", "1099511627776x64"])
def test_shapes_too_large_to_allocate(capsys, shape):
    line = refused(capsys, "--recipe", "hf_llama", "--shapes", "8x32", shape)
    assert f"--shapes {shape}" in line and "GiB" in line


def test_a_shape_too_small_is_named(capsys):
    assert refused(capsys, "--recipe", "hf_llama", "--shapes", "0x64").startswith(
        f"{cli.prog_name()}: error: --shapes 0x64: ")


def test_plot_without_matplotlib(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    line = refused(capsys, "--recipe", "hf_llama", "--plot", str(tmp_path / "p.png"))
    assert "--plot needs matplotlib" in line
    assert not os.path.exists(tmp_path / "p.png")
