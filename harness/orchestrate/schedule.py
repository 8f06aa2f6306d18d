"""The order of a run's evals, and which of them need a server launch of their own."""

from __future__ import annotations

from dataclasses import dataclass

from harness.orchestrate.rundir import eval_rel_dir


@dataclass(frozen=True)
class Item:
    """One eval of the run: an arm's repeat, or one of the A/A control's extra baseline runs."""

    role: str  # "a", "b" or "aa"
    arm_key: str
    repeat: int
    #: Needs a server launch that has served no eval yet (a restart per repeat, or the A/A control's own launch).
    fresh: bool = False

    @property
    def rel_dir(self) -> str:
        return eval_rel_dir(self.role, self.repeat)


def schedule(a: str, b: str, repeats: int, order: str, aa_control: bool, *, restart_per_repeat: bool = False,
             aa_fresh_launch: bool = True) -> list[Item]:
    """``interleaved``: A1 B1 A2 B2 ... (drift hits both arms alike); ``blocked``: A1 A2 ... B1 B2 ...; then
    the A/A control's two baseline runs, each on a fresh launch of arm A unless ``aa_fresh_launch`` is off, so
    the control samples the launch-to-launch noise the arms' runs see."""
    fresh = restart_per_repeat
    if order == "interleaved":
        items = [it for r in range(1, repeats + 1) for it in (Item("a", a, r, fresh), Item("b", b, r, fresh))]
    else:
        items = ([Item("a", a, r, fresh) for r in range(1, repeats + 1)]
                 + [Item("b", b, r, fresh) for r in range(1, repeats + 1)])
    if aa_control:
        items += [Item("aa", a, r, fresh or aa_fresh_launch) for r in (1, 2)]
    return items


def sequential_schedule(a: str, b: str, max_repeats: int, aa_control: bool, *, aa_fresh_launch: bool = True
                        ) -> list[Item]:
    """A sequential run's worst case: A r, B r for r = 1..max_repeats, every one on a fresh launch (the looks
    need independent repeats), then the A/A control; the run stops after the repeat whose look decides."""
    items = [it for r in range(1, max_repeats + 1) for it in (Item("a", a, r, True), Item("b", b, r, True))]
    if aa_control:
        items += [Item("aa", a, r, aa_fresh_launch) for r in (1, 2)]
    return items
