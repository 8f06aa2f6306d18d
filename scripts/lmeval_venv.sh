#!/usr/bin/env bash
# A separate venv holding the real lm-evaluation-harness (PyPI `lm-eval`, with its `api` extra: the OpenAI-compatible
# `local-completions` model, no torch or transformers), for the slow test that runs it against the project's
# simulator (tests/test_lmeval_real.py) and for users who want to try `abh compare --lm-eval` end to end.
#   scripts/lmeval_venv.sh [VENV]     # default: $ABH_LMEVAL_VENV, else /work/venvs/lmeval; prints the venv's python
set -euo pipefail
VENV="${1:-${ABH_LMEVAL_VENV:-/work/venvs/lmeval}}"
LMEVAL_VERSION="${LMEVAL_VERSION:-0.4.13}"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import lm_eval, sys; sys.exit(lm_eval.__version__ != '$LMEVAL_VERSION')" 2>/dev/null; then
  python3 -m venv "$VENV" >&2
  "$VENV/bin/python" -m pip install -q --upgrade pip >&2
  "$VENV/bin/python" -m pip install -q "lm-eval[api]==$LMEVAL_VERSION" >&2
fi
echo "$VENV/bin/python"
