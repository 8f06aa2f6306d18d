"""An independent generator of A/B runs for calibrating the statistics (issue 25, item 7).

Deliberately NOT :mod:`helpers.score_simulator` (the project's simulator, whose model the statistics were
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
questions it would have got wrong), ``b_on_a_right`` (B errs on questions A's first launch got right: counted
against B they cancel an effect of the same size); plus ``transient_rate`` (each run x question independently NaN).

**Divergence model.** Per question 4-16 reference tokens over a 64-id vocabulary; base logits N(0, 1.2²) plus
a peaked top id. A launch draws a noise scale s_l = exp(N(0, scale_sd²)) that multiplies its launch noise
(sd ``launch_sd`` per token x id) and its one pass's noise (``pass_sd``); B adds its build's perturbation
``shift``·N(0, 1) (fixed per experiment). The reference is A's first launch; every other launch scores the
reference's top-k ids, and the per-token KL(ref‖launch) is the library's lumped top-k KL.
:func:`divergence_passes` builds the same passes as in-memory score tables
(:class:`harness.results.token_store.ScoreTable`) for the product's :func:`harness.analysis.divergence.compute_divergence`.

**Calibration runs** (:func:`accuracy_rates`, :func:`sequential_rates`, :func:`divergence_rates`) go through
the product's functions: :func:`harness.stats.compare_arms` (the comparison's statistics and verdict),
:class:`harness.orchestrate.sequential.Looks` (a sequential run's looks) and
:func:`harness.analysis.divergence.compute_divergence` (the seed design's divergence verdict); the other
divergence designs call :func:`harness.stats.kld_launches.launch_divergence_test`, the test that function uses.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from scipy.special import expit, log_softmax

from harness.results.token_store import ScoreTable
from harness.stats import kld as dv
from harness.stats.launches import ArmRuns
from harness.stats.signflip import signflip_weighted

DIFFICULTIES = ("beta", "logitnormal")
EFFECTS = ("few", "uniform", "mixed")
SHIFTS = ("none", "normal", "t3")
ERRORS = ("none", "both_shared", "both_indep", "b_only", "b_informative", "b_on_a_right")
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
        elif s.errors == "b_on_a_right":   # B errs on questions A's first launch got right
            right = ya[0, 0] == 1
            ub = right & (rng.random(n) < min(1.0, e / max(float(right.mean()), 1e-9)))
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
    """Per-question KLD against the reference of every other launch (:func:`divergence_passes`)."""
    e = divergence_passes(s, rng)
    ka = np.vstack([question_kld(e.ref, t) for t in e.a]) if e.a else np.zeros((0, s.questions))
    kb = np.vstack([question_kld(e.ref, t) for t in e.b])
    return DivergenceExperiment(ka, kb, np.diff(e.ref.offsets).astype(float))


@dataclass(frozen=True)
class DivergencePasses:
    """One divergence experiment as the product reads it: the reference pass and every other launch's pass
    (in-memory score tables), A's others (arm A's, then the A/A control's) and B's."""

    ref: ScoreTable
    a: list[ScoreTable]
    b: list[ScoreTable]


def divergence_passes(s: DivergenceScenario, rng: np.random.Generator) -> DivergencePasses:
    """The scoring passes of :func:`divergence_experiment`'s model (the same draws in the same order), each
    launch's logprobs of the reference's top-k ids, as the product stores them."""
    lens = rng.integers(s.min_tokens, s.max_tokens + 1, s.questions)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    t = int(offsets[-1])
    shape = (t, s.vocab)
    base = 1.2 * rng.standard_normal(shape, dtype=np.float32)
    base[np.arange(t), rng.integers(0, s.vocab, t)] += rng.uniform(1.0, 6.0, t).astype(np.float32)
    build = rng.standard_normal(shape, dtype=np.float32)
    noise_sd = float(np.hypot(s.launch_sd, s.pass_sd))

    def logits(build_scale: float) -> np.ndarray:
        scale = float(np.exp(s.scale_sd * rng.standard_normal())) if s.scale_sd else 1.0
        return base + np.float32(build_scale) * build + np.float32(scale * noise_sd) * rng.standard_normal(
            shape, dtype=np.float32)

    ref_lp = log_softmax(logits(0.0), axis=1).astype(float)
    ids = np.argpartition(-ref_lp, s.top_k - 1, axis=1)[:, : s.top_k]
    ref_top = np.take_along_axis(ref_lp, ids, axis=1)
    token = np.argmax(ref_lp, axis=1)
    col = np.argmax(ids == token[:, None], axis=1)
    questions = np.arange(s.questions, dtype=np.int64)
    position = np.arange(t) - np.repeat(offsets[:-1], lens)

    def table(top: np.ndarray, launch: str, on_ref: bool) -> ScoreTable:
        return ScoreTable(questions=questions, offsets=offsets, position=position, token_id=token,
                          logprob=top[np.arange(t), col], top_ids=ids, top_logprobs=top,
                          ref_top_logprobs=top if on_ref else None, text_offset=None, meta={"launch": launch})

    def launch_pass(build_scale: float, launch: str) -> ScoreTable:
        lq = np.take_along_axis(log_softmax(logits(build_scale), axis=1), ids, axis=1).astype(float)
        return table(lq, launch, True)

    m_a = s.launches_a - 1 + s.launches_aa
    a = [launch_pass(0.0, f"A{j + 1}") for j in range(m_a)]
    b = [launch_pass(s.shift, f"B{j}") for j in range(s.launches_b)]
    return DivergencePasses(table(ref_top, "A0", False), a, b)


def question_kld(ref: ScoreTable, cmp: ScoreTable) -> np.ndarray:
    """Per-question mean lumped KL(ref‖cmp) of two passes built by :func:`divergence_passes`."""
    assert cmp.ref_top_logprobs is not None
    return dv.segment_means(dv.lumped_kl(ref.top_logprobs, cmp.ref_top_logprobs), ref.offsets)


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


def accuracy_rates(s: AccuracyScenario, experiments: int, seed: int = 0, *, alpha: float = 0.05) -> dict[str, Rate]:
    """Through the product's :func:`harness.stats.compare_arms` (the comparison's statistics, with the A/A
    control): rejections in the direction asked (Δ = 0: ``improved`` or ``regressed``; Δ ≠ 0: the verdict of
    Δ's sign), coverage of the true Δ by ``delta_ci``, p/CI disagreements (p < α while 0 is inside the interval,
    or the reverse), experiments the error gate bounded, and those with no launch replication (the
    question-level test, qualified)."""
    from harness.stats import compare_arms

    rng = np.random.default_rng(seed)
    want = int(np.sign(s.delta))
    words = ("improved", "regressed") if want == 0 else (("improved",) if want > 0 else ("regressed",))
    c = {k: 0 for k in ("reject", "cover", "disagree", "bound", "fallback")}
    for _ in range(experiments):
        e = accuracy_experiment(s, rng)
        r = compare_arms(e.a, e.b, aa=e.aa, alpha=alpha, compute_mde=False)
        an = r.analysis
        c["reject"] += r.verdict.word in words
        c["cover"] += an.ci[0] <= e.true_delta <= an.ci[1]
        c["disagree"] += (an.p < alpha) != (an.ci[0] > 0 or an.ci[1] < 0)
        c["bound"] += r.errors.gate is not None and r.errors.gate.action == "bound"
        c["fallback"] += an.unit == "question"
    return {k: Rate(v, experiments) for k, v in c.items()}


def sequential_rates(s: AccuracyScenario, experiments: int, seed: int = 0, *, max_repeats: int = 6,
                     min_repeats: int = 2, min_effect: float | None = None) -> dict[str, Rate | float]:
    """A sequential run with a fresh launch of both arms per repeat, through the product's
    :class:`harness.orchestrate.sequential.Looks` (launch-aware looks with the error gate and the declared
    effect): rejections in the direction asked, mean repeats, and the decisions ``improved`` where the fixed
    design's errors rule (:func:`harness.stats.compare_arms` on the data of the deciding look) says request
    errors could change the verdict (``improved_despite_errors``: must be 0)."""
    from harness.orchestrate.sequential import Looks
    from harness.stats import compare_arms
    from harness.stats import group_sequential as sq

    design = sq.SequentialDesign(max_repeats=max_repeats, min_repeats=min_repeats, min_effect=min_effect)
    sc = s.with_(launches_a=max_repeats, launches_b=max_repeats, launches_aa=0, passes=1)
    rng = np.random.default_rng(seed)
    want = int(np.sign(s.delta))
    words = ("improved", "regressed") if want == 0 else (("improved",) if want > 0 else ("regressed",))
    hits = reps = bad = errors_rule = 0
    for _ in range(experiments):
        e = accuracy_experiment(sc, rng)
        looks = Looks(design)
        for k in range(min_repeats, max_repeats + 1):
            a, b = ArmRuns(e.a.scores[:k], e.a.launches[:k]), ArmRuns(e.b.scores[:k], e.b.launches[:k])
            look = looks.decide(k, a, b)
            if look is not None and look.stop:
                hits += look.verdict in words
                reps += k
                if s.errors != "none":
                    fixed = compare_arms(a, b, alpha=design.alpha, compute_mde=False)
                    errors_rule += fixed.errors.changes_verdict
                    bad += fixed.errors.changes_verdict and look.verdict == "improved"
                break
    return {"reject": Rate(hits, experiments), "repeats": reps / experiments,
            "errors_rule_inconclusive": Rate(errors_rule, experiments),
            "improved_despite_errors": Rate(bad, experiments)}


def divergence_rates(s: DivergenceScenario, experiments: int, seed: int = 0,
                     designs: tuple[tuple[int, int], ...] = ((4, 3),), product: tuple[int, int] | None = None,
                     n_resamples: int = 999) -> dict[str, Rate | float]:
    """For each (m_A, m_B) (the first m_A of A's other launches, the first m_B of B's): the launch-level
    test's rejections (:func:`harness.stats.kld_launches.launch_divergence_test`); ``product``: one design run
    through the product's :func:`harness.analysis.divergence.compute_divergence` (its verdict, key
    ``product_<m_A>_<m_B>``; the floor is A's first other launch, the compared pass B's first); the
    per-question test of one A/A launch and one B launch (``question_1_1``); the pooled sd of log launch-mean
    KLD and the geometric-mean KLD ratio B/A (for planning)."""
    from harness.analysis.divergence import compute_divergence
    from harness.stats.kld_launches import launch_divergence_test, launch_means

    rng = np.random.default_rng(seed)
    c = {f"launch_{ma}_{mb}": 0 for ma, mb in designs}
    c["question_1_1"] = 0
    if product is not None:
        c[f"product_{product[0]}_{product[1]}"] = 0
    sds, ratios = [], []
    for _ in range(experiments):
        e = divergence_passes(s, rng)
        ka = np.vstack([question_kld(e.ref, t) for t in e.a])
        kb = np.vstack([question_kld(e.ref, t) for t in e.b])
        tokens = np.diff(e.ref.offsets).astype(float)
        for ma, mb in designs:
            r = launch_divergence_test(ka[:ma], kb[:mb], tokens, per_question=False)
            c[f"launch_{ma}_{mb}"] += r.verdict == "diverged"
        if product is not None:
            ma, mb = product
            d = compute_divergence(e.ref, e.b[0], e.a[0], launches_a=e.a[1:ma], launches_b=e.b[1:mb],
                                   texts_ref={}, texts_b={}, texts_aa={}, n_resamples=n_resamples,
                                   seed=int(rng.integers(2**31)), top_n=0)
            c[f"product_{ma}_{mb}"] += d.verdict == "diverged"
        t = signflip_weighted(kb[0] - ka[0], tokens, 999, seed=rng)
        c["question_1_1"] += t.p < 0.05 and t.statistic > 0
        la, lb = np.log(launch_means(ka, tokens)), np.log(launch_means(kb, tokens))
        ss = float(np.sum((la - la.mean()) ** 2) + np.sum((lb - lb.mean()) ** 2))
        sds.append(ss / (la.size + lb.size - 2))
        ratios.append(float(np.exp(lb.mean() - la.mean())))
    out: dict[str, Rate | float] = {k: Rate(v, experiments) for k, v in c.items()}
    out["sd_log"] = float(np.sqrt(np.mean(sds)))
    out["ratio"] = float(np.exp(np.mean(np.log(ratios))))
    return out
