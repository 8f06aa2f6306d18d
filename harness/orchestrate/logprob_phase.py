"""The scoring phase of ``abh run``: after the accuracy evals, three teacher-forced scoring passes of the
reference arm's greedy texts (repeat 1), for the divergence (:mod:`harness.measure.logprob_pass`, issue 11).

=============  ==================================  =====================================================
pass           server                              written to
=============  ==================================  =====================================================
reference      the reference arm (its live launch  ``evals/<ref>/r1/`` (beside the texts it scores)
               when there is one)
compared       the other arm                       ``evals/<other>/r1/``
floor (A/A)    a FRESH launch of the reference     ``evals/aa/r1/`` (reference ``a``; ``evals/bb/r1/``
               arm: never the reference pass's     for ``b``): the A/A control's eval directory when the
                                                   run has one, else a directory holding the pass only
=============  ==================================  =====================================================

The floor must be drawn like the compared pass: that one runs on another launch than the reference pass, so
the floor does too (an A/A pass on the reference pass's own launch misses the launch-to-launch noise, and the
test then rejects every time). Launches are acquired from the run's :class:`ServerPool` and recorded like the
evals' (role ``a``/``b``, and ``aa`` for the floor of reference ``a``); each pass goes to the manifest under
``scoring``. Signals cancel a pass through :meth:`Interrupts.run_async` (nothing of it is kept; a rerun
scores again). A pass is kept on a rerun when it scored the same reference texts at the same ``top_k``; a
server that fails during a pass makes it ``not_measured`` for this run (the accuracy verdict stands) and is
retried by the next one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from harness.config import client_settings
from harness.measure.logprob_pass import ScoringOptions, score_pass_async
from harness.orchestrate.interrupts import Interrupted, Interrupts
from harness.orchestrate.rundir import Manifest, RunLog, eval_rel_dir
from harness.orchestrate.servers import ServerPool
from harness.results.eval_store import SAMPLES
from harness.results.fileio import read_json
from harness.results.token_store import SCORES_META, write_not_measured
from harness.serving.client import ClientConfig, ServerGone


@dataclass(frozen=True)
class Pass:
    name: str  # "ref", "ab" or "aa"
    arm_key: str
    role: str  # the launch's role (cost accounting): a, b or aa
    rel_dir: str
    fresh: bool


def passes(reference: str, keys: dict[str, str]) -> list[Pass]:
    """The three passes for reference arm ``reference`` (``a`` or ``b``); ``keys``: role -> arm key."""
    other = "b" if reference == "a" else "a"
    floor_role = "aa" if reference == "a" else reference
    return [Pass("ref", keys[reference], reference, eval_rel_dir(reference, 1), False),
            Pass("ab", keys[other], other, eval_rel_dir(other, 1), False),
            Pass("aa", keys[reference], floor_role, eval_rel_dir(reference * 2, 1), True)]


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class ScoringPhase:
    """Runs (or keeps) the three passes of one run; see the module docstring."""

    def __init__(self, cfg: DictConfig, run_dir: Path, keys: dict[str, str], pool: ServerPool, manifest: Manifest,
                 interrupts: Interrupts, log: RunLog):
        self.cfg, self.run_dir, self.keys = cfg, run_dir, keys
        self.pool, self.manifest, self.interrupts, self.log = pool, manifest, interrupts, log
        self.reference = str(cfg.divergence.reference)
        self.top_k = int(cfg.divergence.top_k)
        self.passes = passes(self.reference, keys)

    def dirs(self) -> dict[str, Path]:
        """The passes' directories by name (ref, ab, aa)."""
        return {p.name: self.run_dir / p.rel_dir for p in self.passes}

    def run(self) -> None:
        ref_eval = self.run_dir / self.passes[0].rel_dir
        texts = _sha256(ref_eval / SAMPLES)
        redo = False
        for p in self.passes:
            out = self.run_dir / p.rel_dir
            ref_scores = None if p.name == "ref" else self.run_dir / self.passes[0].rel_dir
            if not redo and self._current(out, texts, ref_scores):
                self.log.say(f"scoring {p.rel_dir}: already scored, kept")
                continue
            redo = redo or p.name == "ref"  # a new reference pass: the others score against it again
            self._score(p, ref_eval, ref_scores, texts)

    def _current(self, out: Path, texts: str | None, ref_scores: Path | None) -> bool:
        try:
            meta = read_json(out / SCORES_META)
        except (OSError, ValueError):
            return False
        return (not meta.get("transient") and meta.get("requested_top_k") == self.top_k
                and meta.get("reference_sha256") == texts
                # the reference pass by its place in the run directory, so a moved or copied run resumes
                and meta.get("reference_pass") == self._rel(ref_scores))

    def _rel(self, ref_scores: Path | None) -> str | None:
        return None if ref_scores is None else ref_scores.relative_to(self.run_dir).as_posix()

    def _score(self, p: Pass, ref_eval: Path, ref_scores: Path | None, texts: str | None) -> None:
        cfg, out = self.cfg, self.run_dir / p.rel_dir
        launch = self.pool.acquire(p.arm_key, p.role, fresh=p.fresh, label="[scoring]")
        launch.passes += 1
        engine = launch.engine
        what = {"ref": "reference pass", "ab": "compared pass",
                "aa": f"{self.reference.upper()}/{self.reference.upper()} floor"}[p.name]
        self.log.say(f"scoring {p.rel_dir} ({what}, arm {p.arm_key}, launch {launch.id}) on {engine.url}")
        meta: dict[str, Any] = {"pass": p.name, "arm": p.arm_key, "role": p.role, "launch": launch.id,
                                "engine": engine.kind, "simulated": engine.simulated, "reference": self.reference,
                                "reference_sha256": texts, "reference_pass": self._rel(ref_scores)}
        record: dict[str, Any] = {"pass": p.name, "arm": p.arm_key, "launch": launch.id, "status": "running"}
        self.manifest.record("scoring", {**(self.manifest.data.get("scoring") or {}), p.rel_dir: record})
        ccfg = ClientConfig.of(client_settings(cfg), url=engine.url, api=engine.api)
        opts = ScoringOptions(top_k=self.top_k, reference_scores=ref_scores, progress=bool(cfg.progress),
                              abort_check=engine.alive, meta=meta)
        try:
            result = self.interrupts.run_async(score_pass_async(ref_eval, ccfg, out, opts))
        except Interrupted:
            record["status"] = "interrupted"
            self.manifest.record("scoring", self.manifest.data.get("scoring"))
            raise
        except ServerGone as e:
            why = f"the server of arm {p.arm_key} (launch {launch.id}) failed while scoring: {e}"
            write_not_measured(out, why, {**meta, "transient": True, "requested_top_k": self.top_k,
                                          "reference_eval": str(ref_eval),
                                          "reference_scores": None if ref_scores is None else str(ref_scores)})
            self.pool.stop(p.arm_key, "it failed")
            result = {"status": "not_measured", "reason": why}
        record.update({"status": result.get("status"), "reason": result.get("reason"),
                       "wall_s": result.get("wall_s"), "questions": result.get("questions"),
                       "tokens": result.get("tokens"), "errors": result.get("errors")})
        self.manifest.record("scoring", self.manifest.data.get("scoring"))
        if result.get("status") == "ok":
            self.log.say(f"  {p.rel_dir}: {result.get('tokens')} tokens of {result.get('questions')} questions "
                         f"scored in {result.get('wall_s', 0.0):.1f} s, errors {result.get('errors')}")
        else:
            self.log.say(f"  {p.rel_dir}: not measured: {result.get('reason')}")
