"""Sequential repeats: look after every repeat of both arms and stop as soon as the verdict is decided.

Design: a **group-sequential test with Lan-DeMets alpha spending** (O'Brien-Fleming type by default,
Pocock type on request), the information fraction of look k being ``t_k = k / max_repeats``.

Why this and not an always-valid method (confidence sequences): the number of repeats is small and
bounded (``experiment.max_repeats``, rarely above 20) and the looks are the repeats themselves, known in
advance. Alpha spending uses exactly that: at the last look its O'Brien-Fleming boundary is within a few
hundredths of the fixed design's 1.96, so a run that goes the distance loses almost no power, while a
clear effect stops after a repeat or two. A confidence sequence is valid under unlimited continuous
monitoring, which we do not need, and pays for it with intervals 1.5-2x wider at every look (many more
repeats for the same power). Why ``t = k / max_repeats``: each repeat is a fresh launch of both arms, so
under the null (arms identical) the per-question B - A differences of repeat j are independent of those of
the other repeats and identically distributed; the information of the question-level mean difference is
then exactly proportional to the number of repeats, and the boundaries need no estimate of a future
variance. (Under an alternative whose effect differs between questions, information grows slightly slower
than k; that changes power a little, never the false-positive rate.)

The statistic at each look is the question-level paired test of the statistics design rules: per question,
average the passes within a launch, then the launches; ``d_i = B_i - A_i``; ``z = mean(d) / SE`` with
``SE = sd(d) / sqrt(n)`` floored at :func:`se_floor` (one question's worth, ``1/n``), so a degenerate SE
(identical repeats) cannot claim anything. :func:`decide_look` takes the estimate ``(delta, se, n)`` of a
look, so any estimator of that form plugs in (:func:`question_level_estimate` is the default one).

At each look (from ``min_repeats`` on):

- **efficacy** (two-sided, level ``alpha``): ``|z| >= c_k`` stops with ``improved`` / ``regressed``;
- **equivalence** (``hypothesis="equivalence"``, or ``superiority`` with a margin, as the fixed design
  does): both one-sided statistics ``(delta + m)/SE`` and ``(m - delta)/SE`` reach the one-sided boundary
  ``e_k`` (spending ``alpha_equivalence``, default ``alpha``, per side: the TOST of the fixed design);
- **non-inferiority** (``hypothesis="noninferiority"``): ``(delta + m)/SE >= e_k`` with one-sided level
  ``alpha_equivalence`` (default ``alpha / 2`` = 0.025, as regulators use);
- **futility** (non-binding: the boundaries above ignore it, so stopping for futility only lowers the error
  rates): from information fraction ``futility_from`` on, the conditional power of every verdict still
  open (the probability of reaching it at the last look if the current estimate were the truth) is below
  ``futility_power``: the remaining repeats could not plausibly change the verdict;
- the last look (``max_repeats``) always stops: a verdict not reached is ``inconclusive``.

Boundaries come from the recursive numerical integration of Armitage, McPherson and Rowe (1969) over the
canonical joint distribution ``Corr(Z_j, Z_k) = sqrt(t_j / t_k)`` (:func:`exit_probabilities`); they agree
with the published O'Brien-Fleming and Pocock constants and with scipy's multivariate normal (tests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NotRequired, TypedDict

import numpy as np
from scipy.special import ndtr, ndtri

from harness.stats.roots import brentq

from .outcomes import LookDecision
from .verdict import ALPHA, HYPOTHESES

SPENDING = ("obf", "pocock")
#: z boundary used when a look spends (almost) nothing: nothing real reaches it
Z_MAX = 40.0
_TAIL_SD = 9.0  # an unbounded continuation region is cut this many SDs from the mean


# ------------------------------------------------------------------------------------------ spending
def spend(t: float | np.ndarray, alpha: float, kind: str = "obf") -> np.ndarray:
    """Cumulative one-sided alpha spent by information fraction ``t`` (Lan and DeMets 1983; Kim and
    DeMets 1987), for a one-sided level ``alpha``:

    - ``obf`` (O'Brien-Fleming type): ``2 - 2 Φ(z_{1-α/2} / sqrt(t))``;
    - ``pocock`` (Pocock type): ``α log(1 + (e - 1) t)``.

    A two-sided symmetric design of level α spends ``spend(t, α/2)`` on each side (gsDesign's and
    Reboussin et al.'s convention). ``t`` is clipped to [0, 1]; ``spend(1, α) = α``.
    """
    tt = np.clip(np.asarray(t, dtype=float), 0.0, 1.0)
    if kind == "obf":
        with np.errstate(divide="ignore"):
            z = ndtri(1 - alpha / 2) / np.sqrt(tt)
        return 2 * ndtr(-z)  # = 2 - 2 Φ(z), without cancellation at small t
    if kind == "pocock":
        return alpha * np.log1p((math.e - 1) * tt)
    raise ValueError(f"spending must be one of {SPENDING}, not {kind!r}")


# ------------------------------------------------------------------------------------------ integration
def _simpson(lo: float, hi: float, h: float) -> tuple[np.ndarray, np.ndarray]:
    """Points and Simpson weights on [lo, hi] with spacing at most h."""
    m = max(2, int(math.ceil((hi - lo) / h)))
    m += m % 2
    x = np.linspace(lo, hi, m + 1)
    w = np.ones(m + 1)
    w[1:-1:2] = 4.0
    w[2:-1:2] = 2.0
    return x, w * (hi - lo) / (3 * m)


def _continuation(lo: float, hi: float, gap_lo: float, gap_hi: float) -> list[tuple[float, float]]:
    """The continuation region (lo, hi) minus the futility gap (gap_lo, gap_hi), as intervals."""
    if gap_hi <= gap_lo or gap_hi <= lo or gap_lo >= hi:
        return [(lo, hi)] if hi > lo else []
    return [(a, b) for a, b in ((lo, gap_lo), (gap_hi, hi)) if b > a]


class _Recursion:
    """The density of the score ``S_k = Z_k sqrt(t_k)`` over the continuation region of the looks so far
    (Armitage, McPherson and Rowe 1969; Jennison and Turnbull 2000, ch. 19): increments of S are independent
    ``N(drift dt, dt)``; Simpson's rule on a grid of spacing ``sqrt(dt) / resolution``."""

    def __init__(self, drift: float = 0.0, resolution: int = 16):
        self.drift, self.resolution = drift, resolution
        self.t_prev = 0.0
        # (x, w, f) after the first look: grid points, Simpson weights, density; None before it
        self.grid: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def mass_between(self, tk: float, a_z: float, b_z: float) -> float:
        """P(reach the look at information tk and a_z < Z < b_z)."""
        if b_z <= a_z:
            return 0.0
        sk = math.sqrt(tk)
        a, b = a_z * sk, b_z * sk
        if self.grid is None:
            m = self.drift * tk
            return float(ndtr((b - m) / sk) - ndtr((a - m) / sk))
        x, w, f = self.grid
        dt = tk - self.t_prev
        sd, ms = math.sqrt(dt), self.drift * dt
        return float(np.sum(w * f * (ndtr((b - x - ms) / sd) - ndtr((a - x - ms) / sd))))

    def reach(self) -> float:
        return 1.0 if self.grid is None else float(np.sum(self.grid[1] * self.grid[2]))

    def advance(self, tk: float, lower: float, upper: float, gap: tuple[float, float], t_next: float) -> bool:
        """Condition on continuing at the look at tk (lower < Z < upper, outside the gap); False when no
        path continues."""
        sk = math.sqrt(tk)
        dt = tk - self.t_prev
        sd, ms = math.sqrt(dt), self.drift * dt
        mean_k = self.drift * tk
        lo_r = max(lower * sk, mean_k - _TAIL_SD * sk)
        hi_r = min(upper * sk, mean_k + _TAIL_SD * sk)
        h = min(sd, math.sqrt(t_next - tk)) / self.resolution
        pieces = [_simpson(a, b, h) for a, b in _continuation(lo_r, hi_r, gap[0] * sk, gap[1] * sk)]
        if not pieces:
            self.grid = np.zeros(1), np.zeros(1), np.zeros(1)
            self.t_prev = tk
            return False
        y = np.concatenate([q[0] for q in pieces])
        wy = np.concatenate([q[1] for q in pieces])
        if self.grid is None:
            fy = np.exp(-0.5 * ((y - mean_k) / sk) ** 2) / (sk * math.sqrt(2 * math.pi))
        else:
            x, w, f = self.grid
            fy = np.empty_like(y)
            wf = w * f
            for i in range(0, y.size, 512):  # bounded memory on fine grids
                blk = y[i:i + 512]
                kern = np.exp(-0.5 * ((blk[:, None] - x[None, :] - ms) / sd) ** 2)
                fy[i:i + 512] = kern @ wf / (sd * math.sqrt(2 * math.pi))
        self.grid, self.t_prev = (y, wy, fy), tk
        return True


def exit_probabilities(t: Sequence[float] | np.ndarray, upper: Sequence[float] | np.ndarray,
                       lower: Sequence[float] | np.ndarray | None = None,
                       drift: float = 0.0, gap: Sequence[tuple[float, float]] | None = None,
                       resolution: int = 16) -> dict[str, np.ndarray]:
    """Probabilities of stopping at each look of a group-sequential test on the canonical process.

    ``Z_k`` has ``Corr(Z_j, Z_k) = sqrt(t_j / t_k)`` and mean ``drift * sqrt(t_k)`` (``t`` increasing,
    any scale). At look k the test stops **up** when ``Z_k >= upper[k]``, **down** when ``Z_k <= lower[k]``
    (default ``-upper``; use ``-inf`` for a one-sided test), and in the **gap** when
    ``gap[k][0] < Z_k < gap[k][1]`` (a futility region; default none). Returns arrays ``up``, ``down``,
    ``gap`` (per look) and ``continue`` (probability of reaching look k and going on).

    Recursive numerical integration (Armitage, McPherson and Rowe 1969; Jennison and Turnbull 2000, ch.
    19) of the score ``S_k = Z_k sqrt(t_k)``, whose increments are independent ``N(drift dt, dt)``, with
    Simpson's rule on a grid of spacing ``sqrt(dt) / resolution``.
    """
    t_arr = np.asarray(t, dtype=float)
    k_n = t_arr.size
    up_b = np.asarray(upper, dtype=float)
    lo_b = -up_b if lower is None else np.asarray(lower, dtype=float)
    gaps = [(0.0, 0.0)] * k_n if gap is None else [(float(a), float(b)) for a, b in gap]
    if not (up_b.size == lo_b.size == len(gaps) == k_n) or k_n == 0:
        raise ValueError("t, upper, lower and gap need one entry per look")
    if np.any(np.diff(t_arr) <= 0) or t_arr[0] <= 0:
        raise ValueError("information times must be positive and increasing")
    out = {name: np.zeros(k_n) for name in ("up", "down", "gap", "continue")}
    rec = _Recursion(drift, resolution)
    for k in range(k_n):
        tk = float(t_arr[k])
        out["up"][k] = rec.mass_between(tk, up_b[k], math.inf)
        out["down"][k] = rec.mass_between(tk, -math.inf, lo_b[k])
        out["gap"][k] = rec.mass_between(tk, max(gaps[k][0], lo_b[k]), min(gaps[k][1], up_b[k]))
        out["continue"][k] = max(0.0, rec.reach() - out["up"][k] - out["down"][k] - out["gap"][k])
        if k == k_n - 1 or not rec.advance(tk, lo_b[k], up_b[k], gaps[k], float(t_arr[k + 1])):
            break
    return out


# ------------------------------------------------------------------------------------------ boundaries
@lru_cache(maxsize=256)
def _spending_boundaries(t: tuple[float, ...], alpha: float, kind: str, sides: int) -> tuple[float, ...]:
    if sides not in (1, 2):
        raise ValueError("sides must be 1 or 2")
    per_side = alpha / 2 if sides == 2 else alpha
    cum = spend(np.asarray(t), per_side, kind) * sides
    if t[-1] >= 1:
        cum[-1] = alpha
    bounds: list[float] = []
    rec = _Recursion()
    for k, tk in enumerate(t):
        target = float(cum[k] - (cum[k - 1] if k else 0.0))

        def excess(c: float, tk: float = tk, target: float = target) -> float:
            p = rec.mass_between(tk, c, math.inf)
            if sides == 2:
                p += rec.mass_between(tk, -math.inf, -c)
            return p - target

        if target <= 1e-15 or excess(Z_MAX) >= 0:
            c_k = Z_MAX
        elif excess(0.0) <= 0:
            c_k = 0.0
        else:
            c_k = float(brentq(excess, 0.0, Z_MAX, xtol=1e-7))
        bounds.append(c_k)
        if k + 1 < len(t):
            rec.advance(tk, -c_k if sides == 2 else -math.inf, c_k, (0.0, 0.0), t[k + 1])
    return tuple(bounds)


def spending_boundaries(t: Sequence[float], alpha: float = ALPHA, kind: str = "obf",
                        sides: int = 2) -> np.ndarray:
    """Lan-DeMets boundaries ``c_k`` (z scale) at information fractions ``t`` (increasing, in (0, 1]).

    ``sides=2``: a symmetric two-sided test of level ``alpha`` (stop when ``|Z_k| >= c_k``; each side spends
    ``spend(t, alpha/2)``); ``sides=1``: a one-sided test of level ``alpha`` (stop when ``Z_k >= c_k``).
    A look at ``t = 1`` spends whatever is left, so the overall level is exactly ``alpha``.
    """
    tt = tuple(float(min(1.0, v)) for v in t)
    if any(b <= a for a, b in zip(tt, tt[1:], strict=False)) or not tt or tt[0] <= 0:
        raise ValueError("information fractions must be increasing in (0, 1]")
    return np.asarray(_spending_boundaries(tt, float(alpha), kind, sides))


def classical_boundaries(looks: int, alpha: float = ALPHA, kind: str = "obf", sides: int = 2) -> np.ndarray:
    """The original equally spaced designs: Pocock (1977) ``c_k = C`` and O'Brien and Fleming (1979)
    ``c_k = C sqrt(K / k)``, C solved so the overall level is ``alpha`` (two-sided symmetric or one-sided).
    For reference values (Jennison and Turnbull 2000, tables 2.1 and 2.3)."""
    if kind not in SPENDING:
        raise ValueError(f"kind must be one of {SPENDING}")
    t = np.arange(1, looks + 1) / looks
    shape = np.sqrt(looks / np.arange(1, looks + 1)) if kind == "obf" else np.ones(looks)

    def level(c: float) -> float:
        up = c * shape
        p = exit_probabilities(t, up, -up if sides == 2 else np.full(looks, -np.inf))
        return float(p["up"].sum() + p["down"].sum()) - alpha

    return brentq(level, 0.5, 10.0, xtol=1e-8) * shape


# ------------------------------------------------------------------------------------------ estimate
def se_floor(n: int) -> float:
    """Smallest SE a look may use: one question's worth of difference, 1/n. With identical repeats
    (every d_i equal) the observed SE is 0 and would make any Δ 'significant' and any margin 'equivalent'."""
    return 1.0 / max(1, int(n))


def z_statistic(delta: float, se: float, n: int, floor: float | None = None) -> float:
    """``delta / max(se, floor)`` (floor default :func:`se_floor`); 0 when delta is 0."""
    s = max(float(se) if np.isfinite(se) else 0.0, se_floor(n) if floor is None else floor)
    return 0.0 if delta == 0 else float(delta) / s


def question_level_estimate(a_launches: Sequence[np.ndarray], b_launches: Sequence[np.ndarray]
                            ) -> tuple[float, float, int]:
    """Δ, its SE and the number of questions, with the question as the unit and launches as clusters.

    Each element of ``a_launches`` / ``b_launches`` is one launch's scores, shape ``(passes, n)`` or
    ``(n,)``, 1/0 or NaN (a request error: that pass is not counted). Per question: mean over the passes
    of a launch, then mean over the launches; questions with no answer in an arm are left out.
    ``d_i = B_i - A_i``; Δ = mean(d); SE = sd(d) / sqrt(n) (ddof 1).
    """
    def arm_means(launches: Sequence[np.ndarray]) -> np.ndarray:
        per_launch = []
        for s in launches:
            m = np.atleast_2d(np.asarray(s, dtype=float))
            with np.errstate(invalid="ignore"):
                per_launch.append(np.nanmean(m, axis=0) if m.shape[0] > 1 else m[0])
        stack = np.vstack(per_launch)
        with np.errstate(invalid="ignore"):
            cnt = np.sum(~np.isnan(stack), axis=0)
            tot = np.nansum(stack, axis=0)
        return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)

    a = arm_means(a_launches)
    b = arm_means(b_launches)
    d = b - a
    d = d[~np.isnan(d)]
    n = int(d.size)
    if n < 2:
        return 0.0, math.inf, n
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(n)), n


# ------------------------------------------------------------------------------------------ the design
@dataclass(frozen=True)
class SequentialDesign:
    """What a sequential run decides with. Margins and effects are fractions (0.01 = 1 pp)."""

    max_repeats: int
    min_repeats: int = 1
    alpha: float = ALPHA
    spending: str = "obf"
    hypothesis: str = "superiority"
    margin: float | None = None
    #: one-sided level of each equivalence / non-inferiority test (None: alpha for equivalence, as the
    #: fixed design's TOST; alpha / 2 for non-inferiority)
    alpha_equivalence: float | None = None
    futility: bool = True
    futility_power: float = 0.02
    futility_from: float = 0.5
    #: the declared practical effect (fraction): an efficacy stop also needs the repeated CI beyond ±min_effect
    min_effect: float | None = None

    def __post_init__(self) -> None:
        if self.max_repeats < 1 or not 1 <= self.min_repeats <= self.max_repeats:
            raise ValueError("need 1 <= min_repeats <= max_repeats")
        if not 0 < self.alpha < 1:
            raise ValueError("alpha must be in (0, 1)")
        if self.spending not in SPENDING:
            raise ValueError(f"spending must be one of {SPENDING}")
        if self.hypothesis not in HYPOTHESES:
            raise ValueError(f"hypothesis must be one of {HYPOTHESES}")
        if self.hypothesis != "superiority" and (self.margin is None or self.margin <= 0):
            raise ValueError(f"hypothesis={self.hypothesis} needs a positive margin")
        if self.margin is not None and self.margin <= 0:
            raise ValueError("margin must be positive")
        if not 0 <= self.futility_power < 1 or not 0 <= self.futility_from <= 1:
            raise ValueError("futility_power must be in [0, 1) and futility_from in [0, 1]")
        if self.min_effect is not None and self.min_effect < 0:
            raise ValueError("min_effect must be >= 0")

    @property
    def looks(self) -> list[int]:
        """The planned looks: after repeat min_repeats, min_repeats + 1, ..., max_repeats."""
        return list(range(self.min_repeats, self.max_repeats + 1))

    def info(self, repeats: int) -> float:
        return min(1.0, repeats / self.max_repeats)

    @property
    def eq_alpha(self) -> float:
        if self.alpha_equivalence is not None:
            return self.alpha_equivalence
        return self.alpha / 2 if self.hypothesis == "noninferiority" else self.alpha

    @property
    def tests_margin(self) -> bool:
        return self.margin is not None

    def efficacy_bounds(self) -> np.ndarray:
        """Two-sided efficacy boundaries at the planned looks (z scale)."""
        return spending_boundaries([self.info(k) for k in self.looks], self.alpha, self.spending, 2)

    def margin_bounds(self) -> np.ndarray:
        """One-sided boundaries of the equivalence / non-inferiority tests at the planned looks."""
        return spending_boundaries([self.info(k) for k in self.looks], self.eq_alpha, self.spending, 1)

    def bound_at(self, repeats: int, which: str = "efficacy") -> float:
        """The boundary of the look after ``repeats`` repeats (a look past the last uses the last)."""
        b = self.efficacy_bounds() if which == "efficacy" else self.margin_bounds()
        return float(b[min(repeats, self.max_repeats) - self.min_repeats])

    def futility_z(self) -> np.ndarray:
        """Per planned look, the |z| below which a superiority-only design stops for futility (0: never).
        Conditional power under the current trend is increasing in |z|, so the rule is a z band."""
        out = np.zeros(len(self.looks))
        if not self.futility or self.tests_margin:
            return out
        c_last = float(self.efficacy_bounds()[-1])
        for j, k in enumerate(self.looks):
            t = self.info(k)
            if t < self.futility_from or t >= 1:
                continue
            if _cp_superiority(0.0, t, c_last) >= self.futility_power:
                continue
            hi = Z_MAX
            if _cp_superiority(hi, t, c_last) < self.futility_power:
                out[j] = hi
            else:
                def short(z: float, t: float = t) -> float:
                    return _cp_superiority(z, t, c_last) - self.futility_power
                out[j] = brentq(short, 0.0, hi, xtol=1e-9)
        return out


def _cp_superiority(z: float, t: float, c_last: float) -> float:
    """Conditional power (both directions) of crossing ``c_last`` at the last look under the current trend,
    from ``Z = z`` at information fraction ``t``: the final Z is N(z / sqrt(t), 1 - t)."""
    if t >= 1:
        return 1.0 if abs(z) >= c_last else 0.0
    m, s = z / math.sqrt(t), math.sqrt(1 - t)
    return float(ndtr((m - c_last) / s) + ndtr((-c_last - m) / s))


class LookErrors(TypedDict):
    """A look's error gate (:func:`harness.stats.launch_looks.decide_look_arms`): its action, p and discordant
    counts, and with ``bound`` the verdict of each error bound."""

    action: str
    p: float
    a_only: int
    b_only: int
    both: int
    bounds: NotRequired[dict[str, str | None]]


class LookDetails(TypedDict, total=False):
    """What a launch-aware look adds (:func:`harness.stats.launch_looks.decide_launch_look`): the t statistic,
    its df and nominal p, the t-scale boundaries, the launch variance and where it came from, the margin tests,
    the error gate."""

    t: float
    df: float
    p: float
    estimator: str
    sigma2_launch: float
    df_launch: int
    variance_source: str
    qualification: str | None
    n: int
    bound_t: float | None
    crossed: bool
    margin_t: list[float]
    margin_bound_t: float
    p_noninferiority: float
    p_equivalence: float
    errors: LookErrors


class LookEstimate(TypedDict):
    """The estimate a look decides on, as :class:`LookDecision` keywords."""

    repeats: int
    delta: float
    se: float
    z: float
    info_fraction: float


class LookFields(LookEstimate):
    """A look past its first repeats, as :class:`LookDecision` keywords: the estimate, the boundary and the
    repeated CI, and what the look's tests add."""

    bound: float | None
    alpha_spent: float
    repeated_ci: list[float] | None
    margin_z: NotRequired[list[float]]
    margin_bound: NotRequired[float]
    conditional_power: NotRequired[float]
    p: NotRequired[float]


def _pp(x: float) -> str:
    return f"{100 * x:+.2f} pp"


def decide_look(design: SequentialDesign, repeats: int, delta: float, se: float, n: int,
                floor: float | None = None) -> LookDecision:
    """Decide at the look after ``repeats`` repeats of both arms, from the question-level estimate
    ``delta`` (B - A, fraction) with standard error ``se`` over ``n`` questions.

    Pure and deterministic: the boundaries depend only on the design and the look, never on the data of
    earlier looks, so a resumed run decides the same way.
    """
    d = design
    t = d.info(repeats)
    s = max(float(se) if np.isfinite(se) else 0.0, se_floor(n) if floor is None else floor)
    z = 0.0 if delta == 0 else float(delta) / s
    last = repeats >= d.max_repeats
    est: LookEstimate = {"repeats": repeats, "delta": float(delta), "se": s, "z": z, "info_fraction": t}
    if repeats < d.min_repeats:
        return LookDecision(**est, stop=False, verdict=None, reason="before_min_repeats",
                            sentence=f"no look before repeat {d.min_repeats}", bound=None, alpha_spent=0.0,
                            repeated_ci=None)
    c = d.bound_at(repeats, "efficacy")
    spent = float(spend(t, d.alpha / 2, d.spending) * 2) if not last else d.alpha
    rci = [float(delta - c * s), float(delta + c * s)]
    base: LookFields = {**est, "bound": c, "alpha_spent": spent, "repeated_ci": rci}
    saved = max(0, d.max_repeats - repeats)
    where = f"after {repeats} of at most {d.max_repeats} repeats"
    if abs(z) >= c:
        word = "improved" if z > 0 else "regressed"
        return LookDecision(**base, stop=True, verdict=word, reason="efficacy", repeats_saved=saved,
                            sentence=f"{word} {where}: Δ = {_pp(delta)}, |z| = {abs(z):.2f} >= boundary "
                                     f"{c:.2f} (α spent {spent:.3g} of {d.alpha:g})")
    margin_z = margin_bound = None
    if d.tests_margin:
        m = float(d.margin)  # type: ignore[arg-type]
        e = d.bound_at(repeats, "margin")
        z_lo, z_hi = (delta + m) / s, (m - delta) / s
        margin_z, margin_bound = [float(z_lo), float(z_hi)], e
        base["margin_z"], base["margin_bound"] = margin_z, margin_bound
        if d.hypothesis == "noninferiority" and z_lo >= e:
            return LookDecision(**base, stop=True, verdict="noninferior", reason="noninferiority",
                                repeats_saved=saved,
                                sentence=f"noninferior {where}: Δ = {_pp(delta)} > -{100 * m:.2f} pp, "
                                         f"z = {z_lo:.2f} >= boundary {e:.2f} (one-sided α {d.eq_alpha:g})")
        if d.hypothesis != "noninferiority" and min(z_lo, z_hi) >= e:
            return LookDecision(**base, stop=True, verdict="equivalent", reason="equivalence",
                                repeats_saved=saved,
                                sentence=f"equivalent {where}: Δ = {_pp(delta)} within ±{100 * m:.2f} pp, both "
                                         f"one-sided z >= boundary {e:.2f} (α {d.eq_alpha:g} per side)")
    cp = _conditional_power(d, repeats, delta, s)
    base["conditional_power"] = cp
    if last:
        return LookDecision(**base, stop=True, verdict="inconclusive", reason="max_repeats",
                            sentence=f"inconclusive after all {repeats} repeats: Δ = {_pp(delta)}, |z| = "
                                     f"{abs(z):.2f} < boundary {c:.2f}" + _margin_txt(d, margin_z, margin_bound))
    if d.futility and t >= d.futility_from and cp < d.futility_power:
        return LookDecision(**base, stop=True, verdict="inconclusive", reason="futility", repeats_saved=saved,
                            sentence=f"inconclusive (futility) {where}: Δ = {_pp(delta)}; even the remaining "
                                     f"{saved} repeat(s) would reach a verdict with probability {cp:.3f} < "
                                     f"{d.futility_power:g} at the current estimate")
    return LookDecision(**base, stop=False, verdict=None, reason="continue",
                        sentence=f"continue {where}: |z| = {abs(z):.2f} < boundary {c:.2f}")


def _margin_txt(d: SequentialDesign, margin_z: list[float] | None, bound: float | None) -> str:
    if margin_z is None or bound is None or d.margin is None:
        return ""
    what = "non-inferiority" if d.hypothesis == "noninferiority" else "equivalence"
    return f"; {what} within {100 * d.margin:.2f} pp not shown (z {min(margin_z):.2f} < {bound:.2f})"


def _conditional_power(d: SequentialDesign, repeats: int, delta: float, se: float) -> float:
    """Probability of reaching a verdict at the last look if ``delta`` were the true effect (the current
    trend): the final estimate is N(delta, se_K^2 (1 - t)) with se_K = se sqrt(t) (information grows with
    the repeats). The largest over the verdicts the design can reach."""
    t = d.info(repeats)
    if t >= 1:
        return 0.0
    se_k = max(se * math.sqrt(t), 1e-300)
    sd = se_k * math.sqrt(1 - t)
    c = d.bound_at(d.max_repeats, "efficacy")
    cps = [float(ndtr((delta - c * se_k) / sd) + ndtr((-c * se_k - delta) / sd))]
    if d.tests_margin:
        m, e = float(d.margin), d.bound_at(d.max_repeats, "margin")  # type: ignore[arg-type]
        if d.hypothesis == "noninferiority":
            cps.append(float(ndtr((delta + m - e * se_k) / sd)))
        else:
            lo, hi = -m + e * se_k, m - e * se_k
            cps.append(float(max(0.0, ndtr((hi - delta) / sd) - ndtr((lo - delta) / sd))))
    return max(cps)


# ------------------------------------------------------------------------------------------ p-values
def stagewise_p(design: SequentialDesign, repeats: int, z: float, which: str = "efficacy") -> float:
    """The stage-wise ordering p-value (Armitage 1957; Fairbanks and Madsen 1982; Jennison and Turnbull 2000,
    §8.4) of a look after ``repeats`` repeats with statistic ``z``: under H0, the probability of stopping with
    the same verdict at an earlier look, or at this look with a statistic at least as extreme,

        p = Σ_{j < k} P(stop at look j) + P(reach look k and |Z_k| >= |z|)     (``which="efficacy"``, two-sided)

    on the design's boundaries (futility is non-binding and ignored: the p is conservative when it stops a run).
    ``which="margin"``: the one-sided margin test (equivalence side or non-inferiority) with its boundaries e_j
    and Z_k >= z. With the design's own boundaries, p <= α exactly when the look crosses its boundary (at the
    last look, p = α on it), so a sweep's multiplicity adjustment acts on the p that decided."""
    d = design
    looks = [k for k in d.looks if k <= repeats] or [repeats]
    k = len(looks)
    t = [d.info(j) for j in looks]
    if which == "efficacy":
        bounds = [d.bound_at(j, "efficacy") for j in looks[:-1]] + [abs(z)]
        p = exit_probabilities(t, bounds)
        return float(min(1.0, max(0.0, p["up"][:k].sum() + p["down"][:k].sum())))
    if which != "margin":
        raise ValueError("which must be efficacy or margin")
    bounds = [d.bound_at(j, "margin") for j in looks[:-1]] + [z]
    p = exit_probabilities(t, bounds, np.full(k, -np.inf))
    return float(min(1.0, max(0.0, p["up"][:k].sum())))


# ------------------------------------------------------------------------------------------ planning
class OperatingCharacteristics(TypedDict):
    """Power, rejection rate and expected repeats of a design at one drift, and the stopping probability of each
    look (:func:`operating_characteristics`)."""

    power: float
    reject: float
    expected_repeats: float
    stop_probability: list[float]
    futility_probability: float
    looks: list[int]
    bounds: list[float]
    futility_z: list[float]


def operating_characteristics(design: SequentialDesign, drift: float,
                              info: Sequence[float] | None = None) -> OperatingCharacteristics:
    """Power and expected repeats of a superiority design (margin-free) when ``E[Z] = drift sqrt(t)``.

    ``drift`` is the effect over the SE of the estimate at ``max_repeats`` (``effect / se_K``). ``info``:
    the true information fractions at the planned looks when they are not ``k / K`` (an effect that
    differs between questions); the boundaries stay those of the plan. Futility is included.
    """
    looks = design.looks
    t = np.asarray(info if info is not None else [design.info(k) for k in looks], dtype=float)
    c = design.efficacy_bounds()
    f = design.futility_z()
    p = exit_probabilities(t, c, -c, drift, [(-v, v) for v in f])
    stop = p["up"] + p["down"] + p["gap"]
    stop[-1] = 1.0 - float(np.sum(stop[:-1]))  # the last look always stops
    expected = float(np.sum(np.asarray(looks) * stop))
    return {"power": float(p["up"].sum()) if drift >= 0 else float(p["down"].sum()),
            "reject": float(p["up"].sum() + p["down"].sum()), "expected_repeats": expected,
            "stop_probability": [float(v) for v in stop], "futility_probability": float(p["gap"].sum()),
            "looks": looks, "bounds": [float(v) for v in c], "futility_z": [float(v) for v in f]}
