"""The order of a run's evals and scoring passes, and which of them need a server launch of their own.

The divergence's scoring passes ride on launches the evals hold wherever the design allows: the **reference**
and **compared** passes right after each arm's repeat 1, on that eval's launch; the **floor** (A/A) pass on
the first later *fresh* launch of the reference arm (else a launch of its own, which the printed design
shows); a **launch** pass on every other launch, after its first eval that follows the reference pass (a
launch whose evals all ran before the reference texts existed is not scored). Never a second pass on the
reference pass's own launch: it would miss the launch-to-launch noise the compared pass carries, and the test
would reject every time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Step:
    """One step of the run: an eval (an arm's repeat, or one of the A/A control's baseline runs), or one
    scoring pass (``scoring``: ``ref``, ``ab``, ``aa`` or ``launch``) over the reference arm's repeat-1 texts."""

    role: str  # "a", "b" or "aa" (the launch's role in the cost accounting)
    arm_key: str
    repeat: int
    #: Needs a server launch that has served no eval yet (a restart per repeat, or the A/A control's own launch).
    fresh: bool = False
    #: None for an eval; the scoring pass this item runs
    scoring: str | None = None
    #: the pass's directory (for a scoring item; an eval's is its role and repeat)
    pass_dir: str | None = None

    @property
    def rel_dir(self) -> str:
        return self.pass_dir or eval_rel_dir(self.role, self.repeat)

    @property
    def is_eval(self) -> bool:
        return self.scoring is None


@dataclass
class PlannedLaunch:
    """One server launch the schedule will make: its arm, the role of its first item, the evals it serves
    (their roles) and the scoring passes it serves."""

    key: str
    role: str
    roles: list[str] = field(default_factory=list)
    scoring: int = 0
    #: positions (in the schedule) of the items this launch serves
    items: list[int] = field(default_factory=list)

    @property
    def passes(self) -> int:
        return len(self.roles)


def plan_launches(items: Iterable[Step], concurrent: bool) -> list[PlannedLaunch]:
    """The launches the schedule makes, in order, with the evals each serves, by the server pool's rules
    (harness.orchestrate.servers): one server at a time unless ``concurrent``; an item marked ``fresh`` needs
    a launch that has served no eval yet."""
    live: dict[str, PlannedLaunch] = {}
    out: list[PlannedLaunch] = []
    for pos, it in enumerate(items):
        if not concurrent:
            for other in [k for k in live if k != it.arm_key]:
                live.pop(other)
        cur = live.get(it.arm_key)
        if cur is not None and it.fresh and (cur.passes or cur.scoring):
            cur = None
        if cur is None:
            cur = PlannedLaunch(it.arm_key, it.role)
            live[it.arm_key] = cur
            out.append(cur)
        cur.items.append(pos)
        if it.is_eval:
            cur.roles.append(it.role)
        else:
            cur.scoring += 1
    return out


def eval_rel_dir(role: str, repeat: int) -> str:
    """``evals/<role>/r<repeat>``: where one schedule item's answers live, relative to the run directory."""
    return f"evals/{role}/r{repeat}"


def floor_dir(reference: str) -> str:
    """Where reference arm ``reference``'s floor pass goes: ``evals/aa/r1`` for A, ``evals/bb/r1`` for B."""
    return eval_rel_dir(reference * 2, 1)


def with_scoring(items: list[Step], reference: str, keys: dict[str, str], aa_key: str | None = None, *,
                 concurrent: bool = False) -> list[Step]:
    """``items`` with the scoring passes placed on launches the evals hold (see the module docstring).
    ``keys``: role -> arm key; ``aa_key``: the arm whose launch serves the floor when it is not the reference
    arm itself (``abh ab --aa URL``: a second server of arm A); ``concurrent``: the servers may run at once
    (``experiment.concurrent_servers``; it decides which evals share a launch)."""
    other = "b" if reference == "a" else "a"
    ref_key = keys[reference]
    host = None  # the eval whose (fresh) launch serves the floor: the A/A control's first, else a later repeat
    if aa_key is None:
        fresh_ref = [it for it in items if it.fresh and it.arm_key == ref_key and (it.role == "aa" or it.repeat > 1)]
        host = next((it for it in fresh_ref if it.role == "aa"), fresh_ref[0] if fresh_ref else None)
    elif reference == "a":  # the floor's own server evaluates the A/A control: the floor rides on its first eval
        host = next((it for it in items if it.arm_key == aa_key and it.role == "aa"), None)
    compared = Step(other, keys[other], 1, scoring="ab", pass_dir=eval_rel_dir(other, 1))
    out: list[Step] = []
    ref_done = other_seen = False
    for it in items:
        out.append(it)
        if it.role == reference and it.repeat == 1:
            out.append(Step(reference, ref_key, 1, scoring="ref", pass_dir=eval_rel_dir(reference, 1)))
            ref_done = True
            if other_seen:  # the other arm ran first (blocked order): its server again, after the reference pass
                out.append(compared)
        elif it.role == other and it.repeat == 1:
            other_seen = True
            if ref_done:
                out.append(compared)
        elif it is host:
            out.append(Step(it.role, it.arm_key, it.repeat, scoring="aa", pass_dir=floor_dir(reference)))
    if host is None:  # no later fresh launch of the reference arm: one for the floor alone
        role = "aa" if reference == "a" else reference
        out.append(Step(role, aa_key or ref_key, 1, fresh=True, scoring="aa", pass_dir=floor_dir(reference)))
    # the compared pass and the floor score the reference pass's ids: it comes first
    assert [it.scoring for it in out if it.scoring][:1] == ["ref"], out
    return _on_every_launch(out, set(keys.values()), concurrent)


def _on_every_launch(items: list[Step], arms: set[str], concurrent: bool) -> list[Step]:
    """``items`` with a ``launch`` pass after the first eval, following the reference pass, of every launch
    of the compared arms that serves no pass yet (placed while the launch is live: no launch is added)."""
    ref_at = next(i for i, it in enumerate(items) if it.scoring == "ref")
    after: dict[int, Step] = {}
    for lc in plan_launches(items, concurrent):
        served = [items[i] for i in lc.items]
        if lc.key not in arms or any(not it.is_eval for it in served):
            continue
        host = next((i for i in lc.items if i > ref_at and items[i].is_eval), None)
        if host is not None:
            it = items[host]
            after[host] = replace(it, fresh=False, scoring="launch", pass_dir=eval_rel_dir(it.role, it.repeat))
    out: list[Step] = []
    for i, it in enumerate(items):
        out.append(it)
        if i in after:
            out.append(after[i])
    return out


def scoring_dirs(items: list[Step], reference: str, keys: dict[str, str]) -> dict[str, list[str]]:
    """The scoring passes of a schedule by what they are for the divergence: ``ref`` (the reference pass),
    ``same`` (the reference configuration's other launches: the floor first) and ``other`` (the compared
    configuration's launches: the compared pass first); run-directory-relative paths, in schedule order."""
    ref_key = keys[reference]
    out: dict[str, list[str]] = {"ref": [], "same": [], "other": []}
    for it in sorted((it for it in items if it.scoring), key=lambda it: it.scoring == "launch"):  # stable
        side = {"ref": "ref", "aa": "same", "ab": "other"}.get(it.scoring or "")
        out[side or ("same" if it.arm_key == ref_key else "other")].append(it.rel_dir)
    return out


def schedule(a: str, b: str, repeats: int, order: str, aa_control: bool, *, restart_per_repeat: bool = False,
             aa_fresh_launch: bool = True, aa_arm: str | None = None) -> list[Step]:
    """``interleaved``: A1 B1 A2 B2 ... (drift hits both arms alike); ``blocked``: A1 A2 ... B1 B2 ...; then
    the A/A control's two baseline runs, each on a fresh launch of arm A unless ``aa_fresh_launch`` is off, so
    the control samples the launch-to-launch noise the arms' runs see. ``aa_arm``: the A/A control runs on
    that arm's server instead (``abh ab --aa URL_A2``), one eval per repeat in the arms' order (A1 B1 A2'1 A2
    B2 A2'2 ...), so drift hits it as it hits the arms."""
    fresh = restart_per_repeat
    aa = aa_arm if aa_control else None
    rounds = [[Step("a", a, r, fresh), Step("b", b, r, fresh)] + ([Step("aa", aa, r)] if aa else [])
              for r in range(1, repeats + 1)]
    if order == "interleaved":
        items = [it for rnd in rounds for it in rnd]
    else:
        items = [rnd[k] for k in range(len(rounds[0])) for rnd in rounds]
    if aa_control and aa is None:
        items += [Step("aa", a, r, fresh or aa_fresh_launch) for r in (1, 2)]
    return items


def sequential_schedule(a: str, b: str, max_repeats: int, aa_control: bool, *, aa_fresh_launch: bool = True
                        ) -> list[Step]:
    """A sequential run's worst case: A r, B r for r = 1..max_repeats, every one on a fresh launch (the looks
    need independent repeats), then the A/A control; the run stops after the repeat whose look decides."""
    items = [it for r in range(1, max_repeats + 1) for it in (Step("a", a, r, True), Step("b", b, r, True))]
    if aa_control:
        items += [Step("aa", a, r, aa_fresh_launch) for r in (1, 2)]
    return items
