#!/usr/bin/env bash
# Install SGLang's flag parser (sglang.srt.server_args of the PyPI wheel) into its own venv, for the preflight
# (harness/engines/preflight.py) on a CPU machine: the real parser, not a server.
#
#   scripts/sglang_cpu/install.sh [VENV_DIR]     # default: $ABH_SGLANG_VENV, else ~/.cache/abh/venvs/sglang
#
# - creates VENV_DIR (Python 3.11; PYTHON=/path/to/python3.11 to choose), separate from the project's venv and
#   from the vLLM one (sglang pins its own torch, transformers, ...);
# - installs requirements.lock with --no-deps: sglang==0.5.23 plus exactly the packages its parser's imports
#   need on a CPU (torch+cpu, triton, numpy, pillow, starlette, msgspec, pydantic, pyzmq, ipython, aiohttp, ...);
#   the full dependency set (CUDA torch, flashinfer, xgrammar, ...) is neither needed nor installable here;
# - checks that `import sglang.srt.server_args` works and prints the version.
# Idempotent: a stamp (sha256 of the lock and this script) makes a second run a no-op.
# torch==2.13.0+cpu is not on PyPI; pip takes it from /opt/wheels on this machine (find-links); elsewhere set
# PIP_FIND_LINKS or PIP_EXTRA_INDEX_URL to a +cpu torch source.
set -euo pipefail
if [ $# -gt 1 ]; then
    echo "usage: $0 [VENV_DIR]  (default: \$ABH_SGLANG_VENV, else ~/.cache/abh/venvs/sglang)" >&2
    exit 2
fi
VENV=${1:-${ABH_SGLANG_VENV:-$HOME/.cache/abh/venvs/sglang}}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOCK=$HERE/requirements.lock
if [ -z "${PYTHON:-}" ]; then
    if command -v python3.11 >/dev/null 2>&1; then PYTHON=python3.11
    else echo "install.sh: no python3.11 found; set PYTHON" >&2; exit 2
    fi
fi
STAMP=$VENV/.abh-sglang-parser.stamp
WANT=$(cat "$LOCK" "$HERE/install.sh" | sha256sum | cut -d' ' -f1)
VPY=$VENV/bin/python
check() {
    "$VPY" - 2>/dev/null <<'PY'
import importlib.metadata as md
import sglang.srt.server_args as sa
print(f"sglang {md.version('sglang')}: {sa.__file__} imports")
PY
}
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$VPY" ] && check; then
    echo "install.sh: $VENV is up to date (nothing to do)"
    exit 0
fi
t0=$(date +%s)
mkdir -p "$(dirname "$VENV")"
if [ ! -x "$VPY" ]; then
    echo "install.sh: creating venv $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV"
fi
rm -f "$STAMP"
echo "install.sh: installing $LOCK (--no-deps)"
"$VPY" -m pip install --disable-pip-version-check --no-input --progress-bar off --no-deps --only-binary :all: \
    -r "$LOCK" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
"$VPY" -m pip check >/dev/null 2>&1 || true  # --no-deps by design: the parser needs a subset of sglang's deps
if ! check; then
    echo "install.sh: import sglang.srt.server_args fails in $VENV:" >&2
    "$VPY" -c 'import sglang.srt.server_args' >&2 || true
    exit 1
fi
echo "$WANT" > "$STAMP"
echo "install.sh: done in $(( $(date +%s) - t0 )) s; venv size $(du -sh "$VENV" | cut -f1)"
