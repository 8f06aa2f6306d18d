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


def test_parts_give_the_ids_and_ends_of_the_whole_text_at_any_seam() -> None:
    # seams of every kind: a sure piece boundary (non-space, then whitespace) and not (a word split in two, a
    # space run split, a space before a word): the ids and ends are those of the joined text
    rnd = random.Random(11)
    alphabet = " \n\tab1_.,$Q"
    for _ in range(1500):
        parts = ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 12))) for _ in range(rnd.randint(1, 5))]
        tok, ref = Tokenizer(1000, ["ab 1 Q"]), Tokenizer(1000, ["ab 1 Q"])
        assert tok.encode_parts(parts) == ref.encode_ends("".join(parts)), parts


def test_a_part_seen_before_is_not_split_again() -> None:
    tok = Tokenizer(1000, [SHOTS])
    answer, block = " He has 3.\n#### 3", "\n\nQuestion: 2 + 2?\nAnswer: 4."
    tok.encode_parts([answer, block])
    before = tok.split_texts
    ends, ids = tok.encode_parts([" He has 4.\n#### 4", block])
    assert tok.split_texts == before + 1  # only the new answer
    assert (ends, ids) == Tokenizer(1000, [SHOTS]).encode_ends(" He has 4.\n#### 4" + block)


def test_decode_by_table_reads_as_each_token_text() -> None:
    tok = Tokenizer(50, [SHOTS])
    ids = [0, 1, 2, 3, 17, 49, *tok.encode(SHOTS)]
    want = "".join(tok.token_text(i) for i in ids)
    assert tok.decode(ids, skip_special_tokens=False) == want
    assert tok.decode(ids) == "".join(tok.token_text(i) for i in ids if i > 2)
    # past the vocabulary and negative: named as <tok_N>, as token_text does
    assert tok.decode([60, -1, 3]) == "<tok_60><tok_-1>" + tok.token_text(3)
    # a piece first seen after the table was made: decoded as its text from then on
    unseen = next(i for i in range(3, 50) if tok.token_text(i).startswith("<tok_"))
    piece = next(p for p in (f"zz{n}" for n in range(10_000)) if tok.piece_id(p) == unseen)
    assert tok.decode([unseen]) == piece == tok.token_text(unseen)


def test_a_generation_reads_only_the_pieces_its_stops_need_and_answers_as_with_all(monkeypatch) -> None:
    """complete() tokenizes a generation's parts only up to where its stop strings end; whatever the stops, patterns,
    token limits and minimum lengths, its answer is the one it gives with every piece tokenized."""
    from abh_simulator import state as state_mod
    from abh_simulator.sim_config import SimConfig
    from abh_simulator.state import SimState
    from harness.tasks import gsm8k

    rows = gsm8k.read_embedded_test()
    shots = gsm8k.few_shot_block(rows[:5])
    cases = [(m, lo, st, rx) for m in (1, 7, 40, 200, 512) for lo in (0, 3)
             for st in ([], ["Question"], ["Question", "Assistant:"], ["####"], ["zzz"], ["Answer:"])
             for rx in ([], [r"\d+\.\n"])]

    def answers(lazy: bool, cases: list = cases) -> tuple[list[dict], int]:
        st = SimState(SimConfig(run_seed=2))
        if not lazy:
            monkeypatch.setattr(state_mod, "_needed", lambda *a: None)
        out = []
        for q, (m, lo, stops, rx) in enumerate(cases):
            r = st.complete(shots + gsm8k.one_example(rows[q % 40], False), max_new=m, min_new=lo, stops=stops,
                            stop_regex=rx, ignore_eos=False, no_stop_trim=q % 2 == 0)
            out.append(r)
        monkeypatch.undo()
        return out, st.tokenizer.split_texts

    lazy, full = answers(True)[0], answers(False)[0]
    assert lazy == full
    assert {r["finish"]["type"] for r in lazy} == {"stop", "length"}
    recipe = [(512, 0, ["Question", "Assistant:", "<|separator|>"], [])] * 10
    assert answers(True, recipe)[1] < answers(False, recipe)[1] - 10  # the blocks past the stop were never split


def test_piece_set_is_the_set_of_every_texts_pieces() -> None:
    """The known pieces, each distinct word split once, are every piece of every text, whatever its whitespace."""
    from abh_simulator.state import known_texts, load_rows
    from abh_simulator.tokens import piece_set

    rows = load_rows("")
    texts = known_texts(rows)
    assert piece_set(texts) == {p for t in texts for p in pieces(t)}
    rnd = random.Random(11)
    alphabet = [" ", "  ", "\n", "\t", "\r", "a", "Z", "é", "1", "²", "٣", "_", ".", "$", ",", "\u00a0", "\u2003"]
    for _ in range(5000):
        some = ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 12))) for _ in range(rnd.randint(0, 3))]
        assert piece_set(some) == {p for t in some for p in pieces(t)}, some
