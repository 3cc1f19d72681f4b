"""Nothing in the repository points at files outside it: the numerical contract the code and
docs cite is docs/DESIGN.md, in the repository, and relative links in the docs resolve."""

import os
import re
import subprocess

from helpers import ROOT

SKIP_DIRS = {".git", ".venv", "build", "out", ".cache", "__pycache__", ".pytest_cache", "results"}
OUTSIDE = re.compile(r"\.\./" + "shared/|" + "shared/" + "docs/")


def _paths():
    """The repository's files: in a git checkout what git tracks or would add (a developer's
    ignored scratch folder is not the repository); elsewhere (a copy without .git) every file
    outside the build and cache folders."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], cwd=ROOT, capture_output=True,
                                check=True).stdout
        if os.path.exists(os.path.join(ROOT, ".git")):  # a worktree's .git is a file
            yield from (p for p in listed.decode().split("\0") if p)
            return
    except (OSError, subprocess.CalledProcessError):
        pass
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in files:
            yield os.path.relpath(os.path.join(top, name), ROOT)


def _text_files():
    for path in _paths():
        try:
            with open(os.path.join(ROOT, path), encoding="utf-8") as f:
                yield path, f.read()
        except (UnicodeDecodeError, OSError):
            continue


def test_no_reference_outside_the_repository():
    bad = [f"{path}:{text.count(chr(10), 0, m.start()) + 1}"
           for path, text in _text_files() for m in OUTSIDE.finditer(text)]
    assert not bad, f"references outside the repository: {bad}"


def test_the_contract_is_in_the_repository_and_doc_links_resolve():
    assert os.path.isfile(os.path.join(ROOT, "docs", "DESIGN.md"))
    broken = []
    for path, text in _text_files():
        if not path.endswith(".md"):
            continue
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            if not os.path.exists(os.path.join(ROOT, os.path.dirname(path), target)):
                broken.append(f"{path} -> {target}")
    assert not broken, f"broken links: {broken}"
