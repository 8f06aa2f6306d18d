"""The seed's live side checks against a CPU stand-in of an SGLang server (tests/helpers/fake_sglang_server.py):
the regime read from the serving processes (``process_env``, ``log_line``), the side read from the gate's own
picks (``routed_experts``, buggy and fixed builds), the deprecated endpoint names, the ports SGLang derives
from ``--port`` and the ready-timeout advice."""

from __future__ import annotations

import base64
import random
import socket
import struct
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import harness.engines.base as engine_base
from harness.arms.arm import ResolvedArm, find_arm_file
from harness.checks.live import load_callable, run_live_checks
from harness.checks.result import SideAssertionError, assert_checks
from harness.checks.routed import decode_routed_experts, judge
from harness.config import CheckConfig, SGLangEngineConfig
from harness.engines import EngineError, PortInUseError, create_engine
from harness.engines.sglang import COLD_START_HINT, derived_ports

HELPERS = Path(__file__).resolve().parent / "helpers"
ROOT = Path(__file__).resolve().parents[1]

#: The seed arms' live checks, as configured (arms/dsv4_pro_mi355x/*.yaml), with the scheduler count of the
#: stand-in (2) instead of 8 GPUs.
SEED_ARMS = {side: OmegaConf.load(ROOT / "arms" / "dsv4_pro_mi355x" / f"{side}.yaml") for side in ("baseline", "fix")}


def seed_live_checks(side: str, schedulers: int = 2) -> list[CheckConfig]:
    out = []
    for c in SEED_ARMS[side].checks:
        if c.kind in ("source", "fingerprint"):
            continue
        c = CheckConfig(**OmegaConf.to_container(c))
        if c.kind == "process_env":
            c.min_count = schedulers
        out.append(c)
    return out


def fake_engine(tmp_path: Path, checks: list[CheckConfig], label: str, **env: str):
    arm = ResolvedArm(key=label, name=label, pythonpath=[str(HELPERS)], checks=checks,
                      arms_root=str(ROOT))
    cfg = SGLangEngineConfig(module="fake_sglang_server", fingerprint=False, ready_timeout_s=30, poll_interval_s=0.1,
                             stop_timeout_s=10, release_timeout_s=5, env={"SGLANG_USE_AITER": "1", **env})
    return arm, create_engine(cfg, arm, tmp_path, label)


def run_checks(tmp_path: Path, checks: list[CheckConfig], label: str, **env: str):
    arm, e = fake_engine(tmp_path, checks, label, **env)
    with e:
        e.launch()
        e.wait_ready()
        return {r.kind if r.kind != "custom" else "custom": r for r in run_live_checks(arm, e)}


# ------------------------------------------------------------------------------- both builds, both sides
@pytest.mark.parametrize("build", ["buggy", "fixed"])
def test_seed_checks_pass_on_their_own_side_and_fail_on_the_other(tmp_path, build):
    own, other = ("baseline", "fix") if build == "buggy" else ("fix", "baseline")
    res = run_checks(tmp_path, seed_live_checks(own), f"own-{build}", FAKE_BUILD=build, FAKE_FUSION="1")
    assert set(res) == {"process_env", "log_line", "custom", "routed_experts"}
    assert all(r.passed for r in res.values()), [r.line() for r in res.values() if not r.passed]
    pe = res["process_env"]
    assert pe.evidence["processes"] and all(p["value"] == "1" for p in pe.evidence["processes"])
    assert len(pe.evidence["processes"]) == 2 and all("sglang::scheduler_TP" in p["cmdline"]
                                                      for p in pe.evidence["processes"])
    assert res["log_line"].evidence["lines"][0].endswith("Shared experts fusion optimization enabled.")
    rx = res["routed_experts"]
    # 8 tokens x 3 layers; layer 0 is left zero (not routed by the gate) and skipped
    assert rx.evidence["rows"] == 24 and rx.evidence["routed_rows"] == 16 and rx.evidence["skipped_rows"] == 8
    if build == "buggy":
        assert rx.evidence["in_range_per_row"] == {"5": 16} and rx.evidence["out_of_range_ids"] == [384]
    else:
        assert rx.evidence["in_range_per_row"] == {"6": 16} and rx.evidence["out_of_range_ids"] == []

    wrong = run_checks(tmp_path, seed_live_checks(other), f"other-{build}", FAKE_BUILD=build, FAKE_FUSION="1")
    assert wrong["process_env"].passed and wrong["log_line"].passed  # same regime ...
    assert not wrong["routed_experts"].passed  # ... the other side of the fix
    with pytest.raises(SideAssertionError, match="routed_experts"):
        assert_checks(list(wrong.values()), other)


def test_off_the_per_rank_path_the_run_stops(tmp_path):
    # no SGLANG_USE_AITER in the schedulers and no fusion: the fix's path is not live, whatever the args say
    res = run_checks(tmp_path, seed_live_checks("fix"), "off", FAKE_BUILD="fixed", SGLANG_USE_AITER="0")
    assert not res["process_env"].passed and "SGLANG_USE_AITER = 0" in res["process_env"].found
    assert not res["log_line"].passed and res["log_line"].found.startswith("0 line(s)")
    assert res["custom"].passed  # the HTTP process's copy of the args alone would have let it through
    with pytest.raises(SideAssertionError) as ei:
        assert_checks(list(res.values()), "b")
    assert "SGLANG_USE_AITER" in str(ei.value) and "Shared experts fusion" in str(ei.value)


def test_process_env_counts_the_scheduler_processes(tmp_path):
    checks = [CheckConfig(kind="process_env", key="SGLANG_USE_AITER", equals="1", process="sglang::scheduler",
                          min_count=8)]
    res = run_checks(tmp_path, checks, "count", FAKE_SCHEDULERS="3")
    r = res["process_env"]
    assert not r.passed and "3 process(es)" in r.found and "fewer than 8" in r.found
    assert r.expected == "SGLANG_USE_AITER == '1' in each of >= 8 processes matching 'sglang::scheduler'"


def test_routed_experts_as_a_list_and_without_the_flag(tmp_path):
    checks = seed_live_checks("fix")
    res = run_checks(tmp_path, [c for c in checks if c.kind == "routed_experts"], "list", FAKE_BUILD="fixed",
                     FAKE_ROUTED_FORMAT="list")
    assert res["routed_experts"].passed
    res = run_checks(tmp_path, [c for c in checks if c.kind == "routed_experts"], "noflag", FAKE_NO_ROUTED="1")
    assert not res["routed_experts"].passed and "--enable-return-routed-experts" in res["routed_experts"].found


# ------------------------------------------------------------------------------------ routed experts
def _rc(**kw) -> CheckConfig:
    return CheckConfig(kind="routed_experts", num_experts=384, top_k=6, **kw)


def test_decode_routed_experts_base64_and_lists():
    ids = [1, 2, 383, 384, -1, 0]
    b64 = base64.b64encode(struct.pack("<6i", *ids)).decode()
    assert decode_routed_experts(b64) == ids
    assert decode_routed_experts([[[1, 2, 383]], [[384, -1, 0]]]) == ids
    for bad in ("not base64!", base64.b64encode(b"abc").decode(), [1, "x"], 3):
        with pytest.raises(ValueError):
            decode_routed_experts(bad)


def test_judge_rows_shares_and_out_of_range():
    buggy = [1, 2, 3, 4, 5, 384] * 3
    fixed = [1, 2, 3, 4, 5, 6] * 3
    zeros = [0] * 6
    assert judge(buggy + zeros, _rc(routed_per_token=5, out_of_range=True))[0]
    assert not judge(fixed, _rc(routed_per_token=5, out_of_range=True))[0]
    assert judge(fixed + zeros, _rc(routed_per_token=6, out_of_range=False))[0]
    assert not judge(buggy, _rc(routed_per_token=6, out_of_range=False))[0]
    # out_of_range: false is absolute, even for one row, even with a lenient share
    one_bad = fixed * 3 + [1, 2, 3, 4, 5, 392]
    assert not judge(one_bad, _rc(routed_per_token=6, out_of_range=False, min_share=0.5))[0]
    # a share: 3 of 4 routed rows carry the marker
    mixed = buggy + fixed[:6]
    ok, _found, ev = judge(mixed, _rc(routed_per_token=5, out_of_range=True, min_share=0.75))
    assert ok and ev["share_as_expected"] == pytest.approx(0.75)
    assert not judge(mixed, _rc(routed_per_token=5, out_of_range=True, min_share=0.8))[0]
    # shapes that cannot be rows of top_k, no routed row at all
    assert not judge([1, 2, 3], _rc(routed_per_token=6))[0]
    assert not judge(zeros * 4, _rc(routed_per_token=6))[0]
    assert not judge([], _rc(routed_per_token=6))[0]


# ------------------------------------------------------------------------------ endpoints and probes
def test_deprecated_endpoint_names_are_the_fallback(tmp_path):
    checks = [CheckConfig(kind="http", name="a2a", key="moe_a2a_backend", equals="mori"),
              CheckConfig(kind="http", name="model", path="/model_info", key="model_path", equals="fake/model")]
    for deprecated_only in ("0", "1"):
        arm, e = fake_engine(tmp_path, checks, f"dep{deprecated_only}", FAKE_DEPRECATED_ONLY=deprecated_only,
                             FAKE_FUSION="1")
        with e:
            e.launch()
            e.wait_ready()
            res = run_live_checks(arm, e)
            probe = e.probe()
            regime = load_callable("probe_shared_slot:regime", str(ROOT))(e.url)
        assert all(r.passed for r in res), [r.line() for r in res]
        want = "/get_server_info" if deprecated_only == "1" else "/server_info"
        assert res[0].evidence["url"].endswith(want)
        assert probe["server_info"]["moe_a2a_backend"] == "mori" and probe["model_info"]["model_path"] == "fake/model"
        assert regime[0] is True
    assert find_arm_file("probe_shared_slot.py", ROOT).read_text().index('"/server_info"') < \
        find_arm_file("probe_shared_slot.py", ROOT).read_text().index('"/get_server_info"')


def test_ready_timeout_says_what_to_do_on_a_cold_download(tmp_path):
    arm, e = fake_engine(tmp_path, [], "cold", FAKE_NEVER_READY="1")
    e.cfg.ready_timeout_s = 1.5
    with e, pytest.raises(EngineError) as ei:
        e.launch()
        e.wait_ready()
    msg = str(ei.value)
    assert "not ready after 2 s" in msg and COLD_START_HINT in msg
    assert "HF_HUB_OFFLINE=1" in msg and "hf download" in msg


# ------------------------------------------------------------------------------------ derived ports
SEED_FLAGS = ["--tensor-parallel-size", "8", "--dp", "8", "--enable-dp-attention", "--ep-size", "8"]


def test_sglang_derived_ports_follow_port_args():
    ports = derived_ports(30000, SEED_FLAGS)
    assert ports[0] == 30233 and ports[-1] == 30233 + 8 + 8  # dist-init, ZMQ block, one port per DP rank
    assert derived_ports(30000, ["--tp", "8"]) == []  # IPC without DP attention
    assert derived_ports(65400, SEED_FLAGS)[0] == 65400 - 233  # mirrored below near the top of the range
    assert derived_ports(30000, [*SEED_FLAGS, "--dist-init-addr", "127.0.0.1:40000"])[0] == 40000
    assert derived_ports(30000, [*SEED_FLAGS, "--nnodes", "2", "--dist-init-addr", "10.0.0.1:40000"]) == []
    assert derived_ports(30000, ["--nccl-port", "29500"]) == [29500]


def _listen(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


def _free_port_with_free_block() -> int:
    """A port whose whole SGLang block is free, drawn below the kernel's ephemeral range: the outgoing connections
    of tests running beside this one (pytest -n) take ephemeral ports and could land in a block drawn there."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(200):
        if low > 10_300:
            p = rng.randrange(10_000, low - 300)
        else:  # no room below the ephemeral range: a port the kernel hands out, as before
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                p = s.getsockname()[1]
        if p + 300 < 65_000 and not engine_base.busy_ports([p, *derived_ports(p, SEED_FLAGS)]):
            return p
    raise RuntimeError("no free port block")


def test_a_taken_derived_port_is_refused_before_launch(tmp_path):
    port = _free_port_with_free_block()
    held = _listen(port + 233 + 4)
    try:
        arm = ResolvedArm(key="a", name="a", pythonpath=[str(HELPERS)])
        cfg = SGLangEngineConfig(module="fake_sglang_server", fingerprint=False, port=port, args=SEED_FLAGS)
        e = create_engine(cfg, arm, tmp_path, "ports")
        with pytest.raises(PortInUseError, match=f"port\\(s\\) {port + 237} .*derives from --port {port}"):
            e.launch()
        assert e.proc is None  # nothing was started
    finally:
        held.close()


def test_a_picked_port_whose_block_is_taken_is_picked_again(tmp_path, monkeypatch):
    first, second = _free_port_with_free_block(), _free_port_with_free_block()
    assert first != second
    picks = iter([first, second])
    monkeypatch.setattr(engine_base, "pick_free_port", lambda host: next(picks))
    held = _listen(first + 233)
    try:
        arm = ResolvedArm(key="a", name="a", pythonpath=[str(HELPERS)])
        cfg = SGLangEngineConfig(module="fake_sglang_server", fingerprint=False, args=SEED_FLAGS, ready_timeout_s=30,
                                 poll_interval_s=0.1, stop_timeout_s=10, release_timeout_s=5)
        e = create_engine(cfg, arm, tmp_path, "repick")
        with e:
            e.launch()
            e.wait_ready()
            assert e.port == second and f"--port {second}" in " ".join(e.launch_spec().server_argv)
    finally:
        held.close()


@pytest.mark.parametrize("bug", [True, False])
def test_routed_experts_check_on_the_simulators_buggy_and_fixed_builds(tmp_path, bug):
    """The reusable ``routed_experts`` check against the project's simulator (a real HTTP server process):
    the buggy build shows the gate's shared marker (5 routed ids + id >= num_experts), the fixed build 6 routed
    ids in range. Each check passes on its own side and fails on the other."""
    from harness.config import SimulatedEngineConfig

    buggy_side = CheckConfig(kind="routed_experts", name="buggy", num_experts=256, top_k=6, routed_per_token=5,
                             out_of_range=True, min_share=0.5)
    fixed_side = CheckConfig(kind="routed_experts", name="fixed", num_experts=256, top_k=6, routed_per_token=6,
                             out_of_range=False)
    arm = ResolvedArm(key="x", name="x", checks=[buggy_side, fixed_side], arms_root=str(ROOT))
    cfg = SimulatedEngineConfig(routed_experts_bug=bug, num_experts=256, topk=6, ready_timeout_s=30)
    e = create_engine(cfg, arm, tmp_path, "sim")
    with e:
        e.launch()
        e.wait_ready()
        results = {r.name: r for r in run_live_checks(arm, e)}
    assert results["buggy"].passed is bug, results["buggy"].found
    assert results["fixed"].passed is (not bug), results["fixed"].found
    if bug:
        with pytest.raises(SideAssertionError, match="fixed"):
            assert_checks([results["fixed"]], "x")
