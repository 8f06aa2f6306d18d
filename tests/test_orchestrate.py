"""The pieces of `abh run` without servers: the schedule, the resume rule, the config digest, the run design,
the server pool's reuse and fresh-launch rules, and signals turned into Interrupted."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from harness.arms.arm import ResolvedArm
from harness.engines import LaunchSpec
from harness.orchestrate.interrupts import Interrupted, Interrupts
from harness.orchestrate.rundir import Manifest, config_digest, non_semantic_keys
from harness.orchestrate.schedule import schedule
from harness.orchestrate.servers import ServerPool
from harness.results.eval_store import eval_done
from harness.results.schema import write_eval_summary


# ------------------------------------------------------------------------------------------ schedule
def test_interleaved_and_blocked_orders_and_the_fresh_launches() -> None:
    got = schedule("a", "b", 2, "interleaved", True)
    assert [(i.role, i.repeat, i.fresh) for i in got] == [
        ("a", 1, False), ("b", 1, False), ("a", 2, False), ("b", 2, False), ("aa", 1, True), ("aa", 2, True)]
    assert all(i.arm_key == "a" for i in got if i.role == "aa")
    assert [i.rel_dir for i in schedule("a", "b", 2, "blocked", False)] == [
        "evals/a/r1", "evals/a/r2", "evals/b/r1", "evals/b/r2"]
    assert not any(i.fresh for i in schedule("a", "b", 1, "interleaved", True, aa_fresh_launch=False))
    assert all(i.fresh for i in schedule("a", "b", 2, "blocked", True, restart_per_repeat=True))


# ------------------------------------------------------------------------------------------ run dir
def _summary(path: Path, **kw: Any) -> Path:
    write_eval_summary(path / "summary.json", {"n": 10, **kw})  # type: ignore[typeddict-item]
    return path


def test_an_eval_is_kept_only_when_complete_without_errors(tmp_path: Path) -> None:
    assert not eval_done(tmp_path / "none")
    assert eval_done(_summary(tmp_path / "ok", complete=True, errors=0))
    assert not eval_done(_summary(tmp_path / "errors", complete=True, errors=3))  # a rerun resends them
    assert not eval_done(_summary(tmp_path / "partial", complete=False, errors=0))


def test_fault_knobs_and_scheduling_options_do_not_change_the_digest() -> None:
    base = {"engine": {"kind": "simulated", "accuracy": 0.9, "port": 0},
            "arms": {"a": {"engine": {}}, "b": {"engine": {"build": "fix"}}},
            "experiment": {"repeats": 2, "order": "interleaved"}, "client": {"retries": 3}}
    skip = non_semantic_keys(("port", "crash_after", "error_rate"), ["a", "b"])
    ref = config_digest(base, skip)["sha256"]
    same = [{**base, "engine": {**base["engine"], "error_rate": 0.5, "port": 31000}},
            {**base, "arms": {"a": {"engine": {"crash_after": 300}}, "b": base["arms"]["b"]}},
            {**base, "experiment": {"repeats": 2, "order": "blocked"}, "client": {"retries": 0}}]
    for cfg in same:
        assert config_digest(cfg, skip)["sha256"] == ref, cfg
    changed = {**base, "engine": {**base["engine"], "accuracy": 0.95}}
    assert config_digest(changed, skip)["sha256"] != ref
    assert config_digest({**base, "experiment": {"repeats": 3, "order": "interleaved"}}, skip)["sha256"] != ref


def test_the_design_comes_from_the_launches_that_served_the_evals(tmp_path: Path) -> None:
    m = Manifest(tmp_path, enabled=False)
    for rel, role, launches in (("evals/a/r1", "a", ["a-1"]), ("evals/a/r2", "a", ["a-1"]),
                                ("evals/b/r1", "b", ["b-1"]), ("evals/b/r2", "b", ["b-1", "b-2"]),
                                ("evals/aa/r1", "aa", ["a-2"])):
        m.add_eval(rel, arm=role[0], role=role, repeat=int(rel[-1]))
        for launch in launches:
            m.eval_started(rel, launch)
    assert m.design() == {"launches": {"a": 1, "b": 2, "aa": 1}, "passes_per_launch": {"a": 2, "b": 2, "aa": 1}}


# ------------------------------------------------------------------------------------------ servers
class FakeEngine:
    """What the pool uses of an engine, without a process."""

    kind = "fake"

    def __init__(self, key: str, launched: bool = True):
        self.key, self.launched = key, launched
        self.url = f"http://fake/{key}"
        self.starts = self.stops = 0
        self.dead: str | None = None
        self.settled: list[bool] = []
        #: what asking the GPUs before a launch does (a vendor tool that can hang for its timeouts)
        self.gpu_query: Any = None

    def prepare_launch(self) -> None:
        if self.gpu_query is not None:
            self.gpu_query()

    def launch_spec(self) -> LaunchSpec:
        return LaunchSpec(argv=[], server_argv=[], env_delta={}, env={}, launched=self.launched)

    def launch(self) -> None:
        self.starts += 1
        self.dead = None

    def wait_ready(self, on_status: Any = None) -> float:
        return 0.0

    def probe(self) -> dict[str, Any]:
        return {"pid": self.starts}

    def alive(self) -> str | None:
        return self.dead

    def launch_identity(self) -> str | None:
        return None if self.launched else f"url:{self.url}"  # as the external engine: one URL, one launch

    def stop(self, on_status: Any = None, settle: bool = True) -> dict[str, Any]:
        self.stops += 1
        self.settled.append(settle)
        return {"how": "SIGTERM"}

    def log_tail(self, lines: int = 20) -> str:
        return ""


def _pool(tmp_path: Path, concurrent: bool, launched: bool = True) -> tuple[ServerPool, dict[str, FakeEngine]]:
    engines = {k: FakeEngine(k, launched) for k in ("a", "b")}
    arms = {k: ResolvedArm(key=k, name=k) for k in engines}
    said: list[str] = []
    return ServerPool(engines, arms, Manifest(tmp_path, enabled=False), Interrupts(), said.append,  # type: ignore[arg-type]
                      concurrent=concurrent), engines


def test_one_server_at_a_time_unless_concurrent(tmp_path: Path) -> None:
    pool, eng = _pool(tmp_path, concurrent=False)
    assert pool.acquire("a", "a").id == "a-1"
    assert pool.acquire("b", "b").id == "b-1" and eng["a"].stops == 1 and set(pool.live) == {"b"}
    assert pool.acquire("a", "a").id == "a-2"  # arm A again: a new launch
    pool, eng = _pool(tmp_path / "c", concurrent=True)
    first = pool.acquire("a", "a")
    pool.acquire("b", "b")
    assert pool.acquire("a", "a") is first and eng["a"].starts == 1 and set(pool.live) == {"a", "b"}
    pool.stop_all()
    assert not pool.live and eng["a"].stops == eng["b"].stops == 1


def test_a_fresh_launch_is_one_that_served_no_eval(tmp_path: Path) -> None:
    pool, eng = _pool(tmp_path, concurrent=True)
    launch = pool.acquire("a", "a", fresh=True)
    assert pool.acquire("a", "a", fresh=True) is launch  # served nothing yet: fresh enough
    launch.passes = 1
    assert pool.acquire("a", "aa").id == "a-1"  # reuse is allowed
    assert pool.acquire("a", "aa", fresh=True).id == "a-2" and eng["a"].starts == 2
    roles = [x["role"] for x in pool.manifest.data["arms"]["a"]["launches"]]
    assert roles == ["a", "aa"]


def test_a_dead_server_is_launched_again_and_an_external_one_is_reused(tmp_path: Path) -> None:
    pool, eng = _pool(tmp_path, concurrent=True)
    pool.acquire("a", "a")
    eng["a"].dead = "server process exited with code -9"
    assert pool.acquire("a", "a").id == "a-2"
    pool, eng = _pool(tmp_path / "ext", concurrent=True, launched=False)
    launch = pool.acquire("a", "a")
    launch.passes = 1
    assert pool.acquire("a", "aa", fresh=True) is launch and eng["a"].starts == 1  # nothing abh could restart


# ------------------------------------------------------------------------------------------ signals
def test_a_signal_raises_in_plain_code_and_waits_in_a_deferred_section() -> None:
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN where the test run was started in the background
    with Interrupts() as it, pytest.raises(Interrupted) as raised:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100):  # the handler runs between bytecodes
            pass
    assert raised.value.exit_code == 143
    with Interrupts() as it:
        with it.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100):
                pass
            reached_end_of_section = True
        assert reached_end_of_section
        with pytest.raises(Interrupted) as raised:
            it.check()
    assert raised.value.exit_code == 130
    assert signal.getsignal(signal.SIGINT) is before  # handlers restored


def test_ctrl_c_while_a_launch_asks_the_gpus_acts_at_once(tmp_path: Path) -> None:
    """A GPU tool that hangs (nvidia-smi without a driver: two 15 s timeouts) used to be asked inside the section
    a signal must not cut, so Ctrl-C waited for it (the 30 s of the signal test under load): it is asked before,
    and the signal raises there, before any process starts. The interrupted run's stops do not wait for the port
    and GPUs either (the same tool would hold it again)."""
    pool, eng = _pool(tmp_path, concurrent=True)
    started_query = []

    def hung_tool() -> None:
        started_query.append(True)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the tool is being asked
        for _ in range(2000):  # the tool's answer, late (a signal raises in between)
            os.sched_yield()
        eng["b"].starts = -100  # reached only when the signal waited for the tool

    with Interrupts() as it:
        pool.interrupts = it
        assert pool.acquire("a", "a").id == "a-1"  # a launch whose GPU query answers
        eng["b"].gpu_query = hung_tool
        with pytest.raises(Interrupted):
            pool.acquire("b", "b")
        assert started_query and eng["b"].starts == 0 and "b" not in pool.live  # nothing was started
        pool.stop_all()
    assert eng["a"].settled == [False]  # interrupted: stopped without waiting for its port and GPUs
    pool2, eng2 = _pool(tmp_path, concurrent=True)
    pool2.acquire("a", "a")
    pool2.stop_all()
    assert eng2["a"].settled == [True]  # a stop in an uninterrupted run waits for them


def test_a_signal_during_a_coroutine_cancels_it_and_comes_out_as_interrupted() -> None:
    """The case uvloop gets wrong with a raising handler: the exception would be swallowed by the loop."""
    cleaned: list[bool] = []

    async def slow() -> str:
        try:
            asyncio.get_running_loop().call_later(0.2, os.kill, os.getpid(), signal.SIGINT)
            await asyncio.sleep(30)
            return "finished"
        finally:
            cleaned.append(True)

    with Interrupts() as it, pytest.raises(Interrupted) as raised:
        it.run_async(slow())
    assert raised.value.exit_code == 130 and cleaned == [True]


# ------------------------------------------------------------------------------------------ scoring in the schedule
def _placed(items, reference="a", aa_key=None, concurrent=False):
    from harness.orchestrate.schedule import plan_launches, with_scoring

    full = with_scoring(items, reference, {"a": "a", "b": "b"}, aa_key, concurrent=concurrent)
    return full, plan_launches(full, concurrent=concurrent), plan_launches(items, concurrent=concurrent)


@pytest.mark.parametrize("design,concurrent,passes", [
    ({"repeats": 2, "order": "interleaved", "aa_control": True}, True,                          # the demo
     ["ref", "ab", "aa", "launch"]),
    ({"repeats": 2, "order": "interleaved", "aa_control": True}, False,                         # one GPU box
     ["ref", "ab", "launch", "launch", "aa", "launch"]),
    ({"repeats": 3, "order": "interleaved", "aa_control": True, "restart_per_repeat": True}, False,  # the seed
     ["ref", "ab", "launch", "launch", "launch", "launch", "aa", "launch"]),
    ({"repeats": 2, "order": "interleaved", "aa_control": False, "restart_per_repeat": True}, False,
     ["ref", "ab", "aa", "launch"]),
    ({"repeats": 2, "order": "blocked", "aa_control": True}, False, ["ref", "ab", "aa", "launch"]),
])
def test_scoring_passes_ride_on_the_evals_launches(design, concurrent, passes):
    items = schedule("a", "b", design.pop("repeats"), design.pop("order"), design.pop("aa_control"), **design)
    full, with_passes, without = _placed(items, concurrent=concurrent)
    assert [it.scoring for it in full if it.scoring] == passes
    assert len(with_passes) == len(without)  # zero extra launches
    # one pass per launch that serves evals: the reference's, the compared, the floor and every other one
    assert all(lc.scoring == 1 for lc in with_passes) and len(with_passes) == len(passes)
    floor = full.index(next(it for it in full if it.scoring == "aa"))
    assert full[floor - 1].fresh  # the floor right after an eval on a fresh launch
    for i, it in enumerate(full):  # every pass right after an eval on its launch, into that eval's directory
        if it.scoring in ("ab", "aa", "launch") and it.scoring != "ab":
            assert full[i - 1].is_eval and full[i - 1].arm_key == it.arm_key
        if it.scoring == "launch":
            assert it.rel_dir == full[i - 1].rel_dir and not it.fresh


def test_the_seed_design_scores_four_launches_of_a_and_three_of_b():
    from harness.orchestrate.schedule import scoring_dirs

    items = schedule("a", "b", 3, "interleaved", True, restart_per_repeat=True)
    full, _, _ = _placed(items)
    d = scoring_dirs(full, "a", {"a": "a", "b": "b"})
    assert d == {"ref": ["evals/a/r1"], "same": ["evals/aa/r1", "evals/a/r2", "evals/a/r3", "evals/aa/r2"],
                 "other": ["evals/b/r1", "evals/b/r2", "evals/b/r3"]}


def test_a_design_without_a_later_fresh_launch_gets_one_for_the_floor_and_says_so():
    from harness.orchestrate.design import describe, format_design

    items = schedule("a", "b", 2, "interleaved", aa_control=False)
    full, with_passes, without = _placed(items, concurrent=True)
    assert len(with_passes) == len(without) + 1 and full[-1].scoring == "aa" and full[-1].fresh
    d = describe(full, concurrent=True, gpus={"a": 8, "b": 8, "aa": 8})
    assert d["scoring"] == {"passes": 3, "own_launches": 1, "floor_server": False}
    text = "\n".join(format_design(d, 2, False))
    assert f"{len(with_passes)} server launch(es), scoring passes included" in text
    assert "1 launch(es) of their own for the floor" in text
    # a second server given for the floor (abh ab --aa): it serves the floor, no fresh launch of A is needed
    full, with_passes, _ = _placed(items, aa_key="a2", concurrent=True)
    assert full[-1].arm_key == "a2" and full[-1].scoring == "aa"


def test_with_reference_b_in_blocked_order_the_compared_pass_waits_for_the_reference():
    """Blocked order, reference B: A's launches ran before B's texts existed (not scored again: that would need
    a launch), the compared pass relaunches A as before; that stops B's server, so B r2 runs on a launch of
    its own and gets a pass (the reference configuration's second launch), and the floor its own launch."""
    full, with_passes, without = _placed(schedule("a", "b", 2, "blocked", False), reference="b")
    passes = [(it.scoring, it.arm_key, it.rel_dir) for it in full if it.scoring]
    assert passes == [("ref", "b", "evals/b/r1"), ("ab", "a", "evals/a/r1"), ("launch", "b", "evals/b/r2"),
                      ("aa", "b", "evals/bb/r1")]
    # the compared pass's relaunch of A, B's relaunch for r2 it causes, the floor's launch; none for B r2's pass
    assert len(with_passes) == len(without) + 3


def test_the_trade_off_line_never_offers_a_restart_abh_cannot_do():
    """abh ab reuses two servers it did not start: restart_per_repeat is not a key it takes (issue 23, item 8)."""
    from harness.orchestrate.design import describe, format_design

    d = describe(schedule("a", "b", 3, "interleaved", aa_control=False), concurrent=True, gpus={"a": 1, "b": 1})
    ours = "\n".join(format_design(d, 3, False))
    theirs = "\n".join(format_design(d, 3, False, can_restart=False))
    assert "experiment.restart_per_repeat=true" in ours
    assert "restart_per_repeat" not in theirs and "`abh eval` each launch and `abh compare` the evals" in theirs


@pytest.mark.parametrize("several", [False, True])
def test_a_comparison_that_cannot_be_made_exits_alike_for_one_task_and_several(tmp_path: Path, several: bool):
    """One finish: the same comparison failure is the same exit code whether the run has one task or several
    (a settings or incomparable-evals error is the config's, 2; too few answers, the errors', 5)."""
    from types import SimpleNamespace

    from harness import exitcodes
    from harness.analysis.compare_settings import CompareError, CompareSettingsError
    from harness.analysis.comparison import IncomparableEvals, TooFewAnswered
    from harness.exitcodes import Failure
    from harness.orchestrate.pipeline import Run

    cases = [(CompareSettingsError("alpha", "alpha must be in (0, 1)"), exitcodes.BAD_CONFIG, "stats.alpha"),
             (IncomparableEvals("the evals asked different questions"), exitcodes.BAD_CONFIG, "different"),
             (TooFewAnswered("0 answered", exitcodes.TOO_MANY_ERRORS), exitcodes.TOO_MANY_ERRORS, "Rerun"),
             (TooFewAnswered("1 question asked", exitcodes.BAD_CONFIG), exitcodes.BAD_CONFIG, "num_questions"),
             (CompareError("every answer errored"), exitcodes.TOO_MANY_ERRORS, "Rerun")]
    for error, code, says in cases:
        def fail(dirs: Any, error: Exception = error) -> Any:
            raise error

        run = SimpleNamespace(run_dir=tmp_path, several=several, manifest=SimpleNamespace(evals_of=lambda role: []),
                              _conclude=fail, _conclude_tasks=fail)
        with pytest.raises(Failure) as e:
            Run.finish(run)  # type: ignore[arg-type]
        assert e.value.code == code and says in str(e.value), (several, error, e.value)
    assert not hasattr(Run, "finish_tasks")
