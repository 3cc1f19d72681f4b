#!/usr/bin/env bash
# `... 2>&1 | bash scripts/show_progress.sh LOG`: copies its input, a build's whole output, to
# LOG (what the build scripts print when a step fails), and its progress lines, the AOT
# compile's (`rmsnorm.aot: ...`: a line a few seconds apart), to stderr as they come, so that a
# first build, up to half an hour on two cores, is not silent. Fails only where LOG cannot be
# written.
set -uo pipefail
tee "$1" | { grep --line-buffered '^rmsnorm\.aot: ' >&2 || true; }
