"""Does a server answer the same question the same way twice? The share of byte-identical outputs across the
passes of one arm, within and across launches: ψ only sees answers that flip between right and wrong (a server
answering at random is always wrong: ψ = 0), so 0 % identical at temperature 0 is flagged."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Literal

from harness.results.schema import IdenticalOutputs, IdenticalShare

#: The arms whose passes are compared (arm A's passes include its A/A control's).
Role = Literal["a", "b"]
#: One pass of an arm: (its server launch, each question's output or a fingerprint of it
#: (:class:`harness.results.eval_store.ScoredEval` ``outputs``), None where it has none).
Pass = tuple[str, Sequence[str | bytes | None]]

NOTE = ("share of questions whose output text is identical between two passes of the same arm, over the questions "
        "both passes answered; within_launch: passes on one server launch; across_launches: passes on different "
        "launches")


def _share(x: Sequence[str | bytes | None], y: Sequence[str | bytes | None]) -> tuple[int, int]:
    """(identical, compared) over the questions both passes answered."""
    both = [(u, v) for u, v in zip(x, y, strict=True) if u is not None and v is not None]
    return sum(u == v for u, v in both), len(both)


def arm_identity(passes: Sequence[Pass]) -> IdenticalShare:
    """One arm's shares: overall, within a launch and across launches (None where no pair is such)."""
    sums = {"all": [0, 0], "within_launch": [0, 0], "across_launches": [0, 0]}
    pairs = 0
    for (la, xa), (lb, xb) in combinations(passes, 2):
        same, n = _share(xa, xb)
        pairs += 1
        for key in ("all", "within_launch" if la == lb else "across_launches"):
            sums[key][0] += same
            sums[key][1] += n
    share = {k: (s / m if m else None) for k, (s, m) in sums.items()}
    return {"share": share["all"], "within_launch": share["within_launch"],
            "across_launches": share["across_launches"], "pairs": pairs, "questions": sums["all"][1]}


def identical_outputs(arms: Mapping[Role, Sequence[Pass]], temperature: float | None) -> IdenticalOutputs:
    """Each arm's :func:`arm_identity` and the arms flagged: no output identical at temperature 0."""
    out: IdenticalOutputs = {}
    for role, passes in arms.items():
        out[role] = arm_identity(passes)
    out["temperature"] = temperature
    out["flagged"] = [role for role in arms if temperature == 0 and out[role]["share"] == 0]
    out["note"] = NOTE
    return out


def warnings(block: IdenticalOutputs) -> list[str]:
    """The sentence of each flagged arm (for ``comparison.json`` ``warnings`` and the terminal)."""
    out = []
    for role in block.get("flagged") or []:
        arm = block["a"] if role == "a" else block["b"]
        out.append(f"arm {role.upper()}: none of its {arm['questions']} outputs is identical across its passes at "
                   "temperature 0: the server is nondeterministic (or not answering the questions), so its "
                   "within-arm noise (ψ_AA) does not measure its run-to-run noise")
    return out


def summary_line(block: IdenticalOutputs) -> str | None:
    """``identical outputs across passes: A 100.00 % (within a launch 100.00 %, across launches 99.10 %),
    ...``; None when no arm has two passes."""
    parts = []
    roles: tuple[Role, ...] = ("a", "b")
    for role in roles:
        arm = block.get(role)
        share = None if arm is None else arm.get("share")
        if arm is None or share is None:
            continue
        split = [f"{label} {100 * part:.2f} %" for part, label in ((arm.get("within_launch"), "within a launch"),
                                                                   (arm.get("across_launches"), "across launches"))
                 if part is not None]
        parts.append(f"{role.upper()} {100 * share:.2f} %" + (f" ({', '.join(split)})" if split else ""))
    return "identical outputs across passes: " + "; ".join(parts) if parts else None
