"""An independent generator of A/B runs for calibrating the statistics (issue 25, item 7).

Deliberately NOT :mod:`harness.stats.simulate` (the project's simulator, whose model the statistics were
designed against): other difficulty distributions, outcomes drawn per pass from a per-launch probability,
launch-wide shifts on the log-odds scale (normal or Student-t(3)), effects concentrated on a few questions,
persistent errors that may be informative, several passes per launch, and, for the divergence test, a noise
scale that varies from launch to launch. Pure numpy, vectorised within an experiment.

**Accuracy model.** Question i has base log-odds θ_i: ``difficulty="beta"``: p_i ~ Beta(κμ, κ(1 - μ)) with
κ = 0.6 (U-shaped: most questions almost always right or almost always wrong), θ_i = logit(p_i);
``"logitnormal"``: θ_i ~ N(m, 2.5²), m set so the mean accuracy is μ. A launch l of an arm draws a launch-wide
shift u_l (``shift="normal"``: N(0, sd²); ``"t3"``: sd·T₃/√3, the same sd, heavy tails) and its own
per-question noise v_li ~ N(0, 0.3²); its probability on question i is π_li = σ(θ_i + δ_i + u_l + v_li) and
each pass is Bernoulli(π_li) (with probability ``pass_repeat`` a pass repeats the launch's first pass
verbatim). B's effect δ_i: ``"few"``: a random share f of questions that B always gets right (Δ > 0) or
always wrong (Δ < 0), f solved so the population Δ is exact; ``"uniform"``: one log-odds shift on every
question; ``"mixed"``: B fixes some questions and breaks 3 % of the others (Δ = 0 with per-question effects).
The true Δ is the population mean of π_B - π_A over questions, shifts and noise (Monte Carlo, 10⁶ draws).

**Errors** (persistent: a question unanswered in every run of the arm): ``both_shared`` (the same questions
in both arms), ``both_indep`` (each arm its own, at the same rate), ``b_only``, ``b_informative`` (B errs on
questions it would have got wrong); plus ``transient_rate`` (each run x question independently NaN).

**Divergence model.** Per question 4-16 reference tokens over a 64-id vocabulary; base logits N(0, 1.2²) plus
a peaked top id. A launch draws a noise scale s_l = exp(N(0, scale_sd²)) that multiplies its launch noise
(sd ``launch_sd`` per token x id) and its one pass's noise (``pass_sd``); B adds its build's perturbation
``shift``·N(0, 1) (fixed per experiment). The reference is A's first launch; every other launch scores the
reference's top-k ids, and the per-token KL(ref‖launch) is the library's lumped top-k KL.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from scipy.special import expit, log_softmax

from harness.stats import kld as dv
from harness.stats.launches import ArmRuns
from harness.stats.signflip import signflip_weighted

DIFFICULTIES = ("beta", "logitnormal")
EFFECTS = ("few", "uniform", "mixed")
SHIFTS = ("none", "normal", "t3")
ERRORS = ("none", "both_shared", "both_indep", "b_only", "b_informative")
P_CLIP = 1e-7
LAUNCH_NOISE_SD = 0.3
MIXED_BREAK = 0.03


@dataclass(frozen=True)
class AccuracyScenario:
    n: int = 1319
    accuracy: float = 0.9
    difficulty: str = "beta"
    concentration: float = 0.6
    logit_sd: float = 2.5
    delta: float = 0.0
    effect: str = "few"
    shift: str = "none"
    shift_sd: float = 0.15
    launch_noise_sd: float = LAUNCH_NOISE_SD
    pass_repeat: float = 0.0
    launches_a: int = 3
    launches_b: int = 3
    launches_aa: int = 2
    passes: int = 1
    errors: str = "none"
    error_rate: float = 0.01
    transient_rate: float = 0.0

    def __post_init__(self) -> None:
        for name, v, allowed in (("difficulty", self.difficulty, DIFFICULTIES), ("effect", self.effect, EFFECTS),
                                 ("shift", self.shift, SHIFTS), ("errors", self.errors, ERRORS)):
            if v not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, not {v!r}")

    def with_(self, **kw: object) -> AccuracyScenario:
        return replace(self, **kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Experiment:
    a: ArmRuns
    b: ArmRuns
    aa: ArmRuns | None
    true_delta: float


# ------------------------------------------------------------------------------------------ accuracy
@lru_cache(maxsize=64)
def _logitnormal_mean(accuracy: float, sd: float) -> float:
    x, w = np.polynomial.hermite_e.hermegauss(120)
    w = w / w.sum()
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(np.sum(w * expit(mid + sd * x))) < accuracy else (lo, mid)
    return (lo + hi) / 2


def base_logits(s: AccuracyScenario, rng: np.random.Generator, size: int) -> np.ndarray:
    """Base log-odds θ_i of ``size`` questions."""
    if s.difficulty == "beta":
        k = s.concentration
        p = np.clip(rng.beta(k * s.accuracy, k * (1 - s.accuracy), size), P_CLIP, 1 - P_CLIP)
        return np.log(p) - np.log1p(-p)
    return _logitnormal_mean(s.accuracy, s.logit_sd) + s.logit_sd * rng.standard_normal(size)


def launch_shifts(s: AccuracyScenario, rng: np.random.Generator, size: int | tuple[int, ...]) -> np.ndarray:
    if s.shift == "none" or s.shift_sd == 0:
        return np.zeros(size)
    if s.shift == "normal":
        return s.shift_sd * rng.standard_normal(size)
    return s.shift_sd * rng.standard_t(3, size) / np.sqrt(3.0)


@lru_cache(maxsize=256)
def effect_parameter(s: AccuracyScenario) -> float:
    """The share f (``few``, ``mixed``) or the log-odds shift (``uniform``) that makes the population Δ
    equal ``s.delta`` (Monte Carlo over 10⁶ questions x launch draws, fixed seed)."""
    if s.delta == 0 and s.effect != "mixed":
        return 0.0
    rng = np.random.default_rng(12345)
    m = 1_000_000
    eta = base_logits(s, rng, m) + launch_shifts(s, rng, m) + s.launch_noise_sd * rng.standard_normal(m)
    pa = expit(eta)
    if s.effect == "few":
        f = s.delta / float(np.mean(1 - pa)) if s.delta > 0 else -s.delta / float(np.mean(pa))
        if f > 1:
            raise ValueError(f"Δ = {s.delta} needs more than every question")
        return f
    if s.effect == "mixed":
        up = (s.delta + MIXED_BREAK * float(np.mean(pa))) / float(np.mean(1 - pa))
        if not 0 <= up <= 1:
            raise ValueError("mixed effect out of range")
        return up
    lo, hi = -20.0, 20.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(np.mean(expit(eta + mid) - pa)) < s.delta else (lo, mid)
    return (lo + hi) / 2


def _outcomes(pi: np.ndarray, passes: int, pass_repeat: float, rng: np.random.Generator) -> np.ndarray:
    """(L, passes, n) Bernoulli(π) outcomes; later passes repeat the first with probability pass_repeat."""
    y = (rng.random((pi.shape[0], passes, pi.shape[1])) < pi[:, None, :]).astype(float)
    if passes > 1 and pass_repeat > 0:
        same = rng.random(y[:, 1:].shape) < pass_repeat
        y[:, 1:] = np.where(same, y[:, :1], y[:, 1:])
    return y


def _arm(y: np.ndarray, prefix: str) -> ArmRuns:
    L, P, n = y.shape
    return ArmRuns(y.reshape(L * P, n), tuple(f"{prefix}{lo}" for lo in range(L) for _ in range(P)))


def accuracy_experiment(s: AccuracyScenario, rng: np.random.Generator) -> Experiment:
    """One experiment: arm A's, arm B's and the A/A control's runs (launches x passes), true Δ."""
    n = s.n
    theta = base_logits(s, rng, n)
    par = effect_parameter(s)
    delta_b = np.zeros(n)
    if s.effect == "few" and s.delta != 0:
        hit = rng.random(n) < par
        delta_b = np.where(hit, np.inf if s.delta > 0 else -np.inf, 0.0)
    elif s.effect == "mixed":
        u = rng.random(n)
        delta_b = np.where(u < par, np.inf, np.where(u > 1 - MIXED_BREAK, -np.inf, 0.0))
    elif s.effect == "uniform":
        delta_b = np.full(n, par)
    la, lb, laa = s.launches_a, s.launches_b, s.launches_aa

    def probs(L: int, extra: np.ndarray) -> np.ndarray:
        eta = theta[None, :] + extra[None, :] + launch_shifts(s, rng, (L, 1)) \
            + s.launch_noise_sd * rng.standard_normal((L, n))
        with np.errstate(invalid="ignore"):
            return np.nan_to_num(expit(eta), nan=0.0)

    ya = _outcomes(probs(la, np.zeros(n)), s.passes, s.pass_repeat, rng)
    yb = _outcomes(probs(lb, delta_b), s.passes, s.pass_repeat, rng)
    yaa = _outcomes(probs(laa, np.zeros(n)), s.passes, s.pass_repeat, rng) if laa else None
    if s.errors != "none":
        e = s.error_rate
        ua = np.zeros(n, bool)
        if s.errors == "both_shared":
            ua = ub = rng.random(n) < e
        elif s.errors == "both_indep":
            ua, ub = rng.random(n) < e, rng.random(n) < e
        elif s.errors == "b_only":
            ub = rng.random(n) < e
        else:   # b_informative: B errs on questions its first pass got wrong
            wrong = yb[0, 0] == 0
            rate = min(1.0, e / max(float(wrong.mean()), 1e-9))
            ub = wrong & (rng.random(n) < rate)
        ya[:, :, ua] = np.nan
        yb[:, :, ub] = np.nan
        if yaa is not None and s.errors in ("both_shared", "both_indep"):
            yaa[:, :, ua] = np.nan
    if s.transient_rate > 0:
        for y in (ya, yb) + ((yaa,) if yaa is not None else ()):
            y[rng.random(y.shape) < s.transient_rate] = np.nan
    return Experiment(_arm(ya, "A"), _arm(yb, "B"), _arm(yaa, "AA") if yaa is not None else None, float(s.delta))


# ------------------------------------------------------------------------------------------ divergence
@dataclass(frozen=True)
class DivergenceScenario:
    questions: int = 120
    min_tokens: int = 4
    max_tokens: int = 16
    vocab: int = 64
    top_k: int = 20
    launch_sd: float = 0.03
    pass_sd: float = 0.02
    scale_sd: float = 0.0
    shift: float = 0.0
    #: arm A's launches (the first is the reference's), the A/A control's, B's
    launches_a: int = 3
    launches_aa: int = 2
    launches_b: int = 3

    def with_(self, **kw: object) -> DivergenceScenario:
        return replace(self, **kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class DivergenceExperiment:
    #: (m_A, Q): A's launches other than the reference's (arm A's others first, then the A/A control's)
    kld_a: np.ndarray
    #: (m_B, Q)
    kld_b: np.ndarray
    tokens: np.ndarray


def divergence_experiment(s: DivergenceScenario, rng: np.random.Generator) -> DivergenceExperiment:
    lens = rng.integers(s.min_tokens, s.max_tokens + 1, s.questions)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    t = int(offsets[-1])
    shape = (t, s.vocab)
    base = 1.2 * rng.standard_normal(shape, dtype=np.float32)
    base[np.arange(t), rng.integers(0, s.vocab, t)] += rng.uniform(1.0, 6.0, t).astype(np.float32)
    build = rng.standard_normal(shape, dtype=np.float32)
    # one pass per launch: its launch and pass noise are one normal field of sd hypot(launch_sd, pass_sd)
    noise_sd = float(np.hypot(s.launch_sd, s.pass_sd))

    def logits(build_scale: float) -> np.ndarray:
        scale = float(np.exp(s.scale_sd * rng.standard_normal())) if s.scale_sd else 1.0
        return base + np.float32(build_scale) * build + np.float32(scale * noise_sd) * rng.standard_normal(
            shape, dtype=np.float32)

    ref_lp = log_softmax(logits(0.0), axis=1).astype(float)
    ids = np.argpartition(-ref_lp, s.top_k - 1, axis=1)[:, : s.top_k]
    ref_top = np.take_along_axis(ref_lp, ids, axis=1)

    def kld(build_scale: float) -> np.ndarray:
        lq = np.take_along_axis(log_softmax(logits(build_scale), axis=1), ids, axis=1).astype(float)
        return dv.segment_means(dv.lumped_kl(ref_top, lq), offsets)

    m_a = s.launches_a - 1 + s.launches_aa
    ka = np.vstack([kld(0.0) for _ in range(m_a)]) if m_a else np.zeros((0, s.questions))
    kb = np.vstack([kld(s.shift) for _ in range(s.launches_b)])
    return DivergenceExperiment(ka, kb, lens.astype(float))


# ------------------------------------------------------------------------------------------ calibration runs
# Shared by benchmarks/calibrate_stats.py (the table, 2000 experiments per row) and the slow targets test.
def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """95 % Wilson interval of k successes in n."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


@dataclass(frozen=True)
class Rate:
    k: int
    n: int

    @property
    def rate(self) -> float:
        return self.k / self.n if self.n else float("nan")

    def fmt(self) -> str:
        lo, hi = wilson(self.k, self.n)
        return f"{100 * self.rate:5.1f} [{100 * lo:4.1f}, {100 * hi:4.1f}]"


def accuracy_rates(s: AccuracyScenario, experiments: int, seed: int = 0, *, old: bool = True,
                   include_aa: bool = False, alpha: float = 0.05) -> dict[str, Rate]:
    """Rejections in the direction asked (Δ = 0: either direction; Δ ≠ 0: sign of Δ), coverage of the true
    Δ and p/CI disagreements, for the new pipeline (error gate + launch-aware test) and, with ``old``,
    today's :func:`harness.stats.compare_arms`."""
    from harness.stats import compare_arms
    from harness.stats.errorgate import error_robust_test
    from harness.stats.launchvar import launch_aware_test

    rng = np.random.default_rng(seed)
    want = int(np.sign(s.delta))
    c = {k: 0 for k in ("new_reject", "new_cover", "new_disagree", "new_bound", "new_fallback",
                        "old_reject", "old_cover", "old_disagree")}
    for _ in range(experiments):
        e = accuracy_experiment(s, rng)
        aa = e.aa
        r = error_robust_test(e.a, e.b, lambda a, b, aa=aa: launch_aware_test(
            a, b, aa, alpha=alpha, include_aa_in_estimate=include_aa))
        c["new_reject"] += (r.direction != 0) if want == 0 else (r.direction == want)
        c["new_cover"] += r.main.ci[0] <= e.true_delta <= r.main.ci[1]
        c["new_disagree"] += (r.main.p < alpha) != (r.main.ci[0] > 0 or r.main.ci[1] < 0)
        c["new_bound"] += r.gate.action == "bound"
        c["new_fallback"] += r.main.df_launch == 0
        if old:
            o = compare_arms(e.a, e.b, aa=aa, alpha=alpha, compute_mde=False)
            w = o.verdict.word
            c["old_reject"] += (w in ("improved", "regressed")) if want == 0 else (
                w == ("improved" if want > 0 else "regressed"))
            c["old_cover"] += o.analysis.ci[0] <= e.true_delta <= o.analysis.ci[1]
            c["old_disagree"] += (o.analysis.p < alpha) != (o.analysis.ci[0] > 0 or o.analysis.ci[1] < 0)
    return {k: Rate(v, experiments) for k, v in c.items() if old or not k.startswith("old")}


def sequential_rates(s: AccuracyScenario, experiments: int, seed: int = 0, *, max_repeats: int = 6,
                     min_repeats: int = 2, old: bool = True) -> dict[str, Rate | float]:
    """A sequential run with a fresh launch of both arms per repeat: rejections and mean repeats of the
    launch-aware looks (:func:`harness.stats.launch_looks.launch_look`) and, with ``old``, today's
    question-level looks."""
    from harness.stats import group_sequential as sq
    from harness.stats.launch_looks import launch_look

    design = sq.SequentialDesign(max_repeats=max_repeats, min_repeats=min_repeats)
    sc = s.with_(launches_a=max_repeats, launches_b=max_repeats, launches_aa=0, passes=1)
    rng = np.random.default_rng(seed)
    want = int(np.sign(s.delta))
    hits = {"new": 0, "old": 0}
    reps = {"new": 0, "old": 0}
    for _ in range(experiments):
        e = accuracy_experiment(sc, rng)
        A = [e.a.scores[i] for i in range(max_repeats)]
        B = [e.b.scores[i] for i in range(max_repeats)]
        for name in ("new", "old") if old else ("new",):
            for k in range(min_repeats, max_repeats + 1):
                if name == "new":
                    dec = launch_look(design, k, A[:k], B[:k])
                else:
                    dl, se, nq = sq.question_level_estimate(A[:k], B[:k])
                    dec = sq.decide_look(design, k, dl, se, nq)
                if dec.stop:
                    v = dec.verdict
                    hits[name] += (v in ("improved", "regressed")) if want == 0 else (
                        v == ("improved" if want > 0 else "regressed"))
                    reps[name] += k
                    break
    out: dict[str, Rate | float] = {}
    for name in hits:
        if name == "old" and not old:
            continue
        out[f"{name}_reject"] = Rate(hits[name], experiments)
        out[f"{name}_repeats"] = reps[name] / experiments
    return out


def divergence_rates(s: DivergenceScenario, experiments: int, seed: int = 0,
                     designs: tuple[tuple[int, int], ...] = ((4, 3),)) -> dict[str, Rate | float]:
    """For each (m_A, m_B) (the first m_A of A's other launches, the first m_B of B's): the launch-level
    test's rejections; and the per-question test of today's design (one A/A launch, one B launch); the
    pooled sd of log launch-mean KLD (for planning)."""
    from harness.stats.kld_launches import launch_divergence_test, launch_means

    rng = np.random.default_rng(seed)
    c = {f"launch_{ma}_{mb}": 0 for ma, mb in designs}
    c["question_1_1"] = 0
    sds, ratios = [], []
    for _ in range(experiments):
        e = divergence_experiment(s, rng)
        for ma, mb in designs:
            r = launch_divergence_test(e.kld_a[:ma], e.kld_b[:mb], e.tokens, per_question=False)
            c[f"launch_{ma}_{mb}"] += r.verdict == "diverged"
        t = signflip_weighted(e.kld_b[0] - e.kld_a[0], e.tokens, 999, seed=rng)
        c["question_1_1"] += t.p < 0.05 and t.statistic > 0
        la, lb = np.log(launch_means(e.kld_a, e.tokens)), np.log(launch_means(e.kld_b, e.tokens))
        ss = float(np.sum((la - la.mean()) ** 2) + np.sum((lb - lb.mean()) ** 2))
        sds.append(ss / (la.size + lb.size - 2))
        ratios.append(float(np.exp(lb.mean() - la.mean())))
    out: dict[str, Rate | float] = {k: Rate(v, experiments) for k, v in c.items()}
    out["sd_log"] = float(np.sqrt(np.mean(sds)))
    out["ratio"] = float(np.exp(np.mean(np.log(ratios))))
    return out
