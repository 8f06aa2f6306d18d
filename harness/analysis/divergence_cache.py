"""A computed ``divergence`` object kept beside its reference pass, reused while its inputs are unchanged, so
``abh compare`` on a finished run does not reread every scoring pass. The key digests every input file, the
parameters and the source of the code that computes it; an unreadable, foreign or linked cache is ignored."""

from __future__ import annotations

import hashlib
import importlib
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.results import fileio
from harness.results.eval_store import SAMPLES
from harness.results.records import JSON, RecordError
from harness.results.schema import Divergence
from harness.results.token_store import SCORES, SCORES_META

#: the file beside the reference pass
CACHE = "divergence_cache.json"
KIND = "abh.divergence_cache"
#: the parts of abh whose source is in the key (what computes a divergence object and reads its inputs)
_CODE = ("harness.analysis.divergence", "harness.results.score_blocks", "harness.results.token_store",
         "harness.results.arrow_buffers",
         "harness.results.eval_store", "harness.results.schema", "harness.results.records", "harness.stats")
#: the arguments that are data, not parameters (the greedy texts are read from samples.jsonl, in the key)
_DATA = frozenset({"ref_dir", "ab_dir", "aa_dir", "launches_a", "launches_b", "texts_ref", "texts_b", "texts_aa"})


def _code_digest() -> str:
    """The source of the code as this process imported it (wherever each module was found: a package's every
    module file), so another version of abh never reuses the result."""
    h = hashlib.blake2b(digest_size=16)
    for name in _CODE:
        mod = importlib.import_module(name)
        dirs = [Path(d) for d in getattr(mod, "__path__", [])]
        files = ([(f.relative_to(d).as_posix(), f) for d in dirs for f in sorted(d.rglob("*.py"))] if dirs
                 else [("", Path(str(mod.__file__)))])
        for rel, f in files:
            h.update(f"{name}/{rel}".encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _file_digest(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "blake2b").hexdigest()
    except FileNotFoundError:
        return "-"


def _roles(ref: Path, ab: Path | None, aa: Path | None, more_a: Sequence[Path], more_b: Sequence[Path]
           ) -> list[tuple[str, Path | None]]:
    return [("ref", ref), ("ab", ab), ("aa", aa), *((f"a{i}", p) for i, p in enumerate(more_a)),
            *((f"b{i}", p) for i, p in enumerate(more_b))]


def cache_key(compute: Callable[..., Any], roles: list[tuple[str, Path | None]], params: dict[str, Any]) -> str:
    """The digest of everything the result is a function of (module docstring)."""
    bound = inspect.signature(compute).bind_partial(**params)
    bound.apply_defaults()
    h = hashlib.blake2b(digest_size=32)
    h.update(_code_digest().encode())
    for name, value in sorted(bound.arguments.items()):
        if name not in _DATA:
            h.update(f"{name}={value!r}\n".encode())
    for role, d in roles:
        h.update(f"{role}:".encode())
        if d is not None:
            for name in (SCORES_META, SCORES, SAMPLES):
                h.update(_file_digest(d / name).encode() + b",")
        h.update(b"\n")
    return h.hexdigest()


def _replace_paths(doc: JSON, old_new: list[tuple[str, str]]) -> JSON:
    """``doc`` with each old directory name replaced by its new one in every string (longest first: a name
    that holds another is replaced whole; through placeholders, so a new name is never replaced again)."""
    pairs = sorted(((o, n) for o, n in old_new if o != n), key=lambda p: -len(p[0]))
    if not pairs:
        return doc

    def one(s: str) -> str:
        for i, (o, _) in enumerate(pairs):
            s = s.replace(o, f"\0{i}\0")
        for i, (_, n) in enumerate(pairs):
            s = s.replace(f"\0{i}\0", n)
        return s

    def walk(v: JSON) -> JSON:
        if isinstance(v, str):
            return one(v)
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {one(k): walk(x) for k, x in v.items()}
        return v

    return walk(doc)


def cached(compute: Callable[..., Divergence], ref: Path, ab: Path | None, aa: Path | None,
           more_a: Sequence[Path], more_b: Sequence[Path], *, store: bool, **params: Any) -> Divergence:
    """``compute(ref, ab, aa, launches_a=more_a, launches_b=more_b, **params)``, or the result stored beside
    ``ref`` under the same key; ``store``: write it there when computed (never fails the caller)."""
    roles = _roles(ref, ab, aa, more_a, more_b)
    key = cache_key(compute, roles, params)
    names = [(r, None if d is None else str(d)) for r, d in roles]
    path = ref / CACHE
    try:
        if path.is_symlink():  # not abh's: ignored (and never written through, below)
            raise ValueError(path)
        doc = fileio.read_json(path)
        if isinstance(doc, dict) and doc.get("kind") == KIND and doc.get("key") == key:
            stored = dict(doc.get("dirs") or {})
            old_new = [(str(stored[r]), n) for r, n in names if n is not None and isinstance(stored.get(r), str)]
            return Divergence.from_doc(_replace_paths(doc["divergence"], old_new), str(path))
    except (OSError, ValueError, KeyError, RecordError):
        pass  # no usable stored result: computed below
    div = compute(ref, ab, aa, launches_a=list(more_a), launches_b=list(more_b), **params)
    if store:
        try:
            fileio.atomic_write_json(path, {"kind": KIND, "key": key, "dirs": {r: n for r, n in names if n},
                                            "divergence": div.to_doc()})
        except (OSError, ValueError, fileio.StoreError):
            pass  # a read-only or full disk: the next caller computes it again
    return div
