#!/usr/bin/env bash
# A separate venv holding the real lm-evaluation-harness (PyPI `lm-eval` 0.4.13 with its `api` extra: the
# OpenAI-compatible `local-completions` model, no torch or transformers), installed from scripts/lmeval/requirements.lock
# (every package pinned), for the slow test that runs it against the project's simulator (tests/test_lmeval_real.py)
# and for users who want to try `abh compare --lm-eval` end to end.
#   scripts/lmeval_venv.sh [VENV]   # default: $ABH_LMEVAL_VENV, else ~/.cache/abh/venvs/lmeval; prints the venv's python
# Idempotent: a stamp (sha256 of the lock) makes a second run a no-op. Progress goes to stderr.
set -euo pipefail
VENV="${1:-${ABH_LMEVAL_VENV:-$HOME/.cache/abh/venvs/lmeval}}"
LOCK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lmeval/requirements.lock"
STAMP="$VENV/.abh-lmeval.stamp"
WANT=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ] || ! "$VENV/bin/python" -c "import lm_eval" 2>/dev/null; then
  mkdir -p "$(dirname "$VENV")"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-input -r "$LOCK" >&2
  "$VENV/bin/python" -c "import lm_eval" >&2
  echo "$WANT" > "$STAMP"
fi
echo "$VENV/bin/python"
