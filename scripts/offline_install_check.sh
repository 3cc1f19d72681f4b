#!/usr/bin/env bash
# rmsnorm installed as a user of a GPU machine without network installs it: a fresh venv that
# sees the machine's torch and triton (a .pth file), the build backend from wheels
# ($WHEELS: scikit-build-core and pathspec, downloaded elsewhere), then
# `pip install --no-build-isolation --no-index` of a copy of the checkout's files. It times the
# install (the AOT compile of the kernels for the local GPU's arch, with no cache: the
# first-use cost), then, from outside the checkout and with no rmsnorm environment variable,
# checks that CUDA tensors are served by the compiled kernels of the installed op library,
# bit-identical to the Python launcher. Prints one line per step; exit 1 on a failure.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WHEELS=${WHEELS:-$ROOT/.whl}
work=$(mktemp -d "${TMPDIR:-/tmp}/rmsnorm-offline.XXXXXX")
venv=$work/venv src=$work/src log=$work/log
say() { echo "rmsnorm: offline install: $*"; }
fail() { tail -n 40 "$log"; say "FAILED: $*"; exit 1; }
: >"$log"

python3 -m venv "$venv" >>"$log" 2>&1 || fail "python3 -m venv"
# The machine's torch and triton, wherever python3 finds them (a venv of its own, say): its
# site-packages, seen by the new venv through a .pth file, as --system-site-packages would.
python3 -c "import site, torch, triton; print('\n'.join(site.getsitepackages()))" \
    >"$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/machine.pth" ||
    fail "python3 cannot import torch and triton"
pip() { "$venv/bin/python" -m pip --disable-pip-version-check "$@"; }
pip install --quiet --no-index --no-deps "$WHEELS"/*.whl >>"$log" 2>&1 ||
    fail "installing the build backend from $WHEELS"
bash "$ROOT/scripts/copy_checkout.sh" "$src" 2>>"$log" || fail "copying the checkout"
t0=$SECONDS
# -v: the build's own output (the AOT count and archs named below) into the log.
pip install -v --no-index --no-build-isolation --no-compile "$src" >>"$log" 2>&1 ||
    fail "pip install --no-build-isolation --no-index"
say "pip install took $((SECONDS - t0)) s ($(nproc) cores; $(grep -m 1 -o 'kernels for sm_[0-9, sm_]*' "$log" || echo 'archs not logged'))"

cd "$work"
env -u PYTHONPATH -u RMSNORM_KERNELS -u RMSNORM_LIBRARY "$venv/bin/python" - "$venv" <<'PY' 2>>"$log" || fail "the installed package"
import os, sys
import torch
import rmsnorm
from rmsnorm.launch import ops

venv = os.path.realpath(sys.argv[1]) + os.sep
assert os.path.realpath(rmsnorm.__file__).startswith(venv), rmsnorm.__file__
report = rmsnorm.status()
assert report["ops"].startswith("loaded: " + venv), report["ops"]
assert report["compiled_kernels_built"] and report["compiled_kernels_enabled"], report
print("rmsnorm: offline install: status:", report["ops"], report["cuda"])
calls = []
forward = ops.forward
ops.forward = lambda *a, **k: calls.append(1) or forward(*a, **k)
x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
y = rmsnorm.rms_norm(x, w)
assert not calls, "the Python launcher served a call the compiled kernels cover"
assert torch.equal(y, forward(x, w)[0]), "compiled and launcher results differ"
print("rmsnorm: offline install: CUDA tensors served by the compiled kernels, bit-identical "
      "to the Python launcher")
PY
say "OK"
