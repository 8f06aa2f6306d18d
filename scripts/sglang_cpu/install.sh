#!/usr/bin/env bash
# Install SGLang 0.5.23 into its own venv, to SERVE a model on an x86-64 CPU (AVX2 is enough) through abh's
# sglang engine (configs/experiment/cpu_sglang_smollm2.yaml) and to parse an arm's flags for the preflight
# (harness/engines/preflight.py): one venv for both.
#
#   scripts/sglang_cpu/install.sh [VENV_DIR]     # default: $ABH_SGLANG_VENV, else ~/.cache/abh/venvs/sglang
#
# - creates VENV_DIR (Python 3.11; PYTHON=/path/to/python3.11 to choose), separate from the project's venv and
#   from the vLLM one (sglang pins its own torch, transformers, ...);
# - installs requirements.lock with --no-deps: sglang==0.5.23, torch 2.13.0+cpu and the non-CUDA part of
#   SGLang's requirements, exactly pinned; the full dependency set (CUDA torch, flashinfer, sglang-kernel, ...)
#   is neither needed nor installable here;
# - copies the stand-ins of standins/ into the venv's site-packages: `sgl_kernel` (PyPI's sglang-kernel holds
#   CUDA objects only; SGLang's CPU kernels need AVX-512/AMX, and without them it takes its torch-native paths)
#   and `torchvision` (PyPI's wheel does not load against torch 2.13.0+cpu; a text model never uses it). Every
#   name in them raises StandInUsed, naming itself, when SGLang calls it (standins/abh_standin.py);
# - checks that `import sglang.srt.server_args` works, that the stand-ins are the ones imported, and prints the
#   version.
# Idempotent: a stamp (sha256 of the lock, this script and the stand-ins) makes a second run a no-op. A venv made
# by an older version of this script (the parser alone) is upgraded in place.
# torch==2.13.0+cpu is not on PyPI: pip takes it from /opt/wheels on this machine (find-links); elsewhere set
# PIP_FIND_LINKS or PIP_EXTRA_INDEX_URL to a +cpu torch source.
# Serve by hand: SGLANG_USE_CPU_ENGINE=1 VENV/bin/python -m sglang.launch_server --model-path DIR --device cpu \
#   --attention-backend torch_native --max-total-tokens 8192 --mem-fraction-static 0.05
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
STANDINS=$HERE/standins
STAMP=$VENV/.abh-sglang.stamp
WANT=$( (cat "$LOCK" "$HERE/install.sh"; find "$STANDINS" -name "*.py" | LC_ALL=C sort | xargs cat) \
    | sha256sum | cut -d' ' -f1)
VPY=$VENV/bin/python
check() {
    "$VPY" - 2>/dev/null <<'PY'
import importlib.metadata as md
import sglang.srt.server_args as sa
import abh_standin, sgl_kernel, torchvision
for m in (sgl_kernel, torchvision):
    assert isinstance(m.any_name, abh_standin.Missing), f"{m.__file__} is not abh's stand-in"
print(f"sglang {md.version('sglang')}: {sa.__file__} imports; stand-ins {sgl_kernel.__file__}, {torchvision.__file__}")
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
set +e
"$VPY" -m pip install --disable-pip-version-check --no-input --progress-bar off --no-deps --only-binary :all: \
    -r "$LOCK" 2>&1 | grep -v "is ignored: it is neither a file nor a directory"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" != 0 ]; then echo "install.sh: pip install -r $LOCK failed (exit $rc)" >&2; exit 1; fi
"$VPY" -m pip check >/dev/null 2>&1 || true  # --no-deps by design: a CPU serves with a subset of sglang's deps
SITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "install.sh: stand-ins sgl_kernel, torchvision -> $SITE"
rm -rf "$SITE/sgl_kernel" "$SITE/torchvision" "$SITE/abh_standin.py"
cp -r "$STANDINS/abh_standin.py" "$STANDINS/sgl_kernel" "$STANDINS/torchvision" "$SITE/"
if ! check; then
    echo "install.sh: import sglang.srt.server_args or a stand-in fails in $VENV:" >&2
    "$VPY" -c 'import sglang.srt.server_args, sgl_kernel, torchvision' >&2 || true
    exit 1
fi
echo "$WANT" > "$STAMP"
echo "install.sh: done in $(( $(date +%s) - t0 )) s; venv size $(du -sh "$VENV" | cut -f1)"
