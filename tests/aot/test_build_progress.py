"""scripts/show_progress.sh, through which scripts/test_cpp.sh and build_native.sh pipe the
build: the whole output to the log, the AOT compile's progress lines to the terminal as they
come (not when the build ends). A fake build: nothing is compiled."""

import os
import select
import subprocess

from helpers import ROOT

SCRIPT = ROOT / "scripts" / "show_progress.sh"


def _filter(tmp_path, build, log=None):
    log = log or tmp_path / "build.log"
    return subprocess.Popen(["bash", "-c", f'{{ {build}; }} 2>&1 | bash "$0" "$1"', SCRIPT,
                             str(log)], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _line(stream, timeout=60):
    ready, _, _ = select.select([stream], [], [], timeout)
    assert ready, f"no line within {timeout} s: the progress is held back"
    return stream.readline()


def test_progress_lines_reach_the_terminal_while_the_build_runs(tmp_path):
    # The fake build waits, after its first progress line, until the test has seen it: were
    # the line held back until the build ended, the test would time out instead.
    build = ('echo "[1/3] Generating aot.stamp"; echo "rmsnorm.aot: 1/2 kernels compiled"; '
             'for i in $(seq 1200); do [ -e go ] && break; sleep 0.05; done; '
             'echo "compiler noise" >&2; '
             'echo "rmsnorm.aot: 2/2 kernels compiled in 9s"; echo "[3/3] Linking"')
    p = _filter(tmp_path, build)
    try:
        assert _line(p.stderr) == "rmsnorm.aot: 1/2 kernels compiled\n"
    finally:
        (tmp_path / "go").touch()  # the fake build ends either way
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0 and out == ""
    assert err == "rmsnorm.aot: 2/2 kernels compiled in 9s\n"  # and nothing else
    assert (tmp_path / "build.log").read_text().splitlines() == [
        "[1/3] Generating aot.stamp", "rmsnorm.aot: 1/2 kernels compiled", "compiler noise",
        "rmsnorm.aot: 2/2 kernels compiled in 9s", "[3/3] Linking"]


def test_a_build_without_progress_lines_is_quiet_and_succeeds(tmp_path):
    p = _filter(tmp_path, 'echo "[1/1] Linking"')
    out, err = p.communicate(timeout=60)
    assert (p.returncode, out, err) == (0, "", "")
    assert (tmp_path / "build.log").read_text() == "[1/1] Linking\n"


def test_a_failing_build_still_fails_through_the_pipe(tmp_path):
    # The scripts run under `set -o pipefail`: the build's status is the pipeline's.
    done = subprocess.run(["bash", "-c", f'set -o pipefail; false | bash "{SCRIPT}" log'],
                          cwd=tmp_path)
    assert done.returncode != 0


def test_a_log_that_cannot_be_written_fails(tmp_path):
    p = _filter(tmp_path, "echo x", log=tmp_path / "no-such-folder" / "build.log")
    p.communicate(timeout=60)
    assert p.returncode != 0


def test_the_build_scripts_pipe_their_build_through_it():
    for name in ("test_cpp.sh", "build_native.sh"):
        text = (ROOT / "scripts" / name).read_text()
        assert 'bash "$ROOT/scripts/show_progress.sh"' in text, name
        assert os.path.basename(SCRIPT) in text
