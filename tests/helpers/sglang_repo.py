"""An SGLang-shaped git repository in a temporary directory, for the seed experiment's tests.

Three commits on one branch, like the history of the seed's fix (sgl-project/sglang #36515):

* ``base``: ``python/sglang/srt/layers/moe/topk.py`` whose ``select_experts`` hands
  ``num_fused_shared_experts`` to the gate; the same file already calls ``has_per_rank_fused_shared_slots(``
  elsewhere (``_post_process_topk_ids``), as SGLang's does, so only a check scoped to ``select_experts`` tells
  the sides apart; ``layers/moe/utils.py`` defines that function; ``entrypoints/http_server.py`` exists.
* ``fix``: only topk.py changes: ``select_experts`` passes 0 shared experts to the gate when
  ``has_per_rank_fused_shared_slots(...)`` holds.
* ``extra``: the fix plus an unrelated edit of ``python/sglang/srt/entrypoints/http_server.py``.

Every module imports with the standard library only (no torch), so source probes import them for real.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

TOPK = "python/sglang/srt/layers/moe/topk.py"
UTILS = "python/sglang/srt/layers/moe/utils.py"
HTTP_SERVER = "python/sglang/srt/entrypoints/http_server.py"
MARKER = "has_per_rank_fused_shared_slots("

_TOPK_HEAD = '''"""select_experts (SGLang-shaped, stdlib only)."""
import os

from sglang.srt.layers.moe.utils import has_per_rank_fused_shared_slots

_use_aiter = os.environ.get("SGLANG_USE_AITER") == "1"


def gate(top_k, num_fused_shared_experts):
    return list(range(top_k - num_fused_shared_experts)) + [384] * num_fused_shared_experts


def _post_process_topk_ids(topk_ids, num_fused_shared_experts):
    if has_per_rank_fused_shared_slots(num_fused_shared_experts):
        return topk_ids + [392]
    return topk_ids

'''
TOPK_BASE = _TOPK_HEAD + '''
def select_experts(top_k, num_fused_shared_experts):
    num_routed_topk = top_k - num_fused_shared_experts
    topk_ids = gate(num_routed_topk if _use_aiter else top_k, num_fused_shared_experts)
    return _post_process_topk_ids(topk_ids, num_fused_shared_experts)
'''
TOPK_FIX = _TOPK_HEAD + '''
def select_experts(top_k, num_fused_shared_experts):
    num_routed_topk = top_k - num_fused_shared_experts
    # The per-rank shared-slot append is the single producer of the shared slot: the gate gets 0.
    gate_shared = 0 if has_per_rank_fused_shared_slots(num_fused_shared_experts) else num_fused_shared_experts
    topk_ids = gate(num_routed_topk if _use_aiter else top_k, gate_shared)
    return _post_process_topk_ids(topk_ids, num_fused_shared_experts)
'''
UTILS_SRC = '''"""MoE utils (SGLang-shaped)."""


def uses_per_rank_fused_shared_slots():
    return True


def has_per_rank_fused_shared_slots(num_fused_shared_experts):
    return num_fused_shared_experts > 0 and uses_per_rank_fused_shared_slots()
'''
HTTP_BASE = '''"""HTTP server (SGLang-shaped)."""

HEALTH_PATHS = ("/health", "/health_generate")
'''
HTTP_EXTRA = HTTP_BASE + '''
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")
'''


@dataclass
class SGLangRepo:
    path: Path
    base: str
    fix: str
    extra: str


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "-c", "commit.gpgsign=false",
                           *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def make_sglang_repo(root: Path) -> SGLangRepo:
    """Build the repository under ``root`` (created) and return it with its three commits."""
    root.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=root)
    _write(root, ".gitignore", "__pycache__/\n*.pyc\n")
    _write(root, "README.md", "sglang (test double)\n")
    _write(root, "python/pyproject.toml", '[project]\nname = "sglang"\nversion = "0.0.0"\n')
    for pkg in ("sglang", "sglang/srt", "sglang/srt/layers", "sglang/srt/layers/moe", "sglang/srt/entrypoints"):
        _write(root, f"python/{pkg}/__init__.py", "")
    _write(root, "python/sglang/version.py", '__version__ = "0.0.0"\n')
    _write(root, TOPK, TOPK_BASE)
    _write(root, UTILS, UTILS_SRC)
    _write(root, HTTP_SERVER, HTTP_BASE)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "base", cwd=root)
    base = git("rev-parse", "HEAD", cwd=root)
    _write(root, TOPK, TOPK_FIX)
    git("commit", "-q", "-am", "fix: do not emit a shared-expert marker twice on the per-rank slot path", cwd=root)
    fix = git("rev-parse", "HEAD", cwd=root)
    _write(root, HTTP_SERVER, HTTP_EXTRA)
    git("commit", "-q", "-am", "an unrelated http_server change", cwd=root)
    extra = git("rev-parse", "HEAD", cwd=root)
    return SGLangRepo(path=root, base=base, fix=fix, extra=extra)
