"""Request parsing and response shapes of the simulated engine's wire protocols (SGLang and OpenAI/vLLM).

The shapes below follow SGLang's ``GenerateReqInput`` (``python/sglang/srt/managers/io_struct.py``), its
scheduler's logprob processing (the first input position's logprob is always ``null``, the last one is
dropped) and ``TokenizerManager.detokenize_logprob_tokens`` (each entry ``[logprob, token_id, text|null]``),
SGLang's ``/tokenize`` (``TokenizeRequest``/``TokenizeResponse``) and vLLM's ``/v1/completions``
(``CompletionLogProbs``, ``echo`` with ``max_tokens: 0``, the ``prompt_logprobs`` extension). Token ids are
the simulator's toy tokenizer's (``abh_simulator.tokens``); get them from ``/tokenize``.

SGLang ``POST /generate``
-------------------------
Request (exactly one of ``text`` / ``input_ids``; a list of prompts is a batch and gets a list back)::

    {"text": str | [str], "input_ids": [int] | [[int]],
     "sampling_params": {"max_new_tokens": int >= 0, "temperature": 0, "stop": [...], ...},
     "return_logprob": bool = false,
     "logprob_start_len": int = -1,          # -1 = len(input_ids) - 1; must be < len(input_ids), else HTTP 400
     "top_logprobs_num": int = 0,
     "token_ids_logprob": [int] | null,      # the same ids scored at every position
     "return_text_in_logprobs": bool = false,
     "return_routed_experts": bool = false,
     "routed_experts_start_len": int = 0}    # 0 <= it <= len(input_ids), else HTTP 400

``return_logprob``, ``logprob_start_len``, ``top_logprobs_num`` and ``token_ids_logprob`` may also be
per-prompt lists in a batch. Response (one prompt)::

    {"text": str,
     "meta_info": {"id": str, "prompt_tokens": L, "completion_tokens": G, "cached_tokens": int,
                   "finish_reason": {"type": "stop", "matched": str | int} | {"type": "length", "length": int},
                   "e2e_latency": float, "simulated": true,
                   # only with return_logprob (s = resolved logprob_start_len, L = prompt tokens):
                   "input_token_logprobs":  [[null, ids[s], t], [lp, ids[s+1], t], ..., [lp, ids[L-1], t]],
                   "output_token_logprobs": [[lp, out_id, t], ...],          # G entries; [] for max_new_tokens 0
                   # only with top_logprobs_num = k > 0 (sorted by logprob, descending):
                   "input_top_logprobs":  [null, [[lp, id, t] x k], ...],   # aligned with input_token_logprobs
                   "output_top_logprobs": [[[lp, id, t] x k], ...],
                   # only with token_ids_logprob = [i1, ..., iR] (in that order):
                   "input_token_ids_logprobs":  [null, [[lp, i1, t], ..., [lp, iR, t]], ...],
                   "output_token_ids_logprobs": [[[lp, i1, t], ...], ...],
                   # only with return_routed_experts (and engine.enable_return_routed_experts):
                   "routed_experts": base64, "routed_experts_dtype": "int32" | "uint16" | "uint8"}}

``t`` is the token's text with ``return_text_in_logprobs``, else ``null``. Entry ``j`` of the input arrays is
input position ``s + j`` and its logprob is that of ``ids[s + j]`` given ``ids[:s + j]``, except entry 0,
whose logprob is always ``null`` (as in SGLang). So to score reference tokens ``ids[P:]`` after a prompt of
``P`` tokens, send ``logprob_start_len = P - 1`` and read entries ``1..``. ``routed_experts``: base64 of
little-endian ``routed_experts_dtype`` (``SGLANG_ROUTED_EXPERTS_DTYPE`` where the ids fit, else int32), C order, shape ``(L + G - 1 - routed_experts_start_len, num_layers, topk)`` (see
``abh_simulator.experts``). Output ids include the tokens of a matched stop string and the EOS id (2).

SGLang ``POST /tokenize`` and ``POST /detokenize`` (also under ``/v1/``)
------------------------------------------------------------------------
``{"prompt": str | [str], "add_special_tokens": bool = true}`` ->
``{"tokens": [int] | [[int]], "count": int | [int], "max_model_len": int}`` (no special token is added);
``{"tokens": [int] | [[int]]}`` -> ``{"text": str | [str]}``.

OpenAI/vLLM ``POST /v1/completions``
------------------------------------
Request: ``{"model", "prompt": str | [str] | [int] | [[int]], "max_tokens": int >= 0 = 16, "echo": bool,
"logprobs": int 0..20 | null, "prompt_logprobs": int 0..20 | null, "n", "stop", "temperature", ...,
"return_routed_experts": bool}``. ``max_tokens: 0`` with ``echo: true`` scores the prompt only (vLLM;
SGLang's own OpenAI server refuses 0). Response::

    {"id", "object": "text_completion", "created", "model",
     "choices": [{"index": 0,
                  "text": (echo ? prompt : "") + completion,
                  "finish_reason": "stop" | "length", "stop_reason": str | int | null,
                  "logprobs": null | {                          # with "logprobs": k
                      "tokens": [str],                          # echo: prompt tokens then completion tokens
                      "token_logprobs": [float | null],         # null for the very first prompt token
                      "top_logprobs": [null | {token: float}],  # top k plus the token itself: k or k+1 keys
                      "text_offset": [int]},                    # offset of each token in "text"
                  "prompt_logprobs": [null, {"<id>": {"logprob": f, "rank": int, "decoded_token": str}}, ...]}],
                                                                # only with "prompt_logprobs": k (vLLM)
     "usage": {"prompt_tokens", "completion_tokens", "total_tokens"},
     "sglext": {"routed_experts": base64}}                      # only with return_routed_experts (SGLang)

Completion tokens in ``logprobs`` are the tokens of the returned completion text (so ``"".join(tokens) ==
text``); ``usage.completion_tokens`` counts every generated token (stop string and EOS included).
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from abh_simulator.state import SimError, SimState

if TYPE_CHECKING:
    import numpy as np

    from abh_simulator.logprobs import Scores

#: sampling_params keys SGLang accepts; anything else is HTTP 400 (as newer SGLang does).
ALLOWED_SAMPLING_KEYS = frozenset({
    "skip_special_tokens", "spaces_between_special_tokens", "max_new_tokens", "min_new_tokens", "n",
    "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k", "min_p",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "ignore_eos", "regex", "json_schema",
    "ebnf", "structural_tag", "no_stop_trim", "custom_params", "sampling_seed", "logit_bias",
    "stream_interval", "thinking_budget",
})
#: vLLM's default --max-logprobs.
MAX_OPENAI_LOGPROBS = 20
MAX_MODEL_LEN = 32768


# ------------------------------------------------------------------------------------------ values
def as_str_list(v: Any, name: str) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return list(v)
    raise SimError(400, f"{name} must be a string or a list of strings")


def as_int(v: Any, name: str, default: int, lo: int = 0) -> int:
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise SimError(400, f"{name} must be an integer >= {lo}, not {v!r}")
    return v


def _is_ids(v: Any) -> bool:
    return isinstance(v, list) and set(map(type, v)) <= {int}  # ints, not bools (a scoring request sends ~1000)


def check_common(temperature: Any, top_p: Any) -> None:
    if temperature is not None and (not isinstance(temperature, int | float) or temperature < 0):
        raise SimError(400, f"temperature must be a number >= 0, not {temperature!r}")
    if top_p is not None and (not isinstance(top_p, int | float) or not 0 < top_p <= 1):
        raise SimError(400, f"top_p must be in (0, 1], not {top_p!r}")


def _per_item(v: Any, i: int, batched: bool) -> Any:
    return v[i] if batched and isinstance(v, list) else v


def _check_vocab(st: SimState, ids: list[int], name: str) -> None:
    if ids and (min(ids) < 0 or max(ids) >= st.cfg.vocab_size):
        raise SimError(400, f"{name} holds a token id outside [0, {st.cfg.vocab_size})")


# --------------------------------------------------------------------------------------- requests
@dataclass
class Item:
    """One prompt of a request, validated."""

    text: str
    ids: list[int]
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    token_ids_logprob: list[int] | None = None
    gen: dict[str, Any] = field(default_factory=dict)


def parse_generate(st: SimState, body: dict[str, Any]) -> tuple[list[Item], int, bool, dict[str, Any]]:
    """(items, n, batched, request options) of an SGLang /generate body; SimError 400 on anything invalid."""
    if body.get("stream"):
        raise SimError(400, "streaming is not supported by the simulated engine")
    text, input_ids = body.get("text"), body.get("input_ids")
    if (text is None) == (input_ids is None):
        raise SimError(400, "Either text or input_ids should be provided (exactly one).")
    if text is not None:
        texts = [text] if isinstance(text, str) else text
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise SimError(400, "text must be a string or a non-empty list of strings")
        batched = isinstance(text, list)
        prompts = [(t, st.tokenizer.encode(t)) for t in texts]
    else:
        if _is_ids(input_ids) and input_ids:
            lists, batched = [input_ids], False
        elif isinstance(input_ids, list) and input_ids and all(_is_ids(x) and x for x in input_ids):
            lists, batched = input_ids, True
        else:
            raise SimError(400, "input_ids must be a non-empty list of ints or a list of such lists")
        for ids in lists:
            _check_vocab(st, ids, "input_ids")
        prompts = [(st.tokenizer.decode(ids, in_vocab=True), list(ids)) for ids in lists]  # checked above
    sp = body.get("sampling_params") or {}
    if isinstance(sp, list):
        sp = sp[0] if sp else {}
    if not isinstance(sp, dict):
        raise SimError(400, "sampling_params must be an object")
    unknown = sorted(set(sp) - ALLOWED_SAMPLING_KEYS)
    if unknown:
        raise SimError(400, f"Unknown sampling parameter(s): {', '.join(unknown)}")
    check_common(sp.get("temperature"), sp.get("top_p"))
    gen = {
        "max_new": as_int(sp.get("max_new_tokens"), "max_new_tokens", 128),
        "min_new": as_int(sp.get("min_new_tokens"), "min_new_tokens", 0),
        "stops": as_str_list(sp.get("stop"), "stop"),
        "stop_regex": as_str_list(sp.get("stop_regex"), "stop_regex"),
        "ignore_eos": bool(sp.get("ignore_eos") or False),
        "no_stop_trim": bool(sp.get("no_stop_trim") or False),
    }
    n = as_int(sp.get("n"), "n", 1, lo=1)
    tids = body.get("token_ids_logprob")
    items = []
    for i, (t, ids) in enumerate(prompts):
        want = tids[i] if batched and isinstance(tids, list) and tids and isinstance(tids[0], list) else tids
        if want is not None and not _is_ids(want):
            raise SimError(400, "token_ids_logprob must be a list of token ids (or one list per prompt)")
        if want is not None:
            _check_vocab(st, want, "token_ids_logprob")
        item = Item(text=t, ids=ids, gen=gen,
                    return_logprob=bool(_per_item(body.get("return_logprob"), i, batched) or False),
                    logprob_start_len=as_int(_per_item(body.get("logprob_start_len"), i, batched),
                                             "logprob_start_len", -1, lo=-1),
                    top_logprobs_num=as_int(_per_item(body.get("top_logprobs_num"), i, batched),
                                            "top_logprobs_num", 0),
                    token_ids_logprob=want)
        if item.return_logprob and item.logprob_start_len >= len(ids):
            raise SimError(400, f"logprob_start_len ({item.logprob_start_len}) is higher than the number of input "
                                f"tokens ({len(ids)}). Request with a lower logprob_start_len.")
        items.append(item)
    opts = {"return_text_in_logprobs": bool(body.get("return_text_in_logprobs") or False),
            "return_routed_experts": bool(body.get("return_routed_experts") or False),
            "routed_experts_start_len": as_int(body.get("routed_experts_start_len"), "routed_experts_start_len", 0)}
    if opts["return_routed_experts"]:
        for it in items:
            if opts["routed_experts_start_len"] > len(it.ids):
                raise SimError(400, f"routed_experts_start_len ({opts['routed_experts_start_len']}) must be in "
                                    f"[0, prompt_tokens={len(it.ids)}]")
    return items, n, batched, opts


# -------------------------------------------------------------------------------------- responses
def _entry(st: SimState, lp: float | None, tid: int, with_text: bool) -> list[Any]:
    return [lp, tid, st.tokenizer.token_text(tid) if with_text else None]


def generate_one(st: SimState, item: Item, opts: dict[str, Any], t0: float) -> dict[str, Any]:
    """Run one prompt and build SGLang's ``{"text", "meta_info"}`` for it."""
    r = st.complete(item.text, prompt_ids=item.ids, **item.gen)
    meta: dict[str, Any] = {
        "id": uuid.uuid4().hex,
        "prompt_tokens": r["prompt_tokens"],
        "completion_tokens": r["completion_tokens"],
        "cached_tokens": r["cached_tokens"],
        "finish_reason": r["finish"],
    }
    full = item.ids + r["output_ids"]
    states, scores = None, None
    prescored = opts.get("prescored")
    if prescored is not None:
        states, scores = next(prescored)
    elif item.return_logprob or (opts["return_routed_experts"] and st.cfg.enable_return_routed_experts):
        from abh_simulator.hashing import context_states  # numpy: only when asked for

        states = context_states(full, st.cfg.seed)
    if item.return_logprob:
        _sglang_logprobs(st, item, full, opts["return_text_in_logprobs"], states, opts.get("pending"), meta, scores)
    if opts["return_routed_experts"] and st.cfg.enable_return_routed_experts:
        meta["routed_experts"], meta["routed_experts_dtype"] = st.routed_experts(full, opts["routed_experts_start_len"],
                                                                                  states)
    meta["e2e_latency"] = time.perf_counter() - t0
    meta["simulated"] = True
    return {"text": r["text"], "meta_info": meta}


def prescore(st: SimState, items: list[Item], n: int) -> Iterator[tuple[list[int], Scores]] | None:
    """Per item (each ``n`` times, in order), its context states and scores, all the request's positions scored in
    one pass: for a request that only scores (every item asks logprobs and generates nothing, so what is scored is
    known before any item runs); None for any other (each item is scored as it runs)."""
    if not items or any(not it.return_logprob or it.gen["max_new"] > 0 for it in items):
        return None
    from abh_simulator.hashing import context_states_many

    states = [x for x in context_states_many([it.ids for it in items], st.cfg.seed) for _ in range(n)]
    asks = [(it.ids, _start(it) + 1, it.top_logprobs_num, it.token_ids_logprob, states[j])
            for j, it in enumerate(it for it in items for _ in range(n))]
    return iter(zip(states, st.score_many(asks), strict=True))


def _start(item: Item) -> int:
    """The item's resolved ``logprob_start_len``."""
    return item.logprob_start_len if item.logprob_start_len >= 0 else len(item.ids) - 1


def _sglang_logprobs(st: SimState, item: Item, full: list[int], with_text: bool,
                     states: list[int] | None, pending: list[Pending | OwnPending] | None = None,
                     out: dict[str, Any] | None = None, scores: Scores | None = None) -> dict[str, Any]:
    """The ``meta_info`` logprob arrays of one item, put into ``out`` (a new dict: None). ``pending``: the
    alternatives' arrays are left to :func:`write_pending` (written for every item of a request at once).
    ``scores``: the item's, scored already (:func:`prescore`)."""
    n_in = len(item.ids)
    s = _start(item)
    sc = scores if scores is not None else st.score(full, s + 1, item.top_logprobs_num, item.token_ids_logprob, states)
    at = {p: j for j, p in enumerate(sc.positions)}

    def lp(p: int) -> float | None:
        return sc.token_logprobs[at[p]] if p in at else None

    out = {} if out is None else out
    own = None if with_text or len(full) != n_in else _own_fragment(out, full, s, sc, pending)
    out.update({
        "input_token_logprobs": own if own is not None else [
            _entry(st, None if p == s else lp(p), full[p], with_text) for p in range(s, n_in)],
        "output_token_logprobs": [_entry(st, lp(p), full[p], with_text) for p in range(n_in, len(full))],
    })
    # the alternatives' entries: without texts written by numpy as JSON text (abh_simulator.jsonfmt; a
    # scoring pass makes ~6 million of them), with texts built inline
    text = st.tokenizer.token_text
    n_rows = n_in - s - 1  # input positions after the first (null) one; the output positions follow
    if item.top_logprobs_num > 0:
        def top(p: int) -> list[list[Any]]:
            if with_text:
                return [[v, i, text(i)] for i, v in sc.top[at[p]]]
            return [[v, i, None] for i, v in sc.top[at[p]]]
        fast = (None if with_text or sc.top_ids is None or sc.top_logprobs is None else
                _alternatives(out, "top", sc.top_logprobs, sc.top_ids, n_rows, pending))
        out["input_top_logprobs"], out["output_top_logprobs"] = fast or (
            [None if p == s else top(p) for p in range(s, n_in)], [top(p) for p in range(n_in, len(full))])
    if item.token_ids_logprob is not None:
        want = item.token_ids_logprob
        want_text = [text(i) if with_text else None for i in want]

        def asked(p: int) -> list[list[Any]]:
            return [[v, i, t] for i, v, t in zip(want, sc.requested[at[p]], want_text, strict=True)]
        import numpy as np  # loaded where scores are asked for, not by every simulator
        got = sc.requested_logprobs
        fast = (None if with_text or got is None or not want else
                _alternatives(out, "token_ids", got, np.asarray(want, dtype=np.int64), n_rows, pending))
        out["input_token_ids_logprobs"], out["output_token_ids_logprobs"] = fast or (
            [None if p == s else asked(p) for p in range(s, n_in)], [asked(p) for p in range(n_in, len(full))])
    return out


def _own_fragment(out: dict[str, Any], ids: list[int], s: int, sc: Scores, pending: list[Pending | OwnPending] | None) -> Any:
    """``input_token_logprobs`` of an input scored from position ``s`` on, without texts, written by numpy (a
    scoring pass holds ~100k of them) now, or left to :func:`write_pending` (a placeholder until then); None: built
    as lists."""
    if len(sc.positions) != len(ids) - s - 1 or (sc.positions and sc.positions[0] != s + 1):
        return None
    import numpy as np
    import orjson

    from abh_simulator.jsonfmt import own_entries

    lps, own_ids = np.asarray(sc.token_logprobs, dtype=np.float64), np.asarray(ids[s + 1:], dtype=np.int64)
    if pending is not None:
        pending.append(OwnPending(out, ids[s], lps, own_ids))
        return "pending"
    body = own_entries(lps, own_ids, ids[s])
    return None if body is None else orjson.Fragment(body)


@dataclass
class OwnPending:
    """One item's own logprobs (``logprobs`` and ``ids``, (n,)), after a first null one of ``first_id``, to be
    written into ``out["input_token_logprobs"]`` by :func:`write_pending`."""

    out: dict[str, Any]
    first_id: int
    logprobs: np.ndarray
    ids: np.ndarray


def _alternatives(out: dict[str, Any], name: str, logprobs: np.ndarray, ids: np.ndarray, n_rows: int,
                  pending: list[Pending | OwnPending] | None) -> tuple[Any, Any] | None:
    """``input_{name}_logprobs`` and ``output_{name}_logprobs`` written by numpy now (None: they cannot be), or left
    to :func:`write_pending` (placeholders until then)."""
    if pending is None:
        return _fragments(logprobs, ids, n_rows)
    import numpy as np

    pending.append(Pending(out, f"input_{name}_logprobs", f"output_{name}_logprobs", logprobs,
                           np.broadcast_to(ids, logprobs.shape) if ids.ndim == 1 else ids, n_rows))
    return None, None


@dataclass
class Pending:
    """One item's alternatives (``logprobs`` and ``ids``, (n, k)), to be written into ``out[head]`` (the first
    ``n_rows`` rows, after one ``null``) and ``out[tail]`` by :func:`write_pending`."""

    out: dict[str, Any]
    head: str
    tail: str
    logprobs: np.ndarray
    ids: np.ndarray
    n_rows: int


def write_pending(pending: list[Pending | OwnPending]) -> None:
    """Write every item's alternatives of a request: those of one width by one call of numpy's writer (a scoring
    request holds 16 items of ~80 positions: a call per item and array cost the writer's set-up 64 times); the
    others, and any the writer cannot write, one by one."""
    import numpy as np
    import orjson

    from abh_simulator.jsonfmt import as_array, entry_rows

    _write_own([p for p in pending if isinstance(p, OwnPending)])
    by_k: dict[int, list[Pending]] = {}
    for p in pending:
        if isinstance(p, OwnPending):
            continue
        if p.logprobs.ndim == 2 and p.logprobs.shape[0] and p.logprobs.shape == p.ids.shape:
            by_k.setdefault(p.logprobs.shape[1], []).append(p)
        else:
            _write_one(p)
    for group in by_k.values():
        rows = entry_rows(np.concatenate([p.logprobs for p in group]), np.concatenate([p.ids for p in group]))
        if rows is None:
            for p in group:
                _write_one(p)
            continue
        at = 0
        for p in group:
            n = p.logprobs.shape[0]
            p.out[p.head] = orjson.Fragment(as_array(rows[at:at + p.n_rows], 1))
            p.out[p.tail] = orjson.Fragment(as_array(rows[at + p.n_rows:at + n], 0))
            at += n


def _write_own(own: list[OwnPending]) -> None:
    """Every item's own logprobs by one call of numpy's writer (each alone where a value cannot be written so)."""
    import numpy as np
    import orjson

    from abh_simulator.jsonfmt import own_array, own_rows

    rows = own_rows(np.concatenate([p.logprobs for p in own]), np.concatenate([p.ids for p in own])) if own else None
    at = 0
    for p in own:
        n = p.logprobs.shape[0]
        if rows is not None:
            p.out["input_token_logprobs"] = orjson.Fragment(own_array(rows[at:at + n], p.first_id))
        else:
            p.out["input_token_logprobs"] = [[None, p.first_id, None], *(
                [float(v), int(i), None] for v, i in zip(p.logprobs.tolist(), p.ids.tolist(), strict=True))]
        at += n


def _write_one(p: Pending) -> None:
    got = _fragments(p.logprobs, p.ids, p.n_rows)
    if got is None:  # as lists (a value numpy cannot write)
        def entries(r: int) -> list[list[Any]]:
            return [[float(v), int(i), None] for v, i in zip(p.logprobs[r].tolist(), p.ids[r].tolist(), strict=True)]
        got = ([None, *(entries(r) for r in range(p.n_rows))],
               [entries(r) for r in range(p.n_rows, p.logprobs.shape[0])])
    p.out[p.head], p.out[p.tail] = got


def _fragments(logprobs: np.ndarray, ids: np.ndarray, n_rows: int) -> tuple[Any, Any] | None:
    """The input and output arrays of ``[lp, id, null]`` entries as pre-written JSON (the first ``n_rows`` rows
    are input positions, after one ``null``; ``ids`` (k,): the same at every position); None when numpy cannot write them (then they are built as lists)."""
    import orjson

    from abh_simulator.jsonfmt import position_entries
    head = position_entries(logprobs[:n_rows], ids if ids.ndim == 1 else ids[:n_rows], 1)
    tail = position_entries(logprobs[n_rows:], ids if ids.ndim == 1 else ids[n_rows:], 0)
    if head is None or tail is None:
        return None
    return orjson.Fragment(head), orjson.Fragment(tail)


def parse_completions(st: SimState, body: dict[str, Any]) -> dict[str, Any]:
    """The validated options of an OpenAI /v1/completions body; SimError 400 on anything invalid."""
    if body.get("stream"):
        raise SimError(400, "streaming is not supported by the simulated engine")
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompts = [(prompt, st.tokenizer.encode(prompt))]
    elif _is_ids(prompt) and prompt:
        _check_vocab(st, prompt, "prompt")
        prompts = [(st.tokenizer.decode(prompt, in_vocab=True), list(prompt))]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        prompts = [(p, st.tokenizer.encode(p)) for p in prompt]
    elif isinstance(prompt, list) and prompt and all(_is_ids(p) and p for p in prompt):
        for p in prompt:
            _check_vocab(st, p, "prompt")
        prompts = [(st.tokenizer.decode(p, in_vocab=True), list(p)) for p in prompt]
    else:
        raise SimError(400, "prompt must be a string, a list of strings, a list of token ids or a list of such lists")
    check_common(body.get("temperature"), body.get("top_p"))
    logprobs, prompt_logprobs = body.get("logprobs"), body.get("prompt_logprobs")
    for name, v in (("logprobs", logprobs), ("prompt_logprobs", prompt_logprobs)):
        if v is not None:
            as_int(v, name, 0)
            if v > MAX_OPENAI_LOGPROBS:
                raise SimError(400, f"{name} must be <= {MAX_OPENAI_LOGPROBS} (vLLM's --max-logprobs), not {v}")
    return {
        "prompts": prompts,
        "gen": {"max_new": as_int(body.get("max_tokens"), "max_tokens", 16),
                "min_new": as_int(body.get("min_tokens"), "min_tokens", 0),
                "stops": as_str_list(body.get("stop"), "stop"), "stop_regex": [],
                "ignore_eos": bool(body.get("ignore_eos") or False),
                "no_stop_trim": bool(body.get("include_stop_str_in_output") or False)},
        "n": as_int(body.get("n"), "n", 1, lo=1),
        "model": body.get("model") or st.cfg.model_path,
        "echo": bool(body.get("echo") or False),
        "logprobs": logprobs,
        "prompt_logprobs": prompt_logprobs,
        "return_routed_experts": bool(body.get("return_routed_experts") or False),
    }


def completions_response(st: SimState, req: dict[str, Any]) -> dict[str, Any]:
    """Run an OpenAI /v1/completions request and build vLLM's response for it."""
    choices: list[dict[str, Any]] = []
    pt = ct = 0
    routed: str | None = None
    for text, ids in req["prompts"]:
        for _ in range(req["n"]):
            r = st.complete(text, prompt_ids=ids, **req["gen"])
            completion_ids = st.tokenizer.encode(r["text"])
            choice: dict[str, Any] = {"index": len(choices), "text": (text if req["echo"] else "") + r["text"],
                                      "finish_reason": r["finish"]["type"], "logprobs": None,
                                      "stop_reason": r["finish"].get("matched")}
            full = ids + completion_ids
            need_scores = req["logprobs"] is not None or req["prompt_logprobs"] is not None
            k = max(req["logprobs"] or 0, req["prompt_logprobs"] or 0)
            sc = st.score(full, 1, k) if need_scores else None
            if sc is not None and req["logprobs"] is not None:
                first = 0 if req["echo"] else len(ids)
                choice["logprobs"] = _openai_logprobs(st, full, first, sc, req["logprobs"])
            if sc is not None and req["prompt_logprobs"] is not None:
                choice["prompt_logprobs"] = _prompt_logprobs(st, full, len(ids), sc, req["prompt_logprobs"])
            if req["return_routed_experts"] and st.cfg.enable_return_routed_experts and routed is None:
                routed = st.routed_experts(ids + r["output_ids"], 0)[0]
            choices.append(choice)
            ct += r["completion_tokens"]
        pt += len(ids)
    out: dict[str, Any] = {"id": "cmpl-" + uuid.uuid4().hex, "object": "text_completion",
                           "created": int(time.time()), "model": req["model"], "choices": choices,
                           "simulated": True,
                           "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}}
    if routed is not None:
        out["sglext"] = {"routed_experts": routed}
    return out


def _openai_logprobs(st: SimState, full: list[int], first: int, sc: Scores, k: int) -> dict[str, Any]:
    at = {p: j for j, p in enumerate(sc.positions)}
    tokens: list[str] = []
    token_lps: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    offsets: list[int] = []
    off = 0
    for p in range(first, len(full)):
        tok = st.tokenizer.token_text(full[p])
        tokens.append(tok)
        offsets.append(off)
        off += len(tok)
        if p not in at:  # the very first token has nothing before it
            token_lps.append(None)
            tops.append(None)
            continue
        j = at[p]
        token_lps.append(sc.token_logprobs[j])
        d: dict[str, float] = {}
        for i, v in sc.top[j][:k]:
            d.setdefault(st.tokenizer.token_text(i), v)
        d.setdefault(tok, sc.token_logprobs[j])
        tops.append(d)
    return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}


def _prompt_logprobs(st: SimState, full: list[int], n_prompt: int, sc: Scores, k: int) -> list[Any]:
    at = {p: j for j, p in enumerate(sc.positions)}
    out: list[Any] = []
    for p in range(n_prompt):
        if p not in at:
            out.append(None)
            continue
        j = at[p]
        d = {str(i): {"logprob": v, "rank": r + 1, "decoded_token": st.tokenizer.token_text(i)}
             for r, (i, v) in enumerate(sc.top[j][:k])}
        d.setdefault(str(full[p]), {"logprob": sc.token_logprobs[j], "rank": sc.ranks[j],
                                    "decoded_token": st.tokenizer.token_text(full[p])})
        out.append(d)
    return out


def parse_chat(st: SimState, body: dict[str, Any]) -> dict[str, Any]:
    """The validated options of an OpenAI /v1/chat/completions body (SimError 400 on anything invalid): the
    last user message is the prompt (the simulator has no chat template; it answers what it is asked)."""
    if body.get("stream"):
        raise SimError(400, "streaming is not supported by the simulated engine")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        raise SimError(400, "messages must be a non-empty list of {role, content} objects")
    users = [m["content"] for m in messages if m["role"] == "user"]
    if not users:
        raise SimError(400, "messages hold no user message")
    check_common(body.get("temperature"), body.get("top_p"))
    return {"prompt": users[-1], "model": body.get("model") or st.cfg.model_path,
            "gen": {"max_new": as_int(body.get("max_tokens"), "max_tokens", 4096),
                    "min_new": 0, "stops": as_str_list(body.get("stop"), "stop"), "stop_regex": [],
                    "ignore_eos": False, "no_stop_trim": False}}


def chat_response(st: SimState, req: dict[str, Any]) -> dict[str, Any]:
    """Run an OpenAI /v1/chat/completions request and build vLLM's (and SGLang's) response for it."""
    prompt = req["prompt"]
    r = st.complete(prompt, chat=True, **req["gen"])
    message: dict[str, Any] = {"role": "assistant", "content": r["text"]}
    if st.cfg.reasoning:
        message["reasoning_content"] = "Let me think about what is asked. (simulated reasoning)"
    pt = r["prompt_tokens"]
    return {"id": "chatcmpl-" + uuid.uuid4().hex, "object": "chat.completion", "created": int(time.time()),
            "model": req["model"], "simulated": True,
            "choices": [{"index": 0, "message": message, "finish_reason": r["finish"]["type"],
                         "stop_reason": r["finish"].get("matched")}],
            "usage": {"prompt_tokens": pt, "completion_tokens": r["completion_tokens"],
                      "total_tokens": pt + r["completion_tokens"]}}


def tokenize(st: SimState, body: dict[str, Any]) -> dict[str, Any]:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        ids = st.tokenizer.encode(prompt)
        return {"tokens": ids, "count": len(ids), "max_model_len": MAX_MODEL_LEN}
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        lists = [st.tokenizer.encode(p) for p in prompt]
        return {"tokens": lists, "count": [len(x) for x in lists], "max_model_len": MAX_MODEL_LEN}
    raise SimError(400, "prompt must be a string or a list of strings")


def detokenize(st: SimState, body: dict[str, Any]) -> dict[str, Any]:
    tokens = body.get("tokens")
    skip = body.get("skip_special_tokens", True) is not False
    if tokens is not None and _is_ids(tokens):
        return {"text": st.tokenizer.decode(tokens, skip)}
    if isinstance(tokens, list) and all(isinstance(t, list) for t in tokens) and set(
            map(type, itertools.chain.from_iterable(tokens))) <= {int}:  # _is_ids of each, in one pass
        return {"text": st.tokenizer.decode_each(tokens, skip)}
    raise SimError(400, "tokens must be a list of token ids or a list of such lists")
