"""The divergence's scoring passes in ``abh run``: the reference arm's greedy texts (repeat 1) scored
teacher-forced on the launches :func:`harness.orchestrate.schedule.with_scoring` places them on, each into
that launch's eval directory and the manifest's ``scoring``. A pass is kept on a rerun when it scored the same
reference texts at the same ``top_k``; a server that dies or hangs stops the run as in an eval (exit 4), its
partial pass kept.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from harness.config import Config
from harness.measure.divergence_pass import ScoringOptions, score_pass_async
from harness.orchestrate.interrupts import Interrupted, Interrupts
from harness.orchestrate.routing_phase import route_launch
from harness.orchestrate.rundir import Manifest, RunLog, ScoringRecord
from harness.orchestrate.schedule import Step, eval_rel_dir, scoring_dirs
from harness.orchestrate.servers import Launch, ServerPool
from harness.results import fileio
from harness.results.eval_store import SAMPLES
from harness.results.fileio import read_json
from harness.results.token_store import SCORES_META, ScoresMeta, write_not_measured
from harness.serving.client import ClientConfig, ServerGone


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class ScoringPhase:
    """Runs (or keeps) the scoring passes of one run, one schedule item at a time; see the module docstring."""

    def __init__(self, cfg: Config, run_dir: Path, keys: dict[str, str], pool: ServerPool, manifest: Manifest,
                 interrupts: Interrupts, log: RunLog):
        self.cfg, self.run_dir, self.keys = cfg, run_dir, keys
        self.pool, self.manifest, self.interrupts, self.log = pool, manifest, interrupts, log
        self.reference = cfg.divergence.reference
        self.top_k = cfg.divergence.top_k

    @property
    def ref_dir(self) -> Path:
        return self.run_dir / eval_rel_dir(self.reference, 1)

    def dirs(self, items: list[Step]) -> dict[str, list[Path]]:
        """The passes of the schedule ``items`` by side (:func:`harness.orchestrate.schedule.scoring_dirs`):
        ``ref``, ``same`` (the floor first) and ``other`` (the compared pass first), as directories."""
        return {side: [self.run_dir / d for d in rels]
                for side, rels in scoring_dirs(items, self.reference, self.keys).items()}

    def _scored_on(self, launch_id: str) -> str | None:
        """The pass (its directory) already scored on launch ``launch_id`` in this run, if any."""
        for rel, rec in (self.manifest.data.get("scoring") or {}).items():
            if isinstance(rec, dict) and rec.get("launch") == launch_id and rec.get("status") == "ok":
                return str(rel)
        return None

    def current(self, item: Step) -> bool:
        """Whether ``item``'s pass is on disk, whole (not partial, no request error), and scored the same reference
        texts at the same ``top_k`` against the reference pass as it is now."""
        ref_scores = None if item.scoring == "ref" else self.ref_dir
        out = fileio.check_dir(self.run_dir / item.rel_dir)  # a planted link on the way: refused, named
        try:
            meta = read_json(out / SCORES_META)
            ref = read_json(ref_scores / SCORES_META) if ref_scores is not None else None
        except (OSError, ValueError):
            return False
        if ref is not None and meta.get("status") == "ok" and (
                meta.get("reference_pass_id") != ref.get("pass_id")
                or meta.get("questions_planned", ref.get("questions")) != ref.get("questions")):
            return False  # the reference pass was scored again, or resumed with more questions, since
        return (not meta.get("transient") and not meta.get("partial") and not meta.get("errors")
                and meta.get("requested_top_k") == self.top_k
                and meta.get("reference_sha256") == _sha256(self.ref_dir / SAMPLES)
                # the reference pass by its place in the run directory, so a moved or copied run resumes
                and meta.get("reference_pass") == self._rel(ref_scores))

    def _rel(self, ref_scores: Path | None) -> str | None:
        return None if ref_scores is None else ref_scores.relative_to(self.run_dir).as_posix()

    def score(self, item: Step, launch: Launch) -> None:
        """Score ``item``'s pass on ``launch`` (the schedule's launch for it)."""
        assert item.scoring is not None
        cfg, out = self.cfg, fileio.check_dir(self.run_dir / item.rel_dir)
        ref_eval = self.ref_dir
        ref_scores = None if item.scoring == "ref" else self.ref_dir
        texts = _sha256(ref_eval / SAMPLES)
        engine = launch.engine
        what = {"ref": "reference pass", "ab": "compared pass", "launch": "pass on another launch",
                "aa": f"{self.reference.upper()}/{self.reference.upper()} floor"}[item.scoring]
        twin = self._scored_on(launch.id) if item.scoring == "launch" else None
        if twin is not None and twin != item.rel_dir:  # one launch, one pass: a second adds no launch's noise
            why = f"launch {launch.id} was scored already ({twin}): one pass per launch"
            self.log.say(f"scoring {item.rel_dir}: skipped, {why}")
            write_not_measured(out, why, {"pass": item.scoring, "launch": launch.id, "requested_top_k": self.top_k,
                                          "reference_sha256": texts, "reference_pass": self._rel(ref_scores),
                                          "same_launch_as": twin})
            return
        launch.passes += 1
        self.log.detail(f"scoring {item.rel_dir} ({what}, arm {item.arm_key}, launch {launch.id}) on {engine.url}")
        meta: ScoresMeta = {"pass": item.scoring, "arm": item.arm_key, "role": item.role, "launch": launch.id,
                             "engine": engine.kind, "simulated": engine.simulated, "reference": self.reference,
                             "reference_sha256": texts, "reference_pass": self._rel(ref_scores)}
        record: ScoringRecord = {"pass": item.scoring, "arm": item.arm_key, "role": item.role, "launch": launch.id,
                                 "status": "running"}
        scoring = {**(self.manifest.data.get("scoring") or {}), item.rel_dir: record}
        self.manifest.record("scoring", scoring)
        ccfg = ClientConfig.of(cfg.client, url=engine.url, api=engine.api)
        opts = ScoringOptions(top_k=self.top_k, parallel=cfg.divergence.parallel, batch=cfg.divergence.batch,
                              reference_scores=ref_scores, progress=cfg.progress, abort_check=engine.alive,
                              meta=meta)
        try:
            result = self.interrupts.run_async(score_pass_async(ref_eval, ccfg, out, opts))
        except Interrupted:
            record["status"] = "interrupted"
            self.manifest.record("scoring", scoring)
            raise
        except ServerGone as e:  # the caller stops the server and the run (exit 4): the partial pass is kept
            record.update({"status": "failed", "reason": str(e)})
            self.manifest.record("scoring", scoring)
            raise
        record.update({"status": result.get("status"), "reason": result.get("reason"),
                       "wall_s": result.get("wall_s"), "questions": result.get("questions"),
                       "tokens": result.get("tokens"), "errors": result.get("errors")})
        self.manifest.record("scoring", scoring)
        if result.get("status") == "ok":
            self.log.say(f"  scoring {item.rel_dir} ({what}, arm {item.arm_key}, launch {launch.id}): "
                         f"{result.get('tokens')} tokens of {result.get('questions')} questions "
                         f"scored in {result.get('wall_s', 0.0):.1f} s, errors {result.get('errors')}")
            if cfg.divergence.routing:  # the same launch's routed experts of the same tokens
                route_launch(cfg, engine, item.arm_key, out, self.ref_dir, meta, self.interrupts, self.log)
        else:
            self.log.say(f"  scoring {item.rel_dir} ({what}): not measured: {result.get('reason')}")
