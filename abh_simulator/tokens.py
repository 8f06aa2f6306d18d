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
        known = sorted({p for t in known_texts for p in pieces(t)})
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
            self._pieces.setdefault(i, piece)
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
            ps, ids = self.encode_pieces(text)
            got = (array("q", itertools.accumulate(len(p) for p in ps)), array("q", ids))
            if len(self._ends) >= MEMO_TEXTS:
                self._ends.clear()
            self._ends[text] = got
        return got[0].tolist(), got[1].tolist()

    def encode_pieces(self, text: str) -> tuple[list[str], list[int]]:
        ps = pieces(text)
        return ps, [self.piece_id(p) for p in ps]

    def token_text(self, token_id: int) -> str:
        """The text of one id (special ids: their name; an id never seen: ``<tok_N>``)."""
        p = self._pieces.get(token_id)
        return p if p is not None else f"<tok_{token_id}>"

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        known = self._pieces.get  # token_text without a method call per id (a scoring request sends ~1000)
        return "".join([p if (p := known(i)) is not None else f"<tok_{i}>" for i in ids
                        if not (skip_special_tokens and i in SPECIAL)])
