"""The prompts an eval sent, each text written once per run.

An eval's ``prompts.jsonl`` says which prompt each question was sent: ``{"index", "prompt_sha256"}``
(eval.json schema 2); the text lives in a text store, ``prompt_texts.jsonl`` (``{"prompt_sha256", "prompt"}``,
one row per distinct prompt), shared by every eval of a run (a lone eval keeps its own), named in
``eval.json`` (``prompt_texts``) relative to the eval directory: a run's evals send the same prompts.

A finished run gzips its store (:func:`pack`: ``prompt_texts.jsonl.gz``; every prompt repeats the few-shot
block) and each eval's ``prompts.jsonl`` (:func:`pack_prompts`). Readers and a resumed run's writer take the
packed rows and any plain ones appended since (:func:`read_texts`), an older run's plain store as it is. A row
that holds its ``prompt`` (schema 1, lm-eval imports) is read as it is (:func:`eval_prompts`); any other row's
text comes from the store, and only when its hash is the row's (a text not there, or not the one hashed, is as
good as none).
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from harness.results import fileio
from harness.results.eval_schema import EVAL_FILE, PROMPTS_FILE, PromptRow
from harness.results.fileio import atomic_output, iter_jsonl, read_json, read_jsonl

#: The text store's file name (in the run directory, or in a lone eval's own)
TEXTS = "prompt_texts.jsonl"
#: eval.json's key naming the text store, relative to the eval directory
TEXTS_KEY = "prompt_texts"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def packed(path: Path) -> Path:
    """Where the store at ``path`` is once packed: beside it, ``.gz`` added."""
    return path.with_name(path.name + ".gz")


def exists(path: Path) -> bool:
    """The store at ``path`` is there, plain or packed."""
    return path.is_file() or packed(path).is_file()


def read_texts(path: Path) -> Mapping[str, str]:
    """sha256 -> text of every row of the text store at ``path`` (packed, then plain) whose text has that hash
    (none: empty). Read once per version of its files: the evals of a run share one store (not to be changed)."""
    key = (str(path.resolve()), _stamp(path), _stamp(packed(path)))
    if key not in _READ:
        _READ.clear()  # one store at a time: a run's
        _READ[key] = _read_texts(path)
    return _READ[key]


def stored_hashes(path: Path) -> set[str]:
    """The hashes of :func:`read_texts` (every row whose text has its hash), without keeping the texts."""
    key = (str(path.resolve()), _stamp(path), _stamp(packed(path)))
    if key in _READ:
        return set(_READ[key])
    return {sha for sha, _ in _checked_rows(path)}


def _stamp(path: Path) -> tuple[int, int, int]:
    try:
        st = path.stat()
    except OSError:
        return (0, -1, 0)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


#: the text store last read, by its path and its files' stamps
_READ: dict[tuple[str, tuple[int, int, int], tuple[int, int, int]], Texts] = {}


def _checked_rows(path: Path) -> Iterator[tuple[str, str]]:
    """(hash, text) of each row of the store at ``path`` (packed, then plain) whose text has its hash, each hash
    once."""
    seen: set[str] = set()
    for row in itertools.chain(iter_packed(packed(path)), read_jsonl(path)):
        sha, text = row.get("prompt_sha256"), row.get("prompt")
        if isinstance(sha, str) and isinstance(text, str) and sha not in seen and sha256(text) == sha:
            seen.add(sha)
            yield sha, text


#: a prefix this long or longer that a text shares with the one before it is held once for every text it starts
HEAD_MIN_CHARS = 256
#: the shared prefixes looked for in each text (a run's store has one per few-shot task)
HEADS_MOST = 8


def _shared_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b`` (a binary search of slices, not a loop per
    character)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class Texts(Mapping[str, str]):
    """sha256 -> text of a store, each text held as a prefix it shares with the others and its own tail: the
    prompts of a few-shot task repeat one block (13k 5-shot GSM8K prompts are ~55 MB whole, ~5 MB this way); a
    text is made whole when asked for."""

    def __init__(self, rows: Iterable[tuple[str, str]]):
        self._heads: list[str] = []
        self._tails: dict[str, tuple[int, str]] = {}  # sha -> (head number, or -1 for none; the rest)
        previous = ""
        for sha, text in rows:
            self._tails[sha] = self._split(text, previous)
            previous = text

    def _split(self, text: str, previous: str) -> tuple[int, str]:
        for h in range(len(self._heads) - 1, -1, -1):
            if text.startswith(self._heads[h]):
                return h, text[len(self._heads[h]):]
        n = _shared_prefix(text, previous) if len(self._heads) < HEADS_MOST else 0
        if n < HEAD_MIN_CHARS:
            return -1, text
        self._heads.append(text[:n])
        return len(self._heads) - 1, text[n:]

    def __getitem__(self, sha: str) -> str:
        h, tail = self._tails[sha]
        return tail if h < 0 else self._heads[h] + tail

    def __contains__(self, sha: object) -> bool:
        return sha in self._tails

    def __iter__(self) -> Iterator[str]:
        return iter(self._tails)

    def __len__(self) -> int:
        return len(self._tails)


def _read_texts(path: Path) -> Texts:
    return Texts(_checked_rows(path))


def iter_packed(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of a packed store (none when it is not there), read as asked for: a reader that stops early
    (the first prompt) decompresses and parses only what it read. StoreError for one not a gzip'd JSONL."""
    if not path.is_file():
        return
    try:
        with gzip.open(path, "rb") as f:
            for _, row in fileio.iter_lines(f, path):
                yield row
    except (OSError, EOFError) as e:
        raise fileio.StoreError(f"{path}: not a readable gzip file ({e}); delete it to have the prompts sent "
                                "again") from None


def pack_prompts(eval_dir: Path) -> None:
    """Pack a finished eval's ``prompts.jsonl`` (its bytes gzip'd beside it, then the plain file removed): the
    readers take either; a resumed eval writes it plain again (:class:`~harness.results.eval_store.EvalStore`)."""
    plain = eval_dir / PROMPTS_FILE
    if not os.path.lexists(plain):
        return
    _replace_packed(plain, fileio.read_own(plain))  # a planted link: PlantedLink, the link left as it is


def pack(path: Path) -> None:
    """Pack the store at ``path``: its rows (packed and plain, each hash once) written gzip'd to
    :func:`packed` (atomically), then the plain file removed. Nothing to do when there is no plain file. Only
    when no eval appends to it (a finished run)."""
    if not os.path.lexists(path):
        return
    os.close(fileio.open_nofollow(path, os.O_RDONLY))  # a planted link: PlantedLink before its target is read
    texts = read_texts(path)
    body = "".join(json.dumps({"prompt_sha256": sha, "prompt": text}, ensure_ascii=False) + "\n"
                   for sha, text in texts.items()).encode("utf-8")
    _replace_packed(path, body)


def _replace_packed(path: Path, body: bytes) -> None:
    """``body`` gzip'd (atomically) to :func:`packed` of ``path``, then the plain file removed."""
    with atomic_output(packed(path)) as f:
        f.write(gzip.compress(body, compresslevel=6, mtime=0))
    path.unlink()


class PromptTexts:
    """Appends each prompt's text to the store at ``path`` once (the hashes it holds are read when opened)."""

    def __init__(self, path: Path):
        self.path = path
        self._known = stored_hashes(path) if exists(path) else set()  # hashes only: the texts are not kept
        self._f: IO[bytes] | None = None
        #: the last shared head given and its JSON string without the closing quote
        self._head, self._head_json = "", ""
        #: (hash, row) of the texts queued and not yet written (:meth:`queue`)
        self._queued: list[tuple[str, str]] = []

    def add(self, sha: str, text: str, head: str = "") -> None:
        """Store ``text`` (of hash ``sha``) unless the store holds it (a row written whole, or OutputError).
        ``head``: a prefix of ``text`` many prompts share (the few-shot block), escaped once for all of them."""
        self.queue(sha, text, head)
        self.flush()

    def queue(self, sha: str, text: str, head: str = "") -> None:
        """:meth:`add`, the row held until :meth:`flush` (which writes every row queued at once)."""
        if sha in self._known:
            return
        self._queued.append((sha, self._row(sha, text, head)))
        self._known.add(sha)

    def flush(self) -> None:
        """Write the queued rows in one write (whole, or OutputError: the store then holds none of them)."""
        if not self._queued:
            return
        queued, self._queued = self._queued, []
        try:
            if self._f is None:
                self._f = fileio.open_append_whole(self.path)  # a full disk may have torn its last row
            fileio.append_made_line(self._f, self.path, "".join(row for _, row in queued))
        except BaseException:
            self._known.difference_update(sha for sha, _ in queued)
            raise

    def _row(self, sha: str, text: str, head: str) -> str:
        """``json.dumps({"prompt_sha256": sha, "prompt": text}, ensure_ascii=False)`` and a newline. JSON escapes
        a string character by character, so the string of ``head + rest`` is the head's (escaped once, kept)
        joined to the rest's: the same bytes at a fraction of the cost (the head is ~90 % of a 5-shot prompt)."""
        if not head or not text.startswith(head):
            return fileio.dumps_unicode({"prompt_sha256": sha, "prompt": text}) + "\n"
        if head != self._head:
            self._head, self._head_json = head, fileio.dumps_unicode(head)[:-1]
        rest = fileio.dumps_unicode(text[len(head):])[1:]
        return f'{{"prompt_sha256": {fileio.dumps_unicode(sha)}, "prompt": {self._head_json}{rest}}}\n'

    def close(self) -> None:
        if self._f is not None and not self._f.closed:
            self._f.close()
        self._f = None


def texts_path(eval_dir: Path, meta: dict[str, Any] | None = None) -> Path | None:
    """The text store an eval's ``eval.json`` names (None: it names none, schema 1)."""
    if meta is None:
        try:
            meta = read_json(eval_dir / EVAL_FILE)
        except (OSError, ValueError):
            return None
    rel = meta.get(TEXTS_KEY) if isinstance(meta, dict) else None
    return eval_dir / rel if isinstance(rel, str) and rel else None


def relative(store: Path, eval_dir: Path) -> str:
    """``store`` as eval.json names it: relative to the eval directory (the run directory moves as one)."""
    return os.path.relpath(store, eval_dir)


def _prompt_rows(eval_dir: Path) -> Iterator[tuple[int, str, str | None]]:
    """(index, prompt_sha256, the text the row holds or None) of each well-formed ``prompts.jsonl`` row, in file
    order (either layout)."""
    plain = eval_dir / PROMPTS_FILE
    rows = iter_packed(packed(plain)) if not plain.exists() else (row for _, row in iter_jsonl(plain))
    for row in rows:
        i, sha, text = row.get("index"), row.get("prompt_sha256"), row.get("prompt")
        if isinstance(i, int) and not isinstance(i, bool) and isinstance(sha, str):
            yield i, sha, text if isinstance(text, str) else None


def eval_prompts(eval_dir: Path) -> Iterator[PromptRow]:
    """Every ``prompts.jsonl`` row of the eval in ``eval_dir`` with its text, in file order (either layout; a row
    without a text of its hash is left out)."""
    for i, sha, texts in prompt_sources(eval_dir):
        yield PromptRow(index=i, prompt_sha256=sha, prompt=texts[sha])


def prompt_sources(eval_dir: Path) -> Iterator[tuple[int, str, Mapping[str, str]]]:
    """(index, prompt_sha256, where its text is) of the rows :func:`eval_prompts` yields, the text
    ``texts[prompt_sha256]`` not made yet: a reader that keeps every question's prompt (a scoring pass's
    references) holds the store's shared prefixes once instead of each prompt whole."""
    texts: Mapping[str, str] | None = None
    for i, sha, text in _prompt_rows(eval_dir):
        if text is not None:  # the row's own text (schema 1), as it is
            yield i, sha, {sha: text}
            continue
        if texts is None:
            store = texts_path(eval_dir)
            texts = read_texts(store) if store is not None and exists(store) else {}
        if sha in texts:
            yield i, sha, texts


def first_prompt(eval_dir: Path) -> PromptRow | None:
    """The first row :func:`eval_prompts` yields, the text store read only as far as that row's text (one prompt
    needs no store read whole: the default run's holds 1319)."""
    for i, sha, text in _prompt_rows(eval_dir):
        if text is None:
            store = texts_path(eval_dir)
            text = _text_of(store, sha) if store is not None and exists(store) else None
            if text is None:  # not in the store: the next rows as eval_prompts reads them
                return next(eval_prompts(eval_dir), None)
        return PromptRow(index=i, prompt_sha256=sha, prompt=text)
    return None


def _text_of(path: Path, sha: str) -> str | None:
    """``read_texts(path).get(sha)``, reading the store at ``path`` (packed, then plain) only up to that text."""
    key = (str(path.resolve()), _stamp(path), _stamp(packed(path)))
    if key in _READ:
        return _READ[key].get(sha)
    for row in itertools.chain(iter_packed(packed(path)), (row for _, row in iter_jsonl(path))):
        text = row.get("prompt")
        if row.get("prompt_sha256") == sha and isinstance(text, str) and sha256(text) == sha:
            return text
    return None
