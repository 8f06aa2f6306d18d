"""Compare stored evals of two arms: :func:`compare_dirs` -> :class:`harness.schema.Comparison`.

Pure of any command line (``abh compare`` and ``abh power`` are in :mod:`harness.cli_compare`). Each A or
B directory is one stored eval (``harness.store``); several per arm are repeats.
Questions are aligned by index. Questions whose request errored (or is missing) in any run of either arm
are dropped from the paired analysis — an error is never a wrong answer — and counted; when that share
exceeds ``max_error_rate`` the verdict is ``not_comparable``.

With one run per arm the test is the exact McNemar test. With repeats, Δ is the mean over questions of the
per-question mean score difference and its test the within-question permutation test of arm labels (its
p-value has the floor 1/(R+1) for R permutations and is then written "p < 1/R"); the 2x2 table, McNemar
p and ``flips`` are then those of **repeat 1** of each arm (the first ``--a`` and the first ``--b``), kept
for reading, not for the verdict.

The primary interval of Δ (``delta_ci``, level 1 - α; ``delta_ci_method`` names it):

- one run per arm: Newcombe's paired score interval (``delta_ci_score``). It never has zero width, while
  the paired bootstrap (``delta_ci_bootstrap``, BCa; ``delta_ci_percentile``) collapses to [0, 0] when
  no question is discordant and is too narrow with few discordant pairs — both are still reported;
- repeats: the question-level cluster bootstrap (BCa, ``delta_ci_bootstrap``), unless the per-question
  differences have SE 0 (the bootstrap is then a point): then the Newcombe interval of repeat 1's table.

Equivalence / non-inferiority (``--margin``): one run per arm, the (1 - 2α) Newcombe interval must lie
inside ±margin (:func:`harness.stats.score_tost`; its bounds are ``tost.ci``); with repeats, two one-sided
z-tests on the cluster (question-level) SE of Δ (:func:`harness.stats.tost`), which claim nothing when
that SE is 0. An equivalence verdict never rests on a zero-width interval.

Refused (exit 2): evals of different datasets, recipes or question indices (the first differing field is
named, e.g. ``recipe.num_questions: 1319 vs 100``) and the same eval directory given twice (on both sides,
twice for one arm, or also as ``--aa``).

ψ_AA (A/A discordance) is the mean discordance over all pairs of runs of the same configuration: the A
runs together with the ``--aa`` runs, and the B runs. None when no configuration has two runs.

MDEs (80 % power): ``mde_unpaired`` = 2.8016·sqrt(2p(1-p)/n) at the mean accuracy p; ``mde_paired`` =
2.8016·sqrt(ψ/n) from the (repeat-1) table; ``mde_repeats`` = 2.8016·sqrt(ψ_AA/(n R)) with R the
effective (harmonic-mean) repeats per arm; ``mde_observed`` = 2.8016 × the observed SE of Δ. ``mde`` is
the design's formula (repeats when R > 1 and ψ_AA is known, else paired) or ``mde_observed`` if larger,
so it never claims more power than the data show. Arm accuracies are over the n compared questions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness import exitcodes, schema, stats
from harness.schema import Comparison, EvalMeta, EvalSummary
from harness.store import StoreError, load_eval

KIND = schema.COMPARISON
SCHEMA_VERSION = schema.WRITES[KIND]
IDENTITY_KEYS = ("dataset_sha256", "recipe", "indices")
DEFAULT_MAX_ERROR_RATE = 0.02
_TOST_NAMES = {"Newcombe paired score interval": "Newcombe", "z-test on the standard error of Δ": "z (cluster SE)"}


class CompareError(RuntimeError):
    """The evals cannot be compared (different question sets, recipes or datasets; unreadable dirs)."""


# ------------------------------------------------------------------------------------------ loading
def _load_run(path: Path) -> dict[str, Any]:
    """One eval directory as {dir, meta, summary, scores}: scores[i] is 1/0, or NaN when errored/missing."""
    try:
        meta, samples, summary = load_eval(path)
    except (StoreError, OSError, json.JSONDecodeError) as e:
        raise CompareError(f"cannot read eval {path}: {e}") from None
    missing = [k for k in IDENTITY_KEYS if k not in meta]
    if missing:
        raise CompareError(f"{path}/eval.json lacks {', '.join(missing)}")
    by_index = {s.index: s for s in samples}
    scores = np.full(len(meta["indices"]), np.nan)
    for j, idx in enumerate(meta["indices"]):
        s = by_index.get(idx)
        if s is not None and s.error is None and s.correct is not None:
            scores[j] = 1.0 if s.correct else 0.0
    return {"dir": str(path), "meta": meta, "summary": summary, "scores": scores}


def _short(v: Any, width: int = 40) -> str:
    s = json.dumps(v, sort_keys=True, default=str) if not isinstance(v, str) else v
    return s if len(s) <= width else s[:width - 1] + "…"


def _first_difference(x: Any, y: Any, path: str) -> str | None:
    """The first place where x and y differ, as ``path.key: x vs y`` (None when equal)."""
    if x == y:
        return None
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y), key=str):
            if k not in x or k not in y:
                return (f"{path}.{k}: {_short(x[k]) if k in x else '(absent)'} vs "
                        f"{_short(y[k]) if k in y else '(absent)'}")
            diff = _first_difference(x[k], y[k], f"{path}.{k}")
            if diff:
                return diff
    if isinstance(x, list) and isinstance(y, list):
        if len(x) != len(y):
            return f"{path}: {len(x)} vs {len(y)} entries"
        for i, (u, v) in enumerate(zip(x, y, strict=True)):
            diff = _first_difference(u, v, f"{path}[{i}]")
            if diff:
                return diff
    return f"{path}: {_short(x)} vs {_short(y)}"


def _check_same_questions(runs: Sequence[dict[str, Any]]) -> None:
    ref = runs[0]
    for r in runs[1:]:
        for key in IDENTITY_KEYS:
            diff = _first_difference(ref["meta"].get(key), r["meta"].get(key), key)
            if diff:
                what = {"dataset_sha256": "dataset", "recipe": "recipe", "indices": "question set"}[key]
                raise CompareError(
                    f"refusing to compare: {ref['dir']} and {r['dir']} have a different {what} ({diff}); "
                    "only runs of the same dataset, recipe and question indices are comparable")


def _check_distinct(a_dirs: Sequence[Path], b_dirs: Sequence[Path], aa_dirs: Sequence[Path]) -> None:
    """Refuse an eval directory given twice: comparing a run with itself, or counting it twice as repeats."""
    seen: dict[Path, str] = {}
    for arm, dirs in (("--a", a_dirs), ("--b", b_dirs), ("--aa", aa_dirs)):
        for p in dirs:
            key = Path(p).resolve()
            if key in seen:
                raise CompareError(
                    f"refusing to compare: eval {p} is given twice ({seen[key]} and {arm}); comparing a run "
                    "with itself, or counting it twice as a repeat, is a mistake — give distinct eval directories")
            seen[key] = arm


def _arm_failed(src: Any) -> bool:
    return src.get("failed") is True or src.get("arm_failed") is True or src.get("status") == "failed"


def _side_check_failed(src: Any) -> bool:
    side = src.get("side_check")
    return src.get("side_check_passed") is False or (isinstance(side, dict) and side.get("passed") is False)


def _failures(run: dict[str, Any], arm: str) -> list[str]:
    """Reasons why a run cannot be used, from eval.json / summary.json.

    Recognised: ``failed: true``, ``status: "failed"`` or ``arm_failed: true`` (the arm failed) and
    ``side_check_passed: false`` or ``side_check: {"passed": false}`` (its side assertion failed), in
    either file.
    """
    out: list[str] = []
    for src in (run["meta"], run["summary"] or {}):
        if _arm_failed(src):
            out.append(f"arm {arm} failed ({run['dir']})")
        if _side_check_failed(src):
            out.append(f"side check of arm {arm} failed ({run['dir']})")
    return sorted(set(out))


def failure_exit(meta: EvalMeta, summary: EvalSummary | None) -> int:
    """The exit code ``abh run`` gives the failure an eval records (0 when none): a failed side check is 3
    (side assertion failed), a failed arm 4 (server failure)."""
    srcs = (meta, summary or {})
    if any(_side_check_failed(s) for s in srcs):
        return exitcodes.SIDE_ASSERTION_FAILED
    if any(_arm_failed(s) for s in srcs):
        return exitcodes.SERVER_FAILURE
    return exitcodes.OK


def _is_simulated(run: dict[str, Any]) -> bool:
    return bool(run["meta"].get("simulated")) or bool((run["summary"] or {}).get("simulated"))


def _pair(lo_hi: tuple[float, float] | tuple[np.ndarray, np.ndarray]) -> list[float]:
    return [float(lo_hi[0]), float(lo_hi[1])]


# ------------------------------------------------------------------------------------------ comparison
def compare_dirs(a_dirs: Sequence[Path], b_dirs: Sequence[Path], margin: float | None = None,
                 alpha: float = 0.05, seed: int = 0, *, aa_dirs: Sequence[Path] = (),
                 max_error_rate: float = DEFAULT_MAX_ERROR_RATE, min_effect: float | None = None,
                 n_resamples: int = 10_000, failures: Sequence[str] = ()) -> Comparison:
    """The comparison of arm B against arm A (the content of comparison.json; proportions as fractions).

    ``margin`` (fraction) enables TOST equivalence / non-inferiority; ``min_effect`` (fraction) is the
    declared practical effect size a verdict needs; ``failures`` are extra not-comparable reasons from
    the caller (e.g. a runner that knows an arm failed).
    """
    if not a_dirs or not b_dirs:
        raise CompareError("need at least one eval directory per arm (--a and --b)")
    _check_distinct(a_dirs, b_dirs, aa_dirs)
    a_runs = [_load_run(Path(p)) for p in a_dirs]
    b_runs = [_load_run(Path(p)) for p in b_dirs]
    aa_runs = [_load_run(Path(p)) for p in aa_dirs]
    _check_same_questions(a_runs + b_runs + aa_runs)
    indices = np.asarray(a_runs[0]["meta"]["indices"])
    n_total = int(indices.size)

    a_mat = np.vstack([r["scores"] for r in a_runs])
    b_mat = np.vstack([r["scores"] for r in b_runs])
    keep = ~(np.isnan(a_mat).any(axis=0) | np.isnan(b_mat).any(axis=0))
    n = int(keep.sum())
    dropped = n_total - n
    error_rate = dropped / n_total if n_total else 0.0
    per_run_errors = {r["dir"]: float(np.isnan(r["scores"]).mean()) if n_total else 0.0
                      for r in a_runs + b_runs}
    if n < 2:
        raise CompareError(f"only {n} question(s) answered by every run of both arms; nothing to compare")

    A = a_mat[:, keep]
    B = b_mat[:, keep]
    ra, rb = A.shape[0], B.shape[0]
    repeats = ra > 1 or rb > 1
    am = stats.per_question_means(A)
    bm = stats.per_question_means(B)
    d = bm - am
    delta = float(d.mean())

    def arm_block(mat: np.ndarray, runs: list[dict[str, Any]], s: int) -> dict[str, Any]:
        m = mat.mean(axis=0)
        acc = float(m.mean())
        return {
            "accuracy": acc,
            "wilson": _pair(stats.wilson_interval(acc * n, n, alpha)),
            "bootstrap": _pair(stats.accuracy_bootstrap_ci(m, alpha, n_resamples, seed=s)),
            "repeats": [float(x) for x in mat.mean(axis=1)],
            "n_runs": int(mat.shape[0]),
            "dirs": [r["dir"] for r in runs],
        }

    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, 2**32, size=6)
    table = stats.paired_table(A[0].astype(bool), B[0].astype(bool))
    flips = [int(i) for i in indices[keep][A[0] != B[0]]]
    mc_p = float(stats.mcnemar_exact(table.a_only, table.b_only))
    mc_midp = float(stats.mcnemar_midp(table.a_only, table.b_only))

    ci_bca = _pair(stats.paired_bootstrap_ci(am, bm, alpha, n_resamples, "bca", seed=int(seeds[2])))
    ci_pct = _pair(stats.paired_bootstrap_ci(am, bm, alpha, n_resamples, "percentile", seed=int(seeds[2])))
    ci_newcombe = _pair(stats.newcombe_paired_ci(table.both, table.a_only, table.b_only, table.neither, alpha))
    se = float(np.std(d, ddof=1) / np.sqrt(n))
    if repeats:
        perm = stats.permutation_test(A, B, n_permutations=n_resamples, seed=int(seeds[3]))
        p_value, test = perm["p_value"], "within_question_permutation"
        p_floor: float | None = 1.0 / (n_resamples + 1)
        ci_score = None
        if se > 0:
            delta_ci, ci_method = ci_bca, "cluster bootstrap over questions, BCa"
        else:   # every question has the same difference: the bootstrap is a point, not an interval
            delta_ci = ci_newcombe
            ci_method = "Newcombe score interval of repeat 1 (cluster bootstrap degenerate: SE of Δ is 0)"
    else:
        p_value, test, p_floor = mc_p, "mcnemar_exact", None
        ci_score = ci_newcombe
        delta_ci, ci_method = ci_newcombe, "Newcombe paired score interval"

    psi = table.psi
    aa_mat = np.vstack([r["scores"] for r in aa_runs])[:, keep] if aa_runs else np.empty((0, n))
    psi_aa = stats.psi_aa(np.vstack([A, aa_mat]), B)
    r_eff = stats.effective_repeats(ra, rb)
    noise = stats.noise_band(psi_aa, n, ra, rb, alpha) if psi_aa is not None else None
    p_pool = float((am.mean() + bm.mean()) / 2)
    mde_unp = stats.mde_unpaired(n, p_pool, alpha)
    mde_par = stats.mde_paired(n, psi, alpha) if psi > 0 else 0.0
    mde_rep = stats.mde_repeats(n, psi_aa, r_eff, alpha) if psi_aa is not None else None
    mde_obs = stats.z_sum(alpha) * se
    # never claim more power than the data show: the design formula, or the observed SE if larger
    # With no observed discordance the ψ formulas say 0; no test detects fewer than k discordant pairs.
    mde = max(mde_rep if (repeats and mde_rep is not None) else mde_par, mde_obs, stats.mde_floor(n, alpha))

    tost_res = None
    if margin is not None:
        tost_res = (stats.tost(d, margin, alpha) if repeats else
                    stats.score_tost(table.both, table.a_only, table.b_only, table.neither, margin, alpha))

    fails = list(failures)
    for r in a_runs + aa_runs:
        fails += _failures(r, "A")
    for r in b_runs:
        fails += _failures(r, "B")
    v = stats.decide(delta=delta, p_value=p_value, alpha=alpha, mde=mde, margin=margin,
                     equivalence_p=tost_res["p_equivalence"] if tost_res else None, min_effect=min_effect,
                     failures=fails, error_rate=error_rate, max_error_rate=max_error_rate, p_floor=p_floor,
                     equivalence_ci=tost_res["ci"] if tost_res else None,
                     equivalence_method=_TOST_NAMES[tost_res["method"]] if tost_res else None)

    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "simulated": any(_is_simulated(r) for r in a_runs + b_runs + aa_runs),
        "n": n,
        "n_total": n_total,
        "dropped_errors": dropped,
        "error_rate": error_rate,
        "error_rate_per_run": per_run_errors,
        "max_error_rate": max_error_rate,
        "error_rate_exceeded": bool(error_rate > max_error_rate),
        "failures": sorted(set(fails)),
        "alpha": alpha,
        "seed": seed,
        "n_resamples": n_resamples,
        "dataset_sha256": a_runs[0]["meta"].get("dataset_sha256"),
        "recipe": a_runs[0]["meta"].get("recipe"),
        "arms": {"a": arm_block(A, a_runs, int(seeds[0])), "b": arm_block(B, b_runs, int(seeds[1]))},
        "aa_dirs": [r["dir"] for r in aa_runs],
        "table_source": "repeat 1 of each arm" if repeats else "single run per arm",
        **table.as_dict(),
        "delta": delta,
        "delta_se": se,
        "delta_ci": delta_ci,
        "delta_ci_method": ci_method,
        "delta_ci_bootstrap": ci_bca,
        "delta_ci_percentile": ci_pct,
        "delta_ci_score": ci_score,
        "delta_ci_unpaired": _pair(stats.unpaired_diff_ci(am.sum(), n, bm.sum(), n, alpha)),
        "test": test,
        "p_value": float(p_value),
        "p_value_floor": p_floor,
        "p_value_at_floor": bool(p_floor is not None and p_value <= p_floor * (1 + 1e-9)),
        "mcnemar_p": mc_p,
        "mcnemar_midp": mc_midp,
        "psi": psi,
        "psi_aa": psi_aa,
        "noise_band": [-noise, noise] if noise is not None else None,
        "repeats_effective": r_eff,
        "mde": mde,
        "mde_unpaired": mde_unp,
        "mde_paired": mde_par,
        "mde_repeats": mde_rep,
        "mde_observed": mde_obs,
        "margin": margin,
        "min_effect": min_effect,
        "tost": tost_res,
        "verdict": v.word,
        "verdict_reason": v.reason,
        "flips": flips,
    }


def _pp(x: float | None, signed: bool = True) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:+.2f}" if signed else f"{100 * x:.2f}"


def _ci(ci: list[float] | None) -> str:
    return "n/a" if ci is None else f"[{_pp(ci[0])}, {_pp(ci[1])}] pp"


def format_summary(c: Comparison) -> str:
    """A readable summary of a comparison, in percentage points."""
    a, b = c["arms"]["a"], c["arms"]["b"]
    lines = []
    if c["simulated"]:
        lines.append("*** SIMULATED: results come from the simulated engine, not a real server ***")
    lines.append(f"questions: {c['n']} compared of {c['n_total']} ({c['dropped_errors']} dropped for request "
                 f"errors, {100 * c['error_rate']:.2f} %); runs: A {a['n_runs']}, B {b['n_runs']}")
    for name, arm in (("A", a), ("B", b)):
        lines.append(f"  {name}: accuracy {_pp(arm['accuracy'], False)} %  Wilson "
                     f"[{_pp(arm['wilson'][0], False)}, {_pp(arm['wilson'][1], False)}]  bootstrap "
                     f"[{_pp(arm['bootstrap'][0], False)}, {_pp(arm['bootstrap'][1], False)}]")
    lines.append(f"  table ({c['table_source']}): both {c['both']}, A only {c['a_only']}, "
                 f"B only {c['b_only']}, neither {c['neither']}; psi {_pp(c['psi'], False)} %")
    lines.append(f"  delta (B - A) {_pp(c['delta'])} pp, SE {_pp(c['delta_se'], False)} pp; "
                 f"{100 * (1 - c['alpha']):g} % CI {_ci(c['delta_ci'])} ({c['delta_ci_method']})")
    boot = "cluster bootstrap" if c["arms"]["a"]["n_runs"] > 1 or c["arms"]["b"]["n_runs"] > 1 else "paired bootstrap"
    bci = c["delta_ci_bootstrap"]
    if bci[1] > bci[0]:
        boot += f" BCa {_ci(bci)}, percentile {_ci(c['delta_ci_percentile'])}"
    else:
        boot += " degenerate (every question has the same difference; zero-width, not shown)"
    lines.append(f"  other intervals: {boot}; unpaired {_ci(c['delta_ci_unpaired'])}")
    p_txt = stats.format_p(c["p_value"], c.get("p_value_floor"))
    lines.append(f"  McNemar exact p {c['mcnemar_p']:.3g} (mid-p {c['mcnemar_midp']:.3g}); "
                 f"test used: {c['test']} {p_txt}")
    band = c["noise_band"]
    if c["psi_aa"] is not None and band is not None:
        lines.append(f"  A/A: psi_AA {_pp(c['psi_aa'], False)} %, noise band of delta "
                     f"±{_pp(band[1], False)} pp")
    mde = f"  MDE at 80 % power: {_pp(c['mde'], False)} pp (paired {_pp(c['mde_paired'], False)}, " \
          f"unpaired {_pp(c['mde_unpaired'], False)}"
    if c["mde_repeats"] is not None:
        mde += f", from psi_AA at R={c['repeats_effective']:g} {_pp(c['mde_repeats'], False)}"
    lines.append(mde + f", from observed SE {_pp(c['mde_observed'], False)})")
    if c["tost"] is not None:
        t = c["tost"]
        lines.append(f"  TOST margin ±{_pp(t['margin'], False)} pp ({t['method']}): "
                     f"{100 * t['ci_level']:g} % interval {_ci(t['ci'])}; equivalence "
                     f"{stats.format_p(t['p_equivalence'])}, non-inferiority {stats.format_p(t['p_noninferiority'])}"
                     + ("; SE of Δ is 0, nothing claimed" if t["degenerate"] else ""))
    lines.append(f"verdict: {c['verdict'].upper()} — {c['verdict_reason']}")
    return "\n".join(lines)
