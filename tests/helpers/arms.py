"""Miniature source trees and arms built on them, as the arm, check and arm-diff tests need."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from harness.arms.arm import ResolvedArm, resolve_arm

MARKER = "has_per_rank_fused_shared_slots("

TOPK_BASE = '''
def has_per_rank_fused_shared_slots(n):
    return n > 0


def select_experts(top_k, num_fused_shared_experts):
    return gate(top_k=top_k, num_fused_shared_experts=num_fused_shared_experts)
'''
TOPK_FIX = '''
def has_per_rank_fused_shared_slots(n):
    return n > 0


def select_experts(top_k, num_fused_shared_experts):
    gate_shared = 0 if has_per_rank_fused_shared_slots(num_fused_shared_experts) else num_fused_shared_experts
    return gate(top_k=top_k, num_fused_shared_experts=gate_shared)
'''


def make_tree(root: Path, topk: str, pkg: str = "abh_fake_sgl", extra_import: str = "") -> Path:
    """A miniature source tree: ROOT/python/PKG/layers/moe/topk.py."""
    moe = root / "python" / pkg / "layers" / "moe"
    moe.mkdir(parents=True)
    for d in (moe.parent.parent, moe.parent, moe):
        (d / "__init__.py").write_text("")
    (moe / "topk.py").write_text(extra_import + topk)
    return root


def source_check(**kw: Any) -> dict[str, Any]:
    return {"kind": "source", "module": "abh_fake_sgl.layers.moe.topk", "object": "select_experts",
            "file_under": "python/abh_fake_sgl", **kw}


def pp_arm(key: str, tree: Path, run_dir: Path, checks: list[dict[str, Any]], **kw: Any) -> ResolvedArm:
    """A ``pythonpath`` arm on ``tree`` (subdir ``python``) with these checks."""
    cfg = {"name": key, "source": {"kind": "pythonpath", "path": str(tree), "subdir": "python"}, "checks": checks,
           **kw}
    return resolve_arm(key, cfg, run_dir, None)


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout
