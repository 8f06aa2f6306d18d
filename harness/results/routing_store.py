"""The routing store: one pass's routed experts, per reference question, as compact ids on disk.

``routing.bin`` holds every question's ``(tokens, layers, top_k)`` ids back to back, C order, each question in
the narrowest of uint8, uint16 and int32 that holds them; ``routing.json`` (kind ``abh.routing``) the index
(question, byte offset, tokens, dtype), the shape, the pass's identity and its
:class:`~harness.stats.expert_sets.PassTally`. Writer and reader hold one question's ids at a time.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from harness.results import fileio
from harness.results.fileio import atomic_write_json, read_json
from harness.results.records import JSONObject
from harness.stats.expert_sets import PassTally

ROUTING = "routing.bin"
ROUTING_META = "routing.json"
KIND = "abh.routing"
SCHEMA_VERSION = 1
DTYPES: dict[str, np.dtype[Any]] = {"uint8": np.dtype("u1"), "uint16": np.dtype("<u2"), "int32": np.dtype("<i4")}


class RoutingError(ValueError):
    """A routing pass on disk cannot be read (missing, not measured, torn); the message says why."""


def narrowest(ids: np.ndarray) -> str:
    """The narrowest stored dtype that holds every id of ``ids``."""
    if ids.size == 0 or (int(ids.min()) >= 0 and int(ids.max()) < 256):
        return "uint8"
    if int(ids.min()) >= 0 and int(ids.max()) < 65536:
        return "uint16"
    return "int32"


class RoutingWriter:
    """Streams one pass's routing to ``out`` (use as a context manager; :meth:`close` publishes it)."""

    def __init__(self, out: str | Path, top_k: int, layers: int, num_experts: int | None, meta: JSONObject):
        self.out = fileio.check_dir(Path(out))
        self.meta = dict(meta)
        self.tally = PassTally(top_k, layers, num_experts)
        self.index: dict[str, list[Any]] = {"question": [], "offset": [], "tokens": [], "dtype": []}
        self.errors: dict[int, str] = {}
        self._stack = contextlib.ExitStack()
        self._file: IO[bytes] = self._stack.enter_context(fileio.atomic_output(self.out / ROUTING))
        self._offset = 0
        self._closed = False

    def __enter__(self) -> RoutingWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if self._closed:
            return
        if exc_type is not None:  # the temp file is dropped: the exception goes through atomic_output
            self._closed = True
            self._stack.__exit__(exc_type, exc, tb)
            return
        self.close()

    @property
    def questions(self) -> set[int]:
        return set(self.index["question"])

    def add(self, question: int, ids: np.ndarray) -> None:
        """One question's routing ``(tokens, layers, top_k)``."""
        a = np.asarray(ids)
        self.tally.add(a)
        name = narrowest(a)
        raw = np.ascontiguousarray(a, dtype=DTYPES[name]).tobytes()
        self._file.write(raw)
        for key, v in (("question", int(question)), ("offset", self._offset), ("tokens", int(a.shape[0])),
                       ("dtype", name)):
            self.index[key].append(v)
        self._offset += len(raw)

    def record_error(self, question: int, why: str) -> None:
        self.errors[int(question)] = why

    def close(self, status: str = "ok", reason: str | None = None) -> JSONObject:
        """Publish the ids and the index with the tally; returns what ``routing.json`` holds."""
        self._closed = True
        self._stack.close()
        t = self.tally
        doc: JSONObject = {
            "schema_version": SCHEMA_VERSION, "kind": KIND, **self.meta, "status": status, "reason": reason,
            "top_k": t.top_k, "layers": t.layers, "num_experts": t.num_experts, "questions": t.questions,
            "tokens": int(sum(self.index["tokens"])), "bytes": self._offset,
            "errors": len(self.errors), "error_examples": dict(list((str(q), e) for q, e in self.errors.items())[:5]),
            "index": self.index, "tally": tally_doc(t)}
        atomic_write_json(self.out / ROUTING_META, doc)
        return doc


def tally_doc(t: PassTally) -> JSONObject:
    return {"rows": t.rows.tolist(), "routed": t.routed.tolist(), "in_range": t.in_range.tolist(),
            "rows_out_of_range": t.rows_out_of_range.tolist(),
            "out_of_range_ids": {str(k): v for k, v in sorted(t.out_of_range_ids.items())}, "load": t.load.tolist()}


def tally_of(doc: dict[str, Any]) -> PassTally:
    """The :class:`PassTally` a ``routing.json`` holds (RoutingError when it is not one)."""
    try:
        top_k, layers, n = int(doc["top_k"]), int(doc["layers"]), doc.get("num_experts")
        t = PassTally(top_k, layers, None if n is None else int(n))
        raw = doc["tally"]
        t.rows, t.routed = np.asarray(raw["rows"], np.int64), np.asarray(raw["routed"], np.int64)
        t.in_range = np.asarray(raw["in_range"], np.int64).reshape(layers, top_k + 1)
        t.rows_out_of_range = np.asarray(raw["rows_out_of_range"], np.int64)
        t.out_of_range_ids = {int(k): int(v) for k, v in raw["out_of_range_ids"].items()}
        t.load = np.asarray(raw["load"], np.int64).reshape(layers, -1)
        t.questions = int(doc["questions"])
    except (KeyError, TypeError, ValueError) as e:
        raise RoutingError(f"routing.json holds no tally of the right shape ({type(e).__name__}: {e})") from None
    if t.rows.shape != (layers,) or t.routed.shape != (layers,) or t.rows_out_of_range.shape != (layers,):
        raise RoutingError("routing.json's tally does not have one entry per layer")
    return t


def write_not_measured(out: str | Path, reason: str, meta: JSONObject | None = None, *,
                       status: str = "not_measured") -> None:
    """Record that this launch's routing was not measured, and why (``not_applicable``: a dense model)."""
    root = fileio.check_dir(Path(out))
    (root / ROUTING).unlink(missing_ok=True)
    atomic_write_json(root / ROUTING_META, {"schema_version": SCHEMA_VERSION, "kind": KIND, **(meta or {}),
                                            "status": status, "reason": reason})


def routing_status(out: str | Path) -> tuple[str, str | None]:
    """("ok", None), ("not_applicable", why) for a dense model, or ("not_measured", why)."""
    try:
        doc = read_json(Path(out) / ROUTING_META)
    except FileNotFoundError:
        return "not_measured", f"no routing pass in {out}"
    except (OSError, ValueError) as e:
        return "not_measured", f"{Path(out) / ROUTING_META} cannot be read: {e}"
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        return "not_measured", f"{Path(out) / ROUTING_META} is not a routing pass"
    if doc.get("status") == "not_applicable":
        return "not_applicable", str(doc.get("reason") or "no routed experts")
    if doc.get("status") != "ok":
        return "not_measured", str(doc.get("reason") or "not measured")
    return "ok", None


@dataclass
class RoutingTable:
    """One stored pass, read a question at a time (:func:`load_routing`)."""

    root: Path
    meta: dict[str, Any]
    where: dict[int, tuple[int, int, str]]

    @property
    def top_k(self) -> int:
        return int(self.meta["top_k"])

    @property
    def layers(self) -> int:
        return int(self.meta["layers"])

    @property
    def questions(self) -> list[int]:
        return sorted(self.where)

    def get(self, question: int) -> np.ndarray:
        """Question ``question``'s routing ``(tokens, layers, top_k)`` as int32."""
        offset, tokens, name = self.where[question]
        count = tokens * self.layers * self.top_k
        with (self.root / ROUTING).open("rb") as f:
            f.seek(offset)
            raw = f.read(count * DTYPES[name].itemsize)
        if len(raw) != count * DTYPES[name].itemsize:
            raise RoutingError(f"{self.root / ROUTING} ends inside question {question}")
        return np.frombuffer(raw, dtype=DTYPES[name]).astype(np.int32).reshape(tokens, self.layers, self.top_k)


def load_routing(out: str | Path) -> RoutingTable:
    """The pass in ``out`` (RoutingError when there is none, it was not measured or its index is torn)."""
    root = Path(out)
    status, why = routing_status(root)
    if status != "ok":
        raise RoutingError(str(why))
    doc: dict[str, Any] = read_json(root / ROUTING_META)
    try:
        ix = doc["index"]
        where = {int(q): (int(o), int(t), str(d)) for q, o, t, d in
                 zip(ix["question"], ix["offset"], ix["tokens"], ix["dtype"], strict=True)}
        int(doc["top_k"]), int(doc["layers"])
    except (KeyError, TypeError, ValueError) as e:
        raise RoutingError(f"{root / ROUTING_META}: no index of the right shape ({type(e).__name__}: {e})") from None
    if any(d not in DTYPES for _, _, d in where.values()):
        raise RoutingError(f"{root / ROUTING_META}: an unknown stored dtype")
    return RoutingTable(root, doc, where)
