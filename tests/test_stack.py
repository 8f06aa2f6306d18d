"""Provenance a reviewer needs: the stack in the arm's own interpreter (a fake torch / aiter / ROCm on its
paths), the container, the model's revision, and the arms' /server_info diffed like the launch."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from harness.arms import stack, stack_probe
from harness.arms.arm import ResolvedArm
from harness.checks.armdiff import arm_diff, describe_launch, disallowed, server_info_diff
from harness.config import SGLangEngineConfig, SimulatedEngineConfig
from harness.engines import create_engine


def fake_site(root: Path, torch_version: str, hip: str | None = "7.0.51831", aiter: str = "0.1.5") -> Path:
    """A site dir with torch's version.py (no importable torch) and an aiter distribution."""
    torch = root / "torch"
    torch.mkdir(parents=True)
    (torch / "__init__.py").write_text("raise ImportError('importing torch is not allowed in the probe')\n")
    (torch / "version.py").write_text(f"__version__ = {torch_version!r}\ncuda = None\nhip = {hip!r}\n"
                                      "git_version = 'abc123'\n")
    dist = root / f"amd_aiter-{aiter}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: amd-aiter\nVersion: {aiter}\n")
    (root / "aiter").mkdir()
    (root / "aiter" / "__init__.py").write_text("")
    return root


def arm_on(key: str, site: Path, **kw) -> ResolvedArm:
    return ResolvedArm(key=key, name=key, pythonpath=[str(site)], **kw)


def test_stack_probe_is_stdlib_only():
    tree = ast.parse(Path(stack_probe.__file__).read_text())
    mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert mods - {"__future__"} <= set(sys.stdlib_module_names), mods


def test_arm_stack_in_the_arms_interpreter_and_env(tmp_path):
    site = fake_site(tmp_path / "site", "2.9.0+rocm7.0")
    rocm = tmp_path / "rocm"
    (rocm / ".info").mkdir(parents=True)
    (rocm / ".info" / "version").write_text("7.0.1-42\n")
    s = stack.arm_stack(arm_on("a", site), {"ROCM_PATH": str(rocm)})
    assert s["python"] == sys.executable
    assert s["torch_build"] == {"__version__": "2.9.0+rocm7.0", "cuda": None, "hip": "7.0.51831",
                                "git_version": "abc123"}
    assert s["distributions"]["amd-aiter"] == "0.1.5"
    assert s["modules"]["torch"] == str(site / "torch" / "__init__.py")
    assert s["modules"]["aiter"] == str(site / "aiter" / "__init__.py")
    assert s["toolkits"]["rocm"] == "7.0.1-42" and s["toolkits"]["rocm_path"] == str(rocm)
    assert stack.arm_stack(ResolvedArm(key="x", name="x", python=str(tmp_path / "nope")))["error"].startswith(
        "the arm's interpreter")


def test_container_and_its_image(tmp_path):
    assert stack.container({}, tmp_path)["in_container"] is False
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".containerenv").write_text('engine="podman-4.9"\nname="abh"\n'
                                                     'image="docker.io/rocm/sgl-dev:v0.5"\nimageid="sha256:ab12"\n')
    c = stack.container({}, tmp_path)
    assert c == {"in_container": True, "runtime": "podman", "image": "docker.io/rocm/sgl-dev:v0.5",
                 "digest": "sha256:ab12"}
    docker = tmp_path / "d"
    docker.mkdir()
    (docker / ".dockerenv").write_text("")
    c = stack.container({}, docker)
    assert c["runtime"] == "docker" and c["digest"] is None and "ABH_IMAGE_DIGEST" in c["note"]
    c = stack.container({"ABH_IMAGE_DIGEST": "sha256:cd34", "ABH_IMAGE": "rocm/sgl:x"}, docker)
    assert c["digest"] == "sha256:cd34" and c["image"] == "rocm/sgl:x" and "note" not in c


def test_model_revision_from_the_hf_cache_or_a_local_path(tmp_path):
    cache = tmp_path / "hub"
    repo = cache / "models--deepseek-ai--DeepSeek-V4-Pro"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123456789abcdef0123456789abcdef01234567\n")
    r = stack.model_revision("deepseek-ai/DeepSeek-V4-Pro", {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"})
    assert r["revision"] == "0123456789abcdef0123456789abcdef01234567" and r["hf_hub_offline"] is True
    assert r["local"] is False
    missing = stack.model_revision("org/other", {"HF_HOME": str(tmp_path)})
    assert missing["revision"] is None and "downloads it at launch" in missing["note"]
    assert missing["cache_dir"] == str(tmp_path / "hub" / "models--org--other")
    snap = repo / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    local = stack.model_revision(str(snap), {})
    assert local["local"] is True and local["revision"] == snap.name and len(local["config_sha256"]) == 64
    pinned = stack.model_revision("deepseek-ai/DeepSeek-V4-Pro", {"HF_HUB_CACHE": str(cache)}, requested=snap.name)
    assert pinned["revision"] == snap.name and pinned["requested_revision"] == snap.name


def test_a_stack_difference_between_arms_is_a_difference_of_arms(tmp_path):
    cfg = SGLangEngineConfig(model_path="m")
    a = arm_on("a", fake_site(tmp_path / "a", "2.9.0+rocm7.0"))
    b = arm_on("b", fake_site(tmp_path / "b", "2.10.0+rocm7.1"))
    descs = {arm.key: describe_launch(arm, create_engine(cfg, arm, tmp_path, arm.key)) for arm in (a, b)}
    keys = [d["key"] for d in arm_diff(descs)]
    assert "stack.interpreter.torch_build.__version__" in keys
    assert {d["key"] for d in disallowed(arm_diff(descs), ["env"])} >= {"stack.interpreter.torch_build.__version__"}
    # the same stack on both arms: nothing in the stack section differs (paths are normalised per arm)
    same = {k: describe_launch(arm_on(k, tmp_path / "a"), create_engine(cfg, arm_on(k, tmp_path / "a"), tmp_path, k))
            for k in ("a", "b")}
    assert not [d for d in arm_diff(same) if d["key"].startswith("stack")]
    assert same["a"]["stack"]["model"]["model_path"] == "m"
    # engines without a GPU stack record none
    sim = describe_launch(a, create_engine(SimulatedEngineConfig(), a, tmp_path, "s"))
    assert sim["stack"] is None


def test_server_info_diff_shows_what_the_servers_resolved_differently():
    a = {"max_total_num_tokens": 1_000_000, "port": 30000, "server_args": {"port": 30000, "tp_size": 8,
                                                                          "nccl_port": 111}, "version": "0.5"}
    b = {"max_total_num_tokens": 999_744, "port": 31000, "server_args": {"port": 31000, "tp_size": 8,
                                                                        "nccl_port": 222}, "version": "0.5",
         "extra": True}
    d = server_info_diff({"a": a, "b": b})
    assert d == [{"key": "extra", "values": {"a": "<absent>", "b": True}},
                 {"key": "max_total_num_tokens", "values": {"a": 1_000_000, "b": 999_744}}]
    assert server_info_diff({"a": a, "b": None})[0]["values"]["b"] == "<absent>"
    assert server_info_diff({"a": a, "b": dict(a)}) == []
