"""What a scoring answer's numbers must be before they are data: the rules every protocol's parser applies, on
one value, one position's alternatives, or a whole answer's arrays at once (numpy, for the fast parser).

A logprob is finite and at most 0 (a NaN would make a divergence INDISTINGUISHABLE, a +Infinity a KL of
exactly 0); a top-k is k distinct ids sorted by logprob. Each check returns why the numbers cannot be a
server's, naming the value and the position, or None; the parser raises it as the request's error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

#: How far above 0 a logprob may be (float round-off of log_softmax for a token of probability ~1)
LOGPROB_ROUNDOFF = 1e-6
_RULE = "a logprob is finite and <= 0"


def logprob_problem(value: Any, where: str) -> str | None:
    """Why ``value`` (a number a server wrote; null is the caller's business) is no logprob, or None."""
    v = float(value)
    if math.isfinite(v) and v <= LOGPROB_ROUNDOFF:
        return None
    return f"impossible logprob {value!r} {where} ({_RULE})"


def top_problem(ids: Sequence[int | None], logprobs: Sequence[float], k: int, where: str, *,
                ordered: bool = True, exact: bool = True, spare: int = 0) -> str | None:
    """Why one position's alternatives (logprobs, -inf for a null) are not a top-``k``, or None: an id twice,
    fewer (``exact``) or more than ``k`` (+ ``spare``: the token itself), not sorted (``ordered``)."""
    if len(logprobs) > k + spare or (exact and len(logprobs) < k):
        return f"{len(logprobs)} alternatives {where} where {k} were asked"
    given = [i for i in ids if i is not None]
    if len(set(given)) != len(given):
        twice = next(i for n, i in enumerate(given) if i in given[:n])
        return f"token id {twice} twice among the alternatives {where}"
    if ordered:
        for n in range(1, len(logprobs)):
            if logprobs[n] > logprobs[n - 1]:
                return (f"alternatives {where} not sorted by logprob ({logprobs[n]!r} after "
                        f"{logprobs[n - 1]!r})")
    return None


def array_problem(x: np.ndarray, name: str = "", row0: int = 0) -> str | None:
    """:func:`logprob_problem` over ``x`` at once, its first axis the reference token (from ``row0``);
    ``name`` says which logprobs they are."""
    import numpy as np
    ok = np.isfinite(x) & (x <= LOGPROB_ROUNDOFF)
    if ok.all():
        return None
    bad = np.unravel_index(int(np.argmin(ok)), x.shape)
    return f"impossible logprob {name}{float(x[bad])!r} at reference token {row0 + int(bad[0])} ({_RULE})"


def dense_problem(lp: np.ndarray, top_lp: np.ndarray, top_ids: np.ndarray, k: int,
                  asked: np.ndarray | None = None) -> str | None:
    """:func:`logprob_problem` and :func:`top_problem` over a whole answer: ``lp`` (T,),
    ``top_lp``/``top_ids`` (T, w) in the server's order, ``asked`` (T, m) the asked ids' logprobs."""
    import numpy as np
    for name, x in (("", lp), ("of an alternative ", top_lp), ("of an asked id ", asked)):
        problem = None if x is None else array_problem(x, name)
        if problem is not None:
            return problem
    if top_lp.shape[1] != k:
        return f"{top_lp.shape[1]} alternatives per reference token where {k} were asked"
    if k > 1:
        rising = np.diff(top_lp, axis=1) > 0
        if rising.any():
            t, j = np.unravel_index(int(np.argmax(rising)), rising.shape)
            return (f"alternatives at reference token {int(t)} not sorted by logprob ({float(top_lp[t, j + 1])!r} "
                    f"after {float(top_lp[t, j])!r})")
        same = np.sort(top_ids, axis=1)
        twice = same[:, 1:] == same[:, :-1]
        if twice.any():
            t, j = np.unravel_index(int(np.argmax(twice)), twice.shape)
            return f"token id {int(same[t, j])} twice among the alternatives at reference token {int(t)}"
    return None


def asked_problem(ids: Sequence[int | None], want: Sequence[int] | None, where: str) -> str | None:
    """Why the asked ids' entries at one position are not one per id asked (``want``; None: none), or None."""
    if want is None or list(ids) == list(want):
        return None
    return f"{len(ids)} asked-id entries {where} ({list(ids)[:4]}...) where the {len(want)} ids {list(want)[:4]}... were asked"
