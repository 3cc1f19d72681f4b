#!/usr/bin/env bash
# rmsnorm as a user installs it: a fresh venv outside the checkout, torch 2.13.0 (the CPU build,
# which pip takes from local disk here), triton ($RMSNORM_TRITON, default requirements/ci.txt's
# pin) and scikit-build-core, then `pip install --no-build-isolation` of a copy of the
# checkout (not editable; numpy floats to the newest release), which must keep that triton
# (resolve next to it, not replace it): CMake builds librmsnorm and the torch ops against that
# torch. From
# outside the checkout it imports the installed package, checks that the op library loaded from
# the venv, runs each console script with --help, runs rmsnorm-demo (no GPU in that venv:
# Triton's interpreter), rmsnorm-compare on a planted recipe and the looped kernels against
# float64. Then it installs the same copy editable (pip install -e) over it and checks that
# rmsnorm and its op library load from the copy.
# Quiet when it works (one line); the log and a FAILED line when it does not (exit 1).
# Skipped, exit 0, with a message, where pip cannot install those (no network: the GPU
# machine) or RMSNORM_SKIP_INSTALL_CHECK=1. Called by scripts/test.sh; pip's cache is reused.
# RMSNORM_INSTALL_KEEP=DIR (a folder that does not exist) keeps the venv (DIR/venv) and the
# editable copy (DIR/src) for scripts/triton_check.sh to test in.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCRIPTS=(rmsnorm-bench rmsnorm-demo rmsnorm-sweep rmsnorm-compare)
TRITON=${RMSNORM_TRITON:-$(sed -n 's/^triton==//p' "$ROOT/requirements/ci.txt")}
t0=$SECONDS

say() { echo "rmsnorm: install check: $*" >&2; }
if [ "${RMSNORM_SKIP_INSTALL_CHECK:-0}" = 1 ]; then
    say "SKIPPED (RMSNORM_SKIP_INSTALL_CHECK=1)"
    exit 0
fi
if [ -n "${RMSNORM_INSTALL_KEEP:-}" ]; then
    work=$RMSNORM_INSTALL_KEEP
    mkdir "$work"
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/rmsnorm-install.XXXXXX")
    # Deleting a venv with torch takes tens of seconds on a slow disk: done in the background.
    trap 'rm -rf "$work" </dev/null >/dev/null 2>&1 &' EXIT
fi
venv=$work/venv log=$work/log src=$work/src
skip() { say "SKIPPED: $*"; grep -m 1 "^ERROR" "$log" >&2 || true; exit 0; }
fail() { cat "$log" >&2; say "FAILED: $*"; exit 1; }
pip() { "$venv/bin/python" -m pip --disable-pip-version-check "$@"; }

python3 -m venv "$venv" >"$log" 2>&1 || skip "python3 cannot make a venv (no python3-venv?)"
# Whether pip can install here at all: a dry run fails within seconds without a network.
timeout 60 "$venv/bin/python" -m pip --disable-pip-version-check install --dry-run --quiet \
    --ignore-installed --timeout 10 --retries 0 --report "$work/plan.json" torch==2.13.0 \
    "triton==$TRITON" numpy "scikit-build-core>=0.10" >>"$log" 2>&1 ||
    skip "pip cannot install torch 2.13.0, triton $TRITON, numpy and scikit-build-core here (no network?)"
# torch must be a CPU build or come from local disk: never a CUDA build of several GB.
cpu_torch='import json, sys
torch = [i for i in json.load(open(sys.argv[1]))["install"] if i["metadata"]["name"] == "torch"]
sys.exit(0 if torch and ("+cpu" in torch[0]["metadata"]["version"]
                         or torch[0]["download_info"]["url"].startswith("file:")) else 1)'
"$venv/bin/python" -c "$cpu_torch" "$work/plan.json" 2>>"$log" ||
    skip "torch 2.13.0 would be a CUDA build from the network here (no CPU build on local disk)"

bash "$ROOT/scripts/copy_checkout.sh" "$src" 2>>"$log" || fail "copying the checkout"
# --no-compile: byte-compiling all of torch takes longer than anything the check runs.
pip install --quiet --no-compile torch==2.13.0 "triton==$TRITON" "scikit-build-core>=0.10" \
    >>"$log" 2>&1 || fail "pip install torch==2.13.0 triton==$TRITON scikit-build-core"
pip install --quiet --no-compile --no-build-isolation "$src" >>"$log" 2>&1 ||
    fail "pip install --no-build-isolation of the checkout"

# From outside the checkout, with nothing of it on the path.
cd "$work"
run() { env -u PYTHONPATH -u TRITON_INTERPRET PATH="$venv/bin:$PATH" "$@"; }
versions=$(run python - "$venv" "$TRITON" <<'EOF' 2>>"$log"
import os, sys, warnings
import numpy, torch, triton
if triton.__version__ != sys.argv[2]:
    sys.exit(f"installing rmsnorm replaced triton {sys.argv[2]} with {triton.__version__}")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import rmsnorm
untested = [w for w in caught if issubclass(w.category, rmsnorm.UntestedTritonWarning)]
if untested:  # the Triton pip chose is in the declared range, so tested: no warning
    sys.exit(str(untested[0].message))
where = os.path.realpath(rmsnorm.__file__)
if not where.startswith(os.path.realpath(sys.argv[1]) + os.sep):
    sys.exit(f"rmsnorm imported from {where}, not from the venv")
ops = rmsnorm.status()["ops"]
if not ops.startswith("loaded: " + os.path.realpath(sys.argv[1]) + os.sep):
    sys.exit(f"the op library is not the venv's: {ops}")
x = torch.randn(3, 64)
y = rmsnorm.rms_norm(x, torch.ones(64))
assert torch.equal(y, rmsnorm.reference.contract_rms_norm(x, torch.ones(64))[0])
print(f"rmsnorm {rmsnorm.__version__}, numpy {numpy.__version__}, triton {triton.__version__},"
      f" torch {torch.__version__}")
EOF
) || fail "import rmsnorm from the venv"
for script in "${SCRIPTS[@]}"; do
    [ "$(PATH="$venv/bin:$PATH" command -v "$script")" = "$venv/bin/$script" ] ||
        fail "$script is not on PATH"
    run "$script" --help >"$work/help" 2>>"$log" || fail "$script --help exited $?"
    grep -q "^usage: $script" "$work/help" || { cat "$work/help" >>"$log"; fail "$script --help"; }
done
run rmsnorm-demo >>"$log" 2>&1 || fail "rmsnorm-demo exited $?"
grep -q "^correctness: OK" "$log" || fail "rmsnorm-demo did not report correctness: OK"
# rmsnorm-compare in a venv without matplotlib and transformers (it needs them for --plot and
# the model mode only): a planted recipe, named.
run rmsnorm-compare --recipe hf_gemma --shapes 8x32 >>"$log" 2>&1 ||
    fail "rmsnorm-compare exited $?"
grep -q "^Bit-identical to HF Gemma" "$log" || fail "rmsnorm-compare did not name HF Gemma"
# The looped path (a loop over the row, its bound a kernel argument), forward and backward.
run env TRITON_INTERPRET=1 python - >>"$log" 2>&1 <<'EOF' || fail "looped kernels vs float64"
import torch
import rmsnorm
from rmsnorm import reference
from rmsnorm.launch import configs, ops

assert ops.INTERPRETED
g = torch.Generator().manual_seed(0)
x = torch.randn(5, 300, generator=g)
w = torch.randn(300, generator=g) * 0.5 + 1
dy = torch.randn(5, 300, generator=g)
# Explicit looped launches of 64-column tiles: rows of 300 take five of them.
loop = configs.Launch("loop", 64, 1, 2, 1, 4, False, False)
y, _, rstd = ops.forward(x, w, 1e-6, return_rstd=True, launch=loop)
got = (y, *ops.backward(dy, x, w, rstd, launch=loop))
x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
y64 = reference.float64_rms_norm(x64, w64)
want = (y64, *torch.autograd.grad(y64, (x64, w64), dy.double()))
for name, a, b in zip(("y", "dx", "dw"), got, want):
    err = ((a.double() - b).norm() / b.norm()).item()
    assert err < 1e-5, f"{name}: relative error {err:.3g} against float64"
print("looped kernels: y, dx, dw within 1e-5 of float64")
EOF
# DEVELOPING.md's editable install, over the same venv (sparing a second torch): it imports
# the copy's rmsnorm, so the op library must be the one its build put in the copy.
pip install --quiet --no-compile --no-build-isolation -e "$src" >>"$log" 2>&1 ||
    fail "pip install --no-build-isolation -e of the checkout"
run python - "$src" >>"$log" 2>&1 <<'EOF' || fail "import rmsnorm from the editable install"
import os, sys
import torch
import rmsnorm
package = os.path.join(os.path.realpath(sys.argv[1]), "rmsnorm")
where = os.path.realpath(rmsnorm.__file__)
if where != os.path.join(package, "__init__.py"):
    sys.exit(f"the editable install imported {where}, not the checkout's rmsnorm")
ops = rmsnorm.status()["ops"]
if ops != "loaded: " + os.path.join(package, "_native", "librmsnorm_torch.so"):
    sys.exit(f"the editable install's op library is not the checkout's: {ops}")
x, w = torch.randn(3, 64), torch.ones(64)
assert torch.equal(rmsnorm.rms_norm(x, w), rmsnorm.reference.contract_rms_norm(x, w)[0])
print("editable install: rmsnorm and its op library from the checkout")
EOF
run rmsnorm-demo --help >/dev/null 2>>"$log" || fail "rmsnorm-demo --help (editable) exited $?"
say "OK in $((SECONDS - t0)) s: a fresh venv with $versions, the op library built and" \
    "loaded from it; ${SCRIPTS[*]} --help;" \
    "rmsnorm-demo and the looped kernels on the CPU (Triton's interpreter);" \
    "rmsnorm-compare on a planted recipe; then an editable install, its op library the" \
    "checkout's"
