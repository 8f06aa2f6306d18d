"""The simulated engine's toy tokenizer: words, digits, punctuation and spaces -> stable ids.

Text splits into pieces the way GPT-2-style tokenizers do, only simpler: a word with its leading space
(``" apples"``), a single digit (``" 4"``, ``"8"``), a run of punctuation (``"$"``, ``"."``), underscores, or
whitespace; the pieces concatenate back to the text exactly. A piece's id is a hash of its text modulo
``vocab_size`` (ids 0-2 are ``<unk>``, ``<bos>``, ``<eos>``). The pieces of the data file (and of the texts the
simulator writes) get distinct ids by probing in sorted order, so every text the simulator reads or writes
decodes back exactly; any other piece keeps its plain hash id (which may alias a known one). The mapping is a
function of (vocab_size, data file) only, so two servers on the same data agree on every id.

No special token is added to encoded text (``add_special_tokens`` is accepted and has nothing to add).

Encoding is memoised: a whole text once seen (an eval's repeats and the scoring pass's tokenization send the same
prompts), and the long block every few-shot prompt starts with (:func:`shared_cut`), so a new prompt costs only
its own question's pieces.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from array import array
from collections.abc import Iterable, Sequence

UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
SPECIAL = {UNK_ID: "<unk>", BOS_ID: "<bos>", EOS_ID: "<eos>"}
N_SPECIAL = len(SPECIAL)
_PIECE = re.compile(r" ?[^\W\d_]+| ?\d| ?[^\w\s]+|_+|\s+(?!\S)|\s+")


def pieces(text: str) -> list[str]:
    """The text split into pieces; ``"".join(pieces(t)) == t``."""
    return _PIECE.findall(text)


#: whitespace before a space: where a space may not start a piece
_SPACE_AFTER_SPACE = re.compile(r"\s ")


def piece_set(texts: Iterable[str]) -> set[str]:
    """Every piece of the texts: ``{p for t in texts for p in pieces(t)}``, with each distinct word split once.
    A space after a non-space character always starts a piece (as :func:`shared_cut` says), so a text without
    whitespace before a space has the pieces of its first word and of each ``" " + word`` after it; the data's
    ~4000 texts hold a few thousand distinct words (the pattern over each of their ~1 MB characters was most of
    a launch's tokenizer)."""
    out: set[str] = set()
    heads: set[str] = set()
    words: set[str] = set()
    for t in texts:
        if _SPACE_AFTER_SPACE.search(t):
            out.update(_PIECE.findall(t))
        else:
            head, *rest = t.split(" ")
            heads.add(head)
            words.update(rest)
    for w in heads:
        out.update(_PIECE.findall(w))
    for w in words:
        out.update(_PIECE.findall(" " + w))
    return out


#: Where the shared block of a few-shot prompt ends: before its last question
_LAST_QUESTION = "Question:"
#: Texts (or shared blocks) whose pieces are memoised, at most (a run's prompts and generations: a few thousand)
MEMO_TEXTS = 16_384


def shared_cut(text: str) -> int:
    """A position ``j`` before the text's last question where ``pieces(text) == pieces(text[:j]) +
    pieces(text[j:])`` (0: none). Every piece that holds a non-space character ends before a space (no pattern of
    :data:`_PIECE` takes a space after a non-space one) and matching starts afresh after each piece, so a space
    after a non-space character is always where a piece starts."""
    k = text.rfind(_LAST_QUESTION)
    j = text.rfind(" ", 0, k) if k > 0 else -1
    while j > 0 and text[j - 1].isspace():
        j = text.rfind(" ", 0, j - 1)
    return max(j, 0)


def hash_id(piece: str, vocab_size: int) -> int:
    h = hashlib.blake2b(piece.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return N_SPECIAL + int.from_bytes(h, "little") % (vocab_size - N_SPECIAL)


class Tokenizer:
    """Encode text to ids and decode ids to text (see the module docstring)."""

    def __init__(self, vocab_size: int, known_texts: Iterable[str] = ()):
        if vocab_size <= N_SPECIAL + 1:
            raise ValueError(f"vocab_size must be > {N_SPECIAL + 1}")
        self.vocab_size = vocab_size
        self._ids: dict[str, int] = {}
        self._pieces: dict[int, str] = dict(SPECIAL)
        known = sorted(piece_set(known_texts))
        span = vocab_size - N_SPECIAL
        if len(known) < span:  # distinct ids for every known piece: linear probing in sorted order
            for p in known:
                i = hash_id(p, vocab_size)
                while i in self._pieces:
                    i = N_SPECIAL + (i - N_SPECIAL + 1) % span
                self._ids[p], self._pieces[i] = i, p
        else:  # more pieces than ids: plain hashes, first one wins the decode
            for p in known:
                i = hash_id(p, vocab_size)
                self._ids[p] = i
                self._pieces.setdefault(i, p)
        self.known = len(self._ids)
        #: per id, its text for :meth:`decode` (with the special ids' names; and with them blank), made on first use
        self._texts: tuple[list[str], list[str]] | None = None
        self._memo: dict[str, array] = {}
        self._ends: dict[str, tuple[array, array]] = {}
        #: texts and shared blocks encoded from their pieces (not from the memo): what the memo saves shows here
        self.split_texts = 0

    def piece_id(self, piece: str) -> int:
        i = self._ids.get(piece)
        if i is None:
            i = hash_id(piece, self.vocab_size)
            if len(self._ids) < 4 * self.vocab_size:  # bounded cache of unknown pieces
                self._ids[piece] = i
            if i not in self._pieces:
                self._pieces[i] = piece
                if self._texts is not None:
                    self._texts[0][i] = self._texts[1][i] = piece
        return i

    def _ids_of(self, text: str) -> list[int]:
        self.split_texts += 1
        known = self._ids.get  # the common case without a method call per piece (prompts run to ~1000 pieces)
        return [i if (i := known(p)) is not None else self.piece_id(p) for p in pieces(text)]

    def _remember(self, text: str, value: array) -> None:
        if len(self._memo) >= MEMO_TEXTS:
            self._memo.clear()
        self._memo[text] = value

    def encode(self, text: str) -> list[int]:
        got = self._memo.get(text)
        if got is None:
            j = shared_cut(text)
            head = self._memo.get(text[:j]) if j else None
            if j and head is None:
                head = array("q", self._ids_of(text[:j]))
                self._remember(text[:j], head)
            got = array("q", self._ids_of(text[j:]))
            if head is not None:
                got = head + got
            self._remember(text, got)
        return got.tolist()

    def encode_ends(self, text: str) -> tuple[list[int], list[int]]:
        """(where each piece of ``text`` ends, in characters; the pieces' ids), memoised like :meth:`encode`."""
        got = self._ends.get(text)
        if got is None:
            self.split_texts += 1
            ps = pieces(text)
            known = self._ids.get  # as in _ids_of: no method call per known piece
            ids = [i if (i := known(p)) is not None else self.piece_id(p) for p in ps]
            got = (array("q", itertools.accumulate(map(len, ps))), array("q", ids))
            if len(self._ends) >= MEMO_TEXTS:
                self._ends.clear()
            self._ends[text] = got
        return got[0].tolist(), got[1].tolist()

    def encode_parts(self, parts: Sequence[str], upto: int | None = None) -> tuple[list[int], list[int]]:
        """:meth:`encode_ends` of ``"".join(parts)``, each part memoised on its own (a generation is its answer and
        the same hallucinated blocks every time: only a new part is split). Parts are joined where the seam is not
        a sure piece boundary: a seam is one where the part before ends in a non-space character and the next
        starts with whitespace (a piece holding a non-space character never holds whitespace after it, the pattern
        looks at nothing behind it, and the first piece of the next part sees the same text either way). ``upto``:
        only the pieces of the parts that cover the first ``upto`` characters (a prefix of the whole's)."""
        merged: list[str] = []
        for part in parts:
            if merged and not (merged[-1][-1:].strip() and part[:1].isspace()):
                merged[-1] += part
            elif part:
                merged.append(part)
        ends: list[int] = []
        ids: list[int] = []
        at = 0
        for part in merged:
            if upto is not None and at >= upto:
                break
            e, i = self.encode_ends(part)
            ends += [x + at for x in e] if at else e
            ids += i
            at += len(part)
        return ends, ids

    def token_text(self, token_id: int) -> str:
        """The text of one id (special ids: their name; an id never seen: ``<tok_N>``)."""
        p = self._pieces.get(token_id)
        return p if p is not None else f"<tok_{token_id}>"

    def _table(self, skip_special_tokens: bool) -> list[str]:
        """Per id, its text for :meth:`decode` (the special ids blank with ``skip_special_tokens``)."""
        if self._texts is None:
            named = [self.token_text(i) for i in range(self.vocab_size)]
            blank = [("" if i in SPECIAL else t) for i, t in enumerate(named)]
            self._texts = (named, blank)
        return self._texts[1] if skip_special_tokens else self._texts[0]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True, *, in_vocab: bool = False) -> str:
        """The text of ``ids`` (:meth:`token_text` of each; the special ids left out with
        ``skip_special_tokens``): one list lookup per id (a scoring request sends ~1000). ``in_vocab``: the caller
        checked that every id is in the vocabulary (not again here: a scan of the ids costs as much as the lookups)."""
        table = self._table(skip_special_tokens)
        if not in_vocab and ids and (min(ids) < 0 or max(ids) >= len(table)):  # ids past the vocabulary: named one by one
            return "".join([self.token_text(i) for i in ids if not (skip_special_tokens and i in SPECIAL)])
        return "".join(map(table.__getitem__, ids))

    def decode_each(self, id_lists: Sequence[Sequence[int]], skip_special_tokens: bool = True) -> list[str]:
        """:meth:`decode` of each list: a list of one id in the vocabulary is its table entry, without a call (a
        reference pass detokenizes every token of its ~110k alone)."""
        table = self._table(skip_special_tokens)
        n = len(table)
        return [table[x[0]] if len(x) == 1 and 0 <= x[0] < n else self.decode(x, skip_special_tokens)
                for x in id_lists]
