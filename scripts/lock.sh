#!/usr/bin/env bash
# Refresh requirements.lock: every package of the full environment (runtime, dev, cpu and hf extras) at an exact
# version, resolved by uv for CPython 3.11 on x86-64 Linux from pyproject.toml's ranges. Commit the result.
#   scripts/lock.sh            # re-resolve, keeping today's pins where the ranges still allow them
#   scripts/lock.sh --upgrade  # move every package to its newest allowed release
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q uv==0.13.9
python -m uv pip compile -q pyproject.toml --extra dev --extra cpu --extra hf \
  --python-version 3.11 --python-platform x86_64-unknown-linux-gnu \
  --custom-compile-command scripts/lock.sh -o requirements.lock "$@"
