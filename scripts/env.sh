# Sourced by the quickstart scripts: sets ROOT and PY, the Python that runs rmsnorm.
# A Python that already has torch, triton, numpy and pytest is used as it is (the GPU machine,
# which has no network); otherwise a project venv is built from requirements/ci.txt on first use.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

_rmsnorm_usable() {
    "$1" -c "import numpy, pytest, torch, triton" >/dev/null 2>&1
}

_rmsnorm_venv() {
    local venv="$ROOT/.venv" req="$ROOT/requirements/ci.txt"
    if [ ! -x "$venv/bin/python" ] || ! cmp -s "$req" "$venv/.requirements"; then
        echo "rmsnorm: installing requirements/ci.txt into .venv (first use)" >&2
        python3 -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >&2
        cp "$req" "$venv/.requirements"
    fi
    PY="$venv/bin/python"
}

if [ -n "${RMSNORM_PYTHON:-}" ]; then
    PY=$RMSNORM_PYTHON
elif [ -x "$ROOT/.venv/bin/python" ] && _rmsnorm_usable "$ROOT/.venv/bin/python"; then
    _rmsnorm_venv
elif command -v python3 >/dev/null && _rmsnorm_usable python3; then
    PY=python3
else
    _rmsnorm_venv
fi
