"""The simulator's tokenizer memo: the same ids as piece-by-piece encoding, the shared few-shot block split once."""

from __future__ import annotations

import random

from abh_simulator.tokens import Tokenizer, pieces, shared_cut

SHOTS = "Question: Tom has 3 apples.\nAnswer: He has 3.\n\nQuestion: 2 + 2?\nAnswer: 4.\n\n"


def _plain(tok: Tokenizer, text: str) -> list[int]:
    return [tok.piece_id(p) for p in pieces(text)]


def test_cut_keeps_the_pieces_of_any_text() -> None:
    rnd = random.Random(7)
    alphabet = " \n\tab1_.,$Q"
    for _ in range(2000):
        text = ("".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 30))) + "Question:"
                + "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 10))))
        j = shared_cut(text)
        assert 0 <= j < len(text)
        if j:
            assert pieces(text) == pieces(text[:j]) + pieces(text[j:]), text


def test_memo_gives_the_plain_ids_and_splits_the_shared_block_once() -> None:
    tok, ref = Tokenizer(1000, [SHOTS]), Tokenizer(1000, [SHOTS])
    prompts = [SHOTS + f"Question: Ann has {n} pens and{' ' * n}buys 4.\nAnswer:" for n in range(1, 6)]
    for p in prompts + prompts:
        assert tok.encode(p) == _plain(ref, p)
    # the block before the last question once, then each prompt's own tail once; a repeat is read from the memo
    assert tok.split_texts == 1 + len(prompts)
    ends, ids = tok.encode_ends(prompts[0])
    assert ids == _plain(ref, prompts[0])
    assert ends[-1] == len(prompts[0]) and len(ends) == len(ids)
