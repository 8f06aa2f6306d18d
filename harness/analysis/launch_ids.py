"""Which server launch each stored eval ran on, as the comparison counts launches. A missing id is not a new
launch: evals without one count as one launch per server URL, and without a URL the comparison is refused
unless ``--launches-from-passes`` counts each as its own launch."""

from __future__ import annotations

from collections.abc import Sequence

from harness.analysis.compare_settings import CompareError
from harness.results.eval_store import ScoredEval
from harness.serving.settings import url_identity

PER_SERVER = "per_server"
PER_PASS = "per_pass"
#: the verdict's words for each way of counting (one clause of its qualification)
NOTES = {PER_SERVER: "launch ids missing: passes of one server counted as one launch",
         PER_PASS: "launch ids missing: each pass counted as its own launch (--launches-from-passes)"}
FLAG = "--launches-from-passes"


class LaunchesUnknown(CompareError):
    """Evals of one configuration record neither a launch id nor a URL, and no flag says how they ran."""


def recorded(run: ScoredEval) -> str | None:
    """The launch id the eval records (``launch``, else the older ``instance``), None when none."""
    value = run.meta.get("launch") or run.meta.get("instance")
    return str(value) if value else None


def launch_ids(configs: Sequence[Sequence[ScoredEval]], from_passes: bool = False
               ) -> tuple[list[list[str]], str | None]:
    """Each eval's launch id, per configuration (``configs``: e.g. [A's evals + the A/A evals, B's evals]),
    and how evals without one were counted (``PER_SERVER``, ``PER_PASS``, or None when no configuration has
    two evals without an id). LaunchesUnknown when such evals name no server and ``from_passes`` is off."""
    out: list[list[str]] = []
    how: str | None = None
    for runs in configs:
        missing = [r for r in runs if recorded(r) is None]
        several = len(missing) > 1
        if several and not from_passes:
            unknown = [r for r in missing if not r.meta.get("url")]
            if unknown:
                raise LaunchesUnknown(
                    f"refusing to compare: {len(missing)} evals of one arm ({', '.join(str(r.dir) for r in missing)})"
                    " record neither a launch id nor a server URL, so which of them shared a server launch cannot "
                    f"be told; if each ran on a server launch of its own, pass {FLAG}")
        ids = []
        for r in runs:
            rid = recorded(r)
            if rid is None:
                rid = (f"pass:{r.dir.resolve()}" if (from_passes or not r.meta.get("url"))
                       else url_identity(str(r.meta["url"])))
            ids.append(rid)
        if several:
            how = PER_PASS if from_passes else (how or PER_SERVER)
        out.append(ids)
    return out, how
