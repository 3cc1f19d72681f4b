#!/usr/bin/env bash
# Copies the checkout's files as git sees them (tracked and new, not ignored: no .venv, no
# build/, no rmsnorm/_native) into the folder $1, which must not exist: what pip installs from.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir "$1"
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
         tar --null -T - --ignore-failed-read -cf -) | tar -xf - -C "$1"
else
    tar -C "$ROOT" --exclude=./.git --exclude=./.venv --exclude=./build --exclude=./.whl \
        --exclude=./rmsnorm/_native -cf - . | tar -xf - -C "$1"
fi
