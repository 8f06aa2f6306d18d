"""Sequential repeats: a group-sequential test with Lan-DeMets alpha spending (O'Brien-Fleming type by
default, Pocock on request), a look after every repeat at information fraction ``t_k = k / max_repeats``.

Looks stop for efficacy (two-sided), equivalence / non-inferiority (one-sided margin boundaries) or futility
(non-binding: conditional power below ``futility_power``); the last look always stops. Boundaries come from
the recursive numerical integration of Armitage, McPherson and Rowe (1969) over ``Corr(Z_j, Z_k) = sqrt(t_j /
t_k)``; why spending rather than a confidence sequence: docs/statistics.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TypedDict

import numpy as np
from scipy.special import ndtr, ndtri

from harness.stats.roots import brentq

from .verdict import ALPHA, HYPOTHESES

SPENDING = ("obf", "pocock")
#: z boundary used when a look spends (almost) nothing: nothing real reaches it
Z_MAX = 40.0
_TAIL_SD = 9.0  # an unbounded continuation region is cut this many SDs from the mean


# ------------------------------------------------------------------------------------------ spending
def spend(t: float | np.ndarray, alpha: float, kind: str = "obf") -> np.ndarray:
    """Cumulative one-sided alpha spent by information fraction ``t`` (Lan and DeMets 1983):
    ``obf`` ``2 - 2 Φ(z_{1-α/2} / sqrt(t))``, ``pocock`` ``α log(1 + (e - 1) t)``. A two-sided design of
    level α spends ``spend(t, α/2)`` on each side (gsDesign's convention)."""
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
    (see :func:`exit_probabilities`)."""

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
        y, wy = np.concatenate([q[0] for q in pieces]), np.concatenate([q[1] for q in pieces])
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
    """Per look, the probabilities of stopping **up** (``Z_k >= upper[k]``), **down** (``Z_k <= lower[k]``,
    default ``-upper``), in the futility **gap** (``gap[k][0] < Z_k < gap[k][1]``) and of going on, for
    ``Corr(Z_j, Z_k) = sqrt(t_j / t_k)`` and mean ``drift * sqrt(t_k)``: recursive numerical integration
    (Jennison and Turnbull 2000, ch. 19) of the score ``S_k = Z_k sqrt(t_k)`` by Simpson's rule."""
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
    """Lan-DeMets boundaries ``c_k`` (z scale) at information fractions ``t`` (increasing, in (0, 1]) of a
    symmetric two-sided (``sides=2``) or one-sided test of level ``alpha``; a look at ``t = 1`` spends
    whatever is left, so the overall level is exactly ``alpha``."""
    tt = tuple(float(min(1.0, v)) for v in t)
    if any(b <= a for a, b in zip(tt, tt[1:], strict=False)) or not tt or tt[0] <= 0:
        raise ValueError("information fractions must be increasing in (0, 1]")
    return np.asarray(_spending_boundaries(tt, float(alpha), kind, sides))


@dataclass(frozen=True)
class SequentialDesign:
    """What a sequential run decides with. Margins and effects are fractions (0.01 = 1 pp)."""

    max_repeats: int
    min_repeats: int = 1
    alpha: float = ALPHA
    spending: str = "obf"
    hypothesis: str = "superiority"
    margin: float | None = None
    #: one-sided level of each margin test (None: alpha for equivalence, alpha / 2 for non-inferiority)
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
        return spending_boundaries([self.info(k) for k in self.looks], self.alpha, self.spending, 2)

    def margin_bounds(self) -> np.ndarray:
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


# ------------------------------------------------------------------------------------------ p-values
def stagewise_p(design: SequentialDesign, repeats: int, z: float, which: str = "efficacy") -> float:
    """The stage-wise ordering p-value (Jennison and Turnbull 2000, §8.4) of the look after ``repeats``
    repeats with statistic ``z`` under H0 on the design's boundaries (futility ignored: conservative);
    ``margin``: one-sided on the margin boundaries. p <= α exactly when the look crosses its boundary."""
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
    """Power and expected repeats of a superiority design when ``E[Z] = drift sqrt(t)`` (``drift``: the effect
    over the SE at ``max_repeats``), futility included. ``info``: the true information fractions at the
    planned looks when they are not ``k / K``; the boundaries stay those of the plan."""
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
