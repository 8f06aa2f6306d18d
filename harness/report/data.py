"""Gather what a report shows from stored files: comparison.json, manifest.json, the eval directories.

Everything here reads defensively: a field that is missing or of an unexpected shape is shown as what it
is (or left out), never a crash, because the report is most needed when a run went wrong.
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeGuard

from harness.report import views
from harness.report.texts import first_difference, split_at, word_end
from harness.results import schema
from harness.results.eval_store import load_eval
from harness.results.prompt_store import eval_prompts
from harness.results.records import JSON, JSONObject
from harness.results.schema import Comparison, EvalMeta, EvalSummary, SampleRecord
from harness.tasks.gsm8k import question_from_prompt
from harness.util.cmdline import command_line, redact_command, shell_command
from harness.util.ggml import TYPE_FLAGS, named
from harness.util.redact import redact_env

#: At most this many flipped questions are listed (a broken arm can flip most of the set).
MAX_FLIPS = 600
#: Model outputs longer than this are cut in the page (the full text stays in samples.jsonl).
MAX_OUTPUT_CHARS = 4000


# ------------------------------------------------------------------------------------------ stored documents
def load_comparison(root: Path) -> Comparison | None:
    """``root/comparison.json``, or None when there is none. A comparison of another schema_version is
    refused (SchemaError): a report of a misread file would be worse than none."""
    path = Path(root) / schema.COMPARISON_FILE
    return schema.load_comparison(path) if path.exists() else None


def load_manifest(root: Path) -> dict[str, Any]:
    """``root/manifest.json`` of a run, or {} for a comparison directory (SchemaError as above)."""
    path = Path(root) / schema.MANIFEST_FILE
    return schema.load_manifest(path) if path.exists() else {}


def arm_names(c: Comparison) -> dict[str, str]:
    """The arms' names, as the comparison's writer recorded them ("A" / "B" when it recorded none)."""
    names = c.arm_names
    return {"a": names.a if names else "A", "b": names.b if names else "B"}


# ------------------------------------------------------------------------------------------ helpers
def obj(v: Any) -> JSONObject:
    """``v`` if it is a JSON object, else an empty one (stored files are read defensively for display)."""
    return v if isinstance(v, dict) else {}


def as_text(v: Any) -> str:
    """A value as display text: scalars as they are, containers as indented JSON."""
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    if isinstance(v, bool | int):
        return str(v)
    if isinstance(v, float):
        return f"{v:.6g}"
    return json.dumps(v, indent=2, ensure_ascii=False, default=str, sort_keys=False)


def is_block(v: Any) -> bool:
    return isinstance(v, dict | list) or (isinstance(v, str) and ("\n" in v or len(v) > 120))


def kv_rows(d: Any, skip: Iterable[str] = ()) -> list[views.KvRow]:
    """[{key, text, block}] of a dict (or of a list, by position)."""
    skip = set(skip)
    if isinstance(d, dict):
        items = [(str(k), v) for k, v in d.items() if k not in skip]
    elif isinstance(d, list):
        items = [(str(i), v) for i, v in enumerate(d)]
    elif d is None:
        return []
    else:
        items = [("value", d)]
    return [{"key": k, "text": as_text(v), "block": is_block(v)} for k, v in items]


def fmt_time(ts: Any) -> str:
    if isinstance(ts, int | float) and not isinstance(ts, bool) and ts > 0:
        return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(ts))
    return as_text(ts)


def resolve_dir(p: Any, base: Path) -> Path | None:
    """An eval directory recorded in comparison.json, found again even if the run dir was moved."""
    if not p:
        return None
    path = Path(str(p))
    cands = [path, base / path]
    parts = path.parts
    if "evals" in parts:
        cands.append(base.joinpath(*parts[parts.index("evals"):]))
    for c in cands:
        if (c / "eval.json").exists():
            return c
    return None


# ------------------------------------------------------------------------------------------ evals
class LoadedEval:
    """One stored eval: meta, summary and samples by index."""

    def __init__(self, role: str, repeat: int, recorded: str, path: Path | None, base: Path | None = None):
        self.role, self.repeat, self.recorded, self.path, self.base = role, repeat, recorded, path, base
        self.meta: EvalMeta = {}  # eval.json and summary.json, read defensively for display
        self.summary: EvalSummary = {}
        self.samples: dict[int, SampleRecord] = {}
        self.error: str | None = None
        if path is None:
            self.error = f"eval directory not found: {recorded}"
            return
        try:
            meta, samples, summary = load_eval(path)
            self.meta, self.summary = meta.copy(), summary.copy() if summary is not None else EvalSummary()
            self.samples = {s.index: s for s in samples}
        except Exception as e:  # noqa: BLE001 - shown in the report instead
            self.error = f"cannot read {path}: {e}"

    def server(self) -> views.ServerView:
        """Which server answered: its URL, build and version, as the eval recorded them."""
        facts = self.meta.get("server") or schema.ServerFacts()
        return {"url": self.meta.get("url"), "build": facts.get("build"), "version": facts.get("version"),
                "model_path": facts.get("model_path")}

    def row(self, label: str) -> views.RunRow:
        s = self.summary
        lat = [r.latency_s for r in self.samples.values() if isinstance(r.latency_s, int | float)]
        q = statistics.quantiles(lat, n=10) if len(lat) >= 2 else None
        shown = str(self.path or self.recorded)
        if self.path is not None and self.base is not None:
            with contextlib.suppress(ValueError):
                shown = str(self.path.resolve().relative_to(self.base.resolve()))
        return {"role": self.role, "label": label, "repeat": self.repeat, "dir": shown, "error": self.error,
                "accuracy": s.get("accuracy"), "correct": s.get("correct"),
                "answered": s.get("answered", s.get("n")), "n": s.get("n"), "invalid": s.get("invalid"),
                "errors": s.get("errors"), "latency_s": s.get("latency_s"),
                "throughput": s.get("output_throughput"), "output_tokens": s.get("output_tokens"),
                "p50": statistics.median(lat) if lat else None, "p90": q[-1] if q else None,
                "complete": s.get("complete"), "resumed": s.get("resumed"), "server": self.server()}


def load_runs(c: Comparison, base: Path) -> dict[str, list[LoadedEval]]:
    out: dict[str, list[LoadedEval]] = {"a": [], "b": [], "aa": []}
    for role, arm in (("a", c.arms.a), ("b", c.arms.b)):
        for k, d in enumerate(arm.dirs, 1):
            out[role].append(LoadedEval(role, k, str(d), resolve_dir(d, base), base))
    for k, d in enumerate(c.aa_dirs, 1):
        out["aa"].append(LoadedEval("aa", k, str(d), resolve_dir(d, base), base))
    return out


# ------------------------------------------------------------------------------------------ questions
def question_texts(runs: list[LoadedEval], indices: set[int]) -> dict[int, str]:
    """Question text by index: from the dataset file the eval recorded, else from the stored prompts."""
    out: dict[int, str] = {}
    if not indices:
        return out
    for r in runs:
        src = r.meta.get("dataset_source")
        if isinstance(src, str) and src and not src.startswith("hf:") and Path(src).is_file():
            try:
                with Path(src).open(encoding="utf-8") as f:
                    for i, line in enumerate(f):
                        if i in indices and line.strip():
                            q = json.loads(line).get("question")
                            if isinstance(q, str):
                                out[i] = q
            except (OSError, json.JSONDecodeError, AttributeError):
                out.clear()
            if out:
                return out
    for r in runs:
        if r.path is None:
            continue
        for row in eval_prompts(r.path):
            idx, p = row["index"], row["prompt"]
            if idx in indices and idx not in out:
                q = question_from_prompt(p)
                out[idx] = p if q is None else q
        if len(out) == len(indices):
            break
    return out


def _cut(s: str | None) -> tuple[str, bool]:
    if s is None:
        return "", False
    return (s[:MAX_OUTPUT_CHARS], True) if len(s) > MAX_OUTPUT_CHARS else (s, False)


def _answer(rec: SampleRecord | None, repeat: int) -> views.Answer:
    if rec is None:
        return {"repeat": repeat, "missing": True, "correct": None, "pred": "—", "output": "", "cut": False,
                "finish": None, "error": None}
    out, cut = _cut(rec.output)
    pred = "invalid" if rec.invalid else ("—" if rec.pred is None else str(rec.pred))
    return {"repeat": repeat, "missing": False, "correct": rec.correct, "pred": pred, "output": out, "cut": cut,
            "finish": rec.finish_reason, "error": rec.error}


def _readable(runs: dict[str, list[LoadedEval]]) -> tuple[list[LoadedEval], list[LoadedEval], list[int]]:
    """Arm A's and arm B's evals that could be read, and the question indices (empty: nothing to pair)."""
    a_runs, b_runs = [r for r in runs["a"] if r.error is None], [r for r in runs["b"] if r.error is None]
    if not a_runs or not b_runs:
        return [], [], []
    return a_runs, b_runs, [int(i) for i in (a_runs[0].meta.get("indices") or sorted(a_runs[0].samples))]


def _means(sa: list[SampleRecord | None], sb: list[SampleRecord | None]) -> tuple[float, float] | None:
    """Each arm's share of right answers on one question; None when it is dropped from the paired analysis
    (a request error or a missing answer)."""
    if any(s is None or s.correct is None for s in sa + sb):
        return None
    return sum(bool(s and s.correct) for s in sa) / len(sa), sum(bool(s and s.correct) for s in sb) / len(sb)


def flipped_questions(c: Comparison, runs: dict[str, list[LoadedEval]]) -> tuple[list[views.FlipRow], int]:
    """Questions on which the arms disagree: per-question mean score differs, or repeat 1 flipped; (at most
    MAX_FLIPS rows, how many there are)."""
    a_runs, b_runs, idx = _readable(runs)
    flips_r1 = set(c.flips)
    chosen: list[tuple[int, str, float]] = []
    for i in idx:
        means = _means([r.samples.get(i) for r in a_runs], [r.samples.get(i) for r in b_runs])
        if means is None:
            continue
        ma, mb = means
        if ma == mb and i not in flips_r1:
            continue
        cat = "b" if (ma == 0 and mb == 1) else "a" if (ma == 1 and mb == 0) else "mixed"
        chosen.append((i, cat, mb - ma))
    total = len(chosen)
    # Consistent flips first (B fixed, then B broke), then the unstable ones by how far the arms differ.
    order = {"b": 0, "a": 1, "mixed": 2}
    chosen.sort(key=lambda t: (order[t[1]], -abs(t[2]), t[0]))
    chosen = chosen[:MAX_FLIPS]
    texts = question_texts(a_runs + b_runs, {i for i, _, _ in chosen})
    rows: list[views.FlipRow] = []
    for i, cat, _ in chosen:
        rec_a = next((r.samples.get(i) for r in a_runs), None)
        # Lead with a repeat in which the arms disagree, so the two outputs shown first differ in outcome.
        k = next((k for k, (ra, rb) in enumerate(zip(a_runs, b_runs, strict=False))
                  if ra.samples[i].correct != rb.samples[i].correct), 0)
        a_ord = a_runs[k:k + 1] + a_runs[:k] + a_runs[k + 1:]
        b_ord = b_runs[k:k + 1] + b_runs[:k] + b_runs[k + 1:]
        answers_a = [_answer(r.samples.get(i), r.repeat) for r in a_ord]
        answers_b = [_answer(r.samples.get(i), r.repeat) for r in b_ord]
        _mark_parting(answers_a[0], answers_b[0])
        right_a, right_b = (sum(bool(r.samples[i].correct) for r in rs) for rs in (a_runs, b_runs))
        rows.append({"index": i, "cat": cat, "question": texts.get(i, "(question text not available)"),
                     "label": rec_a.label if rec_a is not None else "—",
                     "score_a": f"{right_a}/{len(a_runs)}", "score_b": f"{right_b}/{len(b_runs)}",
                     "mean_a": right_a / len(a_runs), "mean_b": right_b / len(b_runs),
                     "a": answers_a, "b": answers_b})
    return rows, total


def _mark_parting(a: views.Answer, b: views.Answer) -> None:
    """Split the two outputs shown first at the word where they part (``split``: before, mark, after)."""
    d = first_difference(a["output"], b["output"])
    for ans in (a, b):
        text = ans["output"]
        ans["split"] = (split_at(text, d, word_end(text, d) if d < len(text) else d, context=MAX_OUTPUT_CHARS)
                        if d is not None else None)


#: Outcome of a question across the two arms (the question browser's filter)
OUTCOMES = {"b": "only B right", "a": "only A right", "mixed": "mixed across repeats", "both": "both right",
            "neither": "both wrong", "dropped": "not paired (request error)"}
#: Outputs in the question browser are cut to this many characters (the page holds every question)
BROWSER_OUTPUT_CHARS = 1500


def all_questions(c: Comparison, runs: dict[str, list[LoadedEval]]) -> list[views.QuestionRow]:
    """Every question of the comparison, for the report's question browser: index, outcome (:data:`OUTCOMES`),
    question, label, and per arm each repeat's parsed answer and correctness with repeat 1's output. Short
    keys: the page embeds all of them as JSON."""
    a_runs, b_runs, idx = _readable(runs)
    texts = question_texts(a_runs + b_runs, set(idx))
    out: list[views.QuestionRow] = []
    for i in idx:
        sa, sb = [r.samples.get(i) for r in a_runs], [r.samples.get(i) for r in b_runs]
        means = _means(sa, sb)
        cat = ("dropped" if means is None else "both" if means == (1, 1) else "neither" if means == (0, 0)
               else "b" if means == (0, 1) else "a" if means == (1, 0) else "mixed")
        first = next((s for s in sa + sb if s is not None), None)

        def arm(samples: list[SampleRecord | None]) -> views.BrowserArm:
            s0 = samples[0]
            text = (s0.output or "") if s0 is not None else ""
            return {"p": [_answer(s, k + 1)["pred"] for k, s in enumerate(samples)],
                    "ok": [None if s is None else s.correct for s in samples],
                    "o": text[:BROWSER_OUTPUT_CHARS] + ("…" if len(text) > BROWSER_OUTPUT_CHARS else "")}

        out.append({"i": i, "c": cat, "q": texts.get(i, ""), "l": first.label if first is not None else "",
                    "a": arm(sa), "b": arm(sb)})
    return out


# ------------------------------------------------------------------------------------------ arms
def _find_arm_key(role: str, manifest: Mapping[str, Any], names: dict[str, str]) -> str | None:
    arms = obj(manifest.get("arms"))
    key = obj(obj(manifest.get("config")).get("experiment")).get(role)
    if isinstance(key, str) and key in arms:
        return key
    for k, v in arms.items():
        if isinstance(v, dict) and v.get("name") == names.get(role):
            return str(k)
    keys = list(arms)
    pos = 0 if role == "a" else 1
    return str(keys[pos]) if len(keys) > pos else None


def _checks(v: Any) -> list[views.CheckRow]:
    if not isinstance(v, list):
        return []
    out: list[views.CheckRow] = []
    for ch in v:
        if not isinstance(ch, dict):
            out.append({"name": as_text(ch), "kind": "", "passed": None, "expected": "", "found": "",
                        "evidence": "", "evidence_block": False, "extra": []})
            continue
        ev = ch.get("evidence")
        known = {"name", "kind", "passed", "expected", "found", "evidence"}
        out.append({"name": as_text(ch.get("name")), "kind": as_text(ch.get("kind")) if ch.get("kind") else "",
                    "passed": ch.get("passed"), "expected": as_text(ch.get("expected")),
                    "found": as_text(ch.get("found")), "evidence": as_text(ev) if ev is not None else "",
                    "evidence_block": is_block(ev),
                    "extra": kv_rows({k: w for k, w in ch.items() if k not in known})})
    return out


def _line_key(line: str) -> str:
    """A command line as compared between arms: ``--port N`` (chosen per launch by the harness) is ``--port``."""
    text = line.rstrip(" \\").strip()
    return "--port" if text.startswith("--port ") or text.startswith("--port=") else text


def _launch(arm: JSONObject) -> tuple[str, list[views.TextRow], list[views.KvRow]]:
    """An arm's server command (shell form, environment first, redacted), its environment and the launch's
    other recorded fields."""
    launch = arm.get("launch")
    env: Any = None
    argv: Any = None
    other: list[views.KvRow] = []
    if isinstance(launch, dict):
        argv = launch.get("argv", launch.get("command", launch.get("cmd")))
        env = launch.get("env", launch.get("env_delta"))
        other = kv_rows(launch, skip=("argv", "command", "cmd", "env", "env_delta"))
    elif launch is not None:
        other = kv_rows(launch)
    env_rows: list[views.TextRow] = []
    if isinstance(env, dict):
        env_rows = [{"key": k, "text": v} for k, v in redact_env({str(k): as_text(v) for k, v in env.items()}).items()]
    command = shell_command(argv if isinstance(argv, str | list | tuple) else None,
                            env if isinstance(env, dict | list) else None)
    return command, env_rows, other


def _instances(launches: JSON) -> list[views.InstanceRow]:
    if not isinstance(launches, list):
        return []
    return [{"id": as_text(i.get("id")), "url": as_text(i.get("url")),
             "probe": as_text(i.get("probe")) if i.get("probe") is not None else ""}
            if isinstance(i, dict) else {"id": as_text(i), "url": "", "probe": ""} for i in launches]


def arm_views(manifest: Mapping[str, Any], names: dict[str, str]) -> list[views.ArmView]:
    arms = obj(manifest.get("arms"))
    found: list[tuple[str, str, JSONObject]] = []  # (role, key, the manifest's record of the arm)
    for role in ("a", "b"):
        key = _find_arm_key(role, manifest, names)
        arm = arms.get(key) if key is not None else None
        if key is not None and isinstance(arm, dict):
            found.append((role, key, arm))
    launches = [_launch(arm) for _, _, arm in found]
    # Mark the command lines that the other arm's command does not have (the port the harness picked for each
    # launch is not a difference between the arms).
    norm = [{_line_key(ln) for ln in command.splitlines()} for command, _, _ in launches]
    known = {"name", "side", "launch", "static_checks", "live_checks", "instances", "launches"}
    out: list[views.ArmView] = []
    for j, ((role, key, arm), (command, env_rows, other)) in enumerate(zip(found, launches, strict=True)):
        theirs = norm[1 - j] if len(found) == 2 else None
        lines: list[views.CommandLine] = [
            {"text": ln, "differs": theirs is not None and _line_key(ln) not in theirs}
            for ln in command.splitlines()]
        out.append({"role": role, "key": key, "name": str(arm.get("name") or names.get(role) or key),
                    "side": arm.get("side"), "command": command, "env": env_rows, "launch_other": other,
                    "static_checks": _checks(arm.get("static_checks")),
                    "live_checks": _checks(arm.get("live_checks")),
                    "instances": _instances(arm.get("launches", arm.get("instances"))),
                    "extra": kv_rows({k: v for k, v in arm.items() if k not in known}),
                    "command_lines": lines})
    return out


def diff_view(manifest: Mapping[str, Any], names: dict[str, str]) -> views.DiffView | None:
    ad = manifest.get("arm_diff")
    if not isinstance(ad, dict):
        return None
    key_a, key_b = _find_arm_key("a", manifest, names), _find_arm_key("b", manifest, names)
    dis = ad.get("disallowed") or []
    dis_keys: set[Any] = {d.get("key") if isinstance(d, dict) else d for d in dis}
    rows: list[views.DiffRow] = []
    for d in ad.get("differences") or []:
        if not isinstance(d, dict):
            rows.append({"key": as_text(d), "a": "", "b": "", "others": [], "allowed": str(d) not in dis_keys})
            continue
        vals = obj(d.get("values"))
        if str(d.get("key", "")).rsplit(".", 1)[-1] in TYPE_FLAGS:  # llama.cpp's KV types: ids, shown named
            vals = {k: named(v) for k, v in vals.items()}
        others: list[views.TextRow] = [{"key": str(k), "text": as_text(v)} for k, v in vals.items()
                                       if k not in (key_a, key_b)]
        others += kv_rows({k: v for k, v in d.items() if k not in ("key", "values")})
        rows.append({"key": as_text(d.get("key")),
                     "a": as_text(vals.get(key_a)) if key_a in vals else "(not set)",
                     "b": as_text(vals.get(key_b)) if key_b in vals else "(not set)",
                     "others": others, "allowed": d.get("key") not in dis_keys})
    keys = [r["key"] for r in rows]
    if not rows:
        sentence = "No difference was recorded between the two arms' launches."
    elif not dis_keys - {None}:
        sentence = "The arms differ only in: " + ", ".join(keys) + " (each declared as an allowed difference)."
    else:
        sentence = ("The arms differ in something the experiment does not allow: "
                    + ", ".join(str(k) for k in dis_keys if k) + ".")
    return {"rows": rows, "sentence": sentence, "ok": not (dis_keys - {None}),
            "allowed": [as_text(a) for a in ad.get("allowed") or []]}


# ------------------------------------------------------------------------------------------ provenance
def provenance_rows(manifest: Mapping[str, Any], runs: dict[str, list[LoadedEval]],
                    c: Comparison | None) -> list[views.KvRow]:
    rows: list[views.KvRow] = []
    prov = manifest.get("provenance")
    rows += kv_rows(prov)
    ds = manifest.get("dataset")
    if isinstance(ds, dict):
        rows += [{"key": f"dataset {r['key']}", "text": r["text"], "block": r["block"]} for r in kv_rows(ds)]
    first = next((r for rs in runs.values() for r in rs if r.error is None), None)
    if first is not None and not isinstance(ds, dict):
        for k in ("dataset_source", "dataset_sha256", "dataset_canonical"):
            if k in first.meta:
                rows.append({"key": k.replace("_", " "), "text": as_text(first.meta[k]), "block": False})
    if first is not None:
        for key in ("recipe", "stop", "api"):
            if key in first.meta:
                v = first.meta[key]
                rows.append({"key": key, "text": as_text(v), "block": is_block(v)})
    for k in ("alpha", "seed", "n_resamples", "delta_ci_method", "test", "max_error_rate", "table_source"):
        v = getattr(c, k, None)
        if v is not None:
            rows.append({"key": f"statistics {k.replace('_', ' ')}", "text": as_text(v), "block": False})
    for i, s in enumerate(manifest.get("sessions") or [], 1):
        if isinstance(s, dict):
            txt = (f"{fmt_time(s.get('started'))} → {fmt_time(s.get('ended')) if s.get('ended') else 'not ended'}"
                   f"{' (resume)' if s.get('resume') else ''}; pid {s.get('pid')}; argv: "
                   + command_line(s["argv"] if isinstance(s.get("argv"), list) else []))
            rows.append({"key": f"session {i}", "text": txt, "block": False})
    if manifest.get("status") is not None:
        rows.append({"key": "run status", "text": as_text(manifest["status"]), "block": is_block(manifest["status"])})
    return rows


def finite(x: Any) -> TypeGuard[float]:
    """``x`` is a number (not a bool, not NaN)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and not math.isnan(x)


# ------------------------------------------------------------------------------------------ reproduce
def _abh_argv(recorded: Iterable[Any]) -> list[str]:
    """An ``abh`` command line as recorded (``abh run`` records its argv as ``["abh run", ...]``)."""
    argv = [str(a) for a in recorded]
    if argv and argv[0] == "abh run":
        return ["abh", "run", *argv[1:]]
    if len(argv) >= 2 and Path(argv[0]).name == "abh" and argv[1] == "run":
        return ["abh", "run", *argv[2:]]
    return argv


def abh_command(c: Comparison | None, manifest: Mapping[str, Any]) -> str | None:
    """The ``abh`` command that produced the comparison, shell-quoted and redacted: the comparison's own record,
    else the run's first session (resumes repeat it)."""
    import shlex

    argv: list[str] | None = list(c.command) if c is not None and c.command else None
    if argv is None:
        for session in manifest.get("sessions") or []:
            if isinstance(session, dict) and session.get("argv"):
                argv = _abh_argv(session["argv"])
                break
    return " ".join(shlex.quote(t) for t in redact_command(argv)) if argv else None
