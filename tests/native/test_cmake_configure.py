"""What a plain CMake configure of the package (CMakeLists.txt) and of librmsnorm (cpp/) decides
and says, as a first user meets it: the first thing it says when the Python has no torch (as
in pip's isolated build). Configure steps only: nothing is compiled."""

import os
import itertools
import json
import re
import shutil
import subprocess
import sys
import venv

import pytest

from helpers import ROOT

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


def cache_value(build, name):
    """A variable of a configured build folder's CMakeCache.txt, or None."""
    found = re.search(rf"^{name}:\w+=(.*)$", (build / "CMakeCache.txt").read_text(), re.M)
    return found.group(1) if found else None


# librmsnorm alone (cpp/) and the package (CMakeLists.txt), each without the GPU kernels and
# the torch ops: nothing of CUDA, triton or torch is needed to configure them.
CPU_ONLY = {"cpp": (ROOT / "cpp", "-DRMSNORM_GPU=OFF"),
            "package": (ROOT, "-DRMSNORM_GPU=OFF", "-DRMSNORM_TORCH_OPS=OFF")}


@pytest.mark.parametrize("which", sorted(CPU_ONLY))
def test_a_configure_without_a_build_type_builds_optimised(tmp_path, which):
    source, *defines = CPU_ONLY[which]
    rc, output = configure(source, tmp_path, *defines)
    assert rc == 0, output
    assert cache_value(tmp_path, "CMAKE_BUILD_TYPE") == "Release"


@pytest.mark.parametrize("which", sorted(CPU_ONLY))
def test_a_build_type_given_is_kept(tmp_path, which):
    source, *defines = CPU_ONLY[which]
    rc, output = configure(source, tmp_path, "-DCMAKE_BUILD_TYPE=Debug", *defines)
    assert rc == 0, output
    assert cache_value(tmp_path, "CMAKE_BUILD_TYPE") == "Debug"


def _cuda_header():
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    return any(h and os.path.exists(os.path.join(h, "include", "cuda.h")) for h in homes)


needs_cuda = pytest.mark.skipif(
    not _cuda_header() or shutil.which("nvcc") is None and not os.path.exists(
        "/usr/local/cuda/bin/nvcc"), reason="no CUDA toolkit (cuda.h and nvcc)")
GPU = {"cpp": (ROOT / "cpp",), "package": (ROOT, "-DRMSNORM_TORCH_OPS=OFF")}


def gpu_configure(source, build, *defines, env=None):
    """A configure with the GPU kernels (the AOT step's Python: this one), answering CMake's
    file API's codemodel query (where each target's file is built)."""
    query = build / ".cmake" / "api" / "v1" / "query" / "codemodel-v2"
    query.parent.mkdir(parents=True)
    query.touch()
    done = subprocess.run(["cmake", "-S", str(source), "-B", str(build), "-DRMSNORM_GPU=ON",
                           f"-DRMSNORM_PYTHON={sys.executable}", *defines],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stdout
    return done.stdout


def artifacts(build):
    """{target: its files, relative to the build folder} from the file API's reply."""
    reply = build / ".cmake" / "api" / "v1" / "reply"
    index = json.loads(max(reply.glob("index-*.json")).read_text())
    model = index["reply"]["codemodel-v2"]["jsonFile"]
    targets = json.loads((reply / model).read_text())["configurations"][0]["targets"]
    out = {}
    for target in targets:
        facts = json.loads((reply / target["jsonFile"]).read_text())
        out[target["name"]] = [a["path"] for a in facts.get("artifacts", [])]
    return out


def doc_text(*names):
    return {name: (ROOT / name).read_text() for name in names}


@needs_cuda
@pytest.mark.parametrize("which", sorted(GPU))
def test_the_cpp_benchmark_is_built_where_the_docs_and_scripts_say(tmp_path, which):
    gpu_configure(*GPU[which][:1], tmp_path, *GPU[which][1:], "-DRMSNORM_CUDA_ARCHS=90")
    assert artifacts(tmp_path)["rmsnorm-cpp-bench"] == ["bench/rmsnorm-cpp-bench"]
    # Every build folder the docs name is build/cpp (scripts/test_cpp.sh's, and CPP.md's).
    for name, text in doc_text("README.md", "docs/CPP.md", "scripts/gpu_check.sh").items():
        paths = set(re.findall(r"build/cpp/[\w/-]*bench/", text))
        assert paths == {"build/cpp/bench/"}, f"{name}: {paths}"


@needs_cuda
def test_with_no_gpu_visible_the_plain_configure_builds_what_cpp_md_says(tmp_path):
    # No GPU visible: nvidia-smi answers nothing (a program that fails stands for it) and torch
    # sees no device.
    output = gpu_configure(ROOT / "cpp", tmp_path, "-D_rmsnorm_nvidia_smi=/bin/false",
                           env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    archs = cache_value(tmp_path, "RMSNORM_CUDA_ARCHS")
    assert "no GPU visible" in output and archs == "80;89;90;100", output
    cpp_md = (ROOT / "docs" / "CPP.md").read_text()
    block = re.search(r"```bash\n(.*?)```", cpp_md, re.S).group(1).splitlines()
    first = next(i for i, line in enumerate(block) if line.startswith("cmake -S cpp "))
    # Its comment: on its line, and on the comment-only lines right below it.
    comment = [block[first].split("#", 1)[1]] if "#" in block[first] else []
    comment += [line.strip()[1:] for line in
                itertools.takewhile(lambda line: line.strip().startswith("#"), block[first + 1:])]
    said = " ".join(part.strip() for part in comment)
    assert "no GPU visible" in said and archs in said, said


def test_cpp_md_says_what_needs_the_cuda_toolkit_as_the_cmake_files_do():
    needs = (ROOT / "docs" / "CPP.md").read_text().split("What the build needs:")[1]
    toolkit = next(item for item in needs.split("\n- ") if "The CUDA toolkit" in item)
    for folder in ("examples/cpp", "cpp/bench"):
        cmake_file = (ROOT / folder / "CMakeLists.txt").read_text()
        assert "find_package(CUDAToolkit REQUIRED)" in cmake_file, folder
    assert "examples/cpp" in toolkit and "rmsnorm-cpp-bench" in toolkit, toolkit


@needs_cuda
@pytest.mark.skipif(shutil.which("ninja") is None, reason="no ninja")
def test_the_aot_step_runs_in_ninjas_console_pool_so_its_progress_streams(tmp_path):
    # Ninja holds a command's output until the command ends (half an hour for the first AOT
    # compile on two cores), except in its console pool.
    gpu_configure(ROOT / "cpp", tmp_path, "-G", "Ninja", "-DRMSNORM_CUDA_ARCHS=90")
    edges = (tmp_path / "build.ninja").read_text().split("\n\n")
    aot = [edge for edge in edges if re.search(r"^build \S*aot\.stamp", edge, re.M)]
    assert len(aot) == 1, aot
    assert re.search(r"^\s+pool = console$", aot[0], re.M), aot[0]
