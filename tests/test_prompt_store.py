"""Each prompt's text once per run: evals name their prompts by hash, the texts sit in one shared store; evals
written before (each row with its text, eval.json schema 1) are still read and resumed."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from harness.measure.divergence_pass import load_references
from harness.results import schema
from harness.results.eval_store import EvalStore, load_eval
from harness.results.fileio import PlantedLink, StoreError, read_json, read_jsonl
from harness.results.integrity import first_prompt, prompt_hashes
from harness.results.prompt_store import TEXTS, eval_prompts, pack, pack_prompts, packed
from harness.results.schema import SampleRecord

PROMPTS = [f"Shared shots.\n\nQuestion: {i} + 1?\nAnswer:" for i in range(5)]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _rec(i: int) -> SampleRecord:
    return SampleRecord(index=i, prompt_sha256=_sha(PROMPTS[i]), output=f"#### {i + 1}", pred=i + 1, label=i + 1,
                        correct=True, invalid=False, finish_reason="stop", prompt_tokens=10, completion_tokens=3,
                        latency_s=0.1, attempts=1, error=None)


def _eval(root: Path, store: Path | None, indices: range = range(5)) -> Path:
    with EvalStore(root, store) as st:
        st.open({"dataset_sha256": "d" * 64, "recipe": "sglang", "indices": list(range(5)), "task": "other"})
        for i in indices:
            st.append(_rec(i), PROMPTS[i])
    return root


def test_evals_of_a_run_write_each_text_once(tmp_path: Path) -> None:
    store = tmp_path / TEXTS
    evals = [_eval(tmp_path / "evals" / role / "r1", store) for role in ("a", "b", "aa")]
    texts = read_jsonl(store)
    assert sorted(r["prompt"] for r in texts) == sorted(PROMPTS)  # once, not once per eval
    for d in evals:
        assert all(set(r) == {"index", "prompt_sha256"} for r in read_jsonl(d / "prompts.jsonl"))
        meta = read_json(d / "eval.json")
        assert meta["schema_version"] == 2 and meta["prompt_texts"] == "../../../" + TEXTS
        assert {r["index"]: r["prompt"] for r in eval_prompts(d)} == dict(enumerate(PROMPTS))
        assert prompt_hashes(d) == {i: _sha(p) for i, p in enumerate(PROMPTS)}
        assert first_prompt(d) == (0, PROMPTS[0])
        assert [r.prompt for r in load_references(d)] == PROMPTS


def test_a_lone_eval_keeps_its_texts_beside_it(tmp_path: Path) -> None:
    d = _eval(tmp_path / "ev", None)
    assert read_json(d / "eval.json")["prompt_texts"] == TEXTS and (d / TEXTS).is_file()
    assert [r["prompt"] for r in eval_prompts(d)] == PROMPTS


def test_a_text_that_is_not_its_hash_is_no_prompt(tmp_path: Path) -> None:
    store = tmp_path / TEXTS
    d = _eval(tmp_path / "evals" / "a" / "r1", store)
    rows = read_jsonl(store)
    rows[2]["prompt"] = "tampered"
    store.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert sorted(r["index"] for r in eval_prompts(d)) == [0, 1, 3, 4]


def _old_layout(root: Path) -> Path:
    """An eval as abh wrote it before: schema 1, each prompts.jsonl row with its text, no text store."""
    root.mkdir(parents=True)
    (root / "eval.json").write_text(json.dumps({
        "kind": schema.EVAL, "schema_version": 1, "dataset_sha256": "d" * 64, "recipe": "sglang",
        "indices": list(range(5)), "task": "other", "resumes": 0, "sessions": []}))
    (root / "samples.jsonl").write_text("".join(json.dumps(_rec(i).to_row()) + "\n" for i in range(3)))
    (root / "prompts.jsonl").write_text("".join(
        json.dumps({"index": i, "prompt_sha256": _sha(p), "prompt": p}) + "\n" for i, p in enumerate(PROMPTS[:3])))
    return root


def test_an_old_eval_is_read_and_resumed_into_the_store(tmp_path: Path) -> None:
    d = _old_layout(tmp_path / "evals" / "a" / "r1")
    assert [r.prompt for r in load_references(d)] == PROMPTS[:3]
    assert load_eval(d)[0]["schema_version"] == 1
    store = tmp_path / TEXTS
    _eval(d, store, range(3, 5))  # the resume asks the two questions left
    assert sorted(r["prompt"] for r in read_jsonl(store)) == sorted(PROMPTS)
    assert all("prompt" not in r for r in read_jsonl(d / "prompts.jsonl"))
    assert [r.prompt for r in load_references(d)] == PROMPTS
    assert read_json(d / "eval.json")["schema_version"] == 2


def test_an_eval_of_an_unknown_version_is_refused(tmp_path: Path) -> None:
    d = _eval(tmp_path / "ev", None)
    meta = read_json(d / "eval.json")
    (d / "eval.json").write_text(json.dumps({**meta, "schema_version": 3}))
    with pytest.raises(schema.SchemaError):
        load_eval(d)


@pytest.mark.parametrize("torn", [b'{"prompt_sha256": "ab', b'{"prompt'])
def test_a_store_torn_by_a_full_disk_takes_the_next_text_on_a_line_of_its_own(tmp_path: Path, torn: bytes) -> None:
    """A full disk cut the store's last row short; the resumed eval appends after it: the torn tail is dropped,
    the rows before it and the new one are read (a torn row joined to the next was 'not valid JSON')."""
    store = tmp_path / "run" / TEXTS
    _eval(tmp_path / "run" / "evals" / "a", store, range(2))
    store.write_bytes(store.read_bytes() + torn)
    _eval(tmp_path / "run" / "evals" / "b", store, range(5))
    rows = read_jsonl(store)
    assert sorted(r["prompt"] for r in rows) == sorted(PROMPTS) and store.read_bytes().endswith(b"\n")


def test_a_packed_store_is_read_resumed_and_packed_again(tmp_path: Path) -> None:
    """A finished run's store is packed gzip'd (the plain file gone); its evals read their prompts from it, a
    resumed eval appends only the texts it lacks (plain) and the next pack holds each text once."""
    store = tmp_path / TEXTS
    a = _eval(tmp_path / "evals" / "a" / "r1", store, range(3))
    plain = store.read_bytes()
    pack(store)
    assert not store.exists() and packed(store).is_file() and len(packed(store).read_bytes()) < len(plain)
    assert gzip.decompress(packed(store).read_bytes()) == plain  # lossless: the same rows
    assert [r["prompt"] for r in eval_prompts(a)] == PROMPTS[:3]
    b = _eval(tmp_path / "evals" / "b" / "r1", store)  # all five: only the two new texts appended
    assert sorted(r["prompt"] for r in read_jsonl(store)) == sorted(PROMPTS[3:])
    assert [r["prompt"] for r in eval_prompts(b)] == PROMPTS
    pack(store)
    assert not store.exists()
    rows = [json.loads(line) for line in gzip.decompress(packed(store).read_bytes()).splitlines()]
    assert sorted(r["prompt"] for r in rows) == sorted(PROMPTS)
    assert [r["prompt"] for r in eval_prompts(a)] == PROMPTS[:3]


def test_a_packed_store_that_is_not_gzip_is_refused(tmp_path: Path) -> None:
    store = tmp_path / TEXTS
    d = _eval(tmp_path / "evals" / "a" / "r1", store)
    pack(store)
    packed(store).write_bytes(b"not gzip at all")
    with pytest.raises(StoreError, match="not a readable gzip"):
        list(eval_prompts(d))


def test_a_packed_prompts_file_is_read_and_a_resumed_eval_writes_it_plain_again(tmp_path: Path) -> None:
    store = tmp_path / TEXTS
    d = _eval(tmp_path / "evals" / "a" / "r1", store, range(3))
    plain = (d / "prompts.jsonl").read_bytes()
    pack_prompts(d)
    assert not (d / "prompts.jsonl").exists() and gzip.decompress((d / "prompts.jsonl.gz").read_bytes()) == plain
    assert [r["prompt"] for r in eval_prompts(d)] == PROMPTS[:3] and first_prompt(d) == (0, PROMPTS[0])
    assert [r.prompt for r in load_references(d)] == PROMPTS[:3]
    _eval(d, store, range(3, 5))  # resumed: the two questions left
    assert not (d / "prompts.jsonl.gz").exists()
    assert [r["index"] for r in read_jsonl(d / "prompts.jsonl")] == list(range(5))
    assert [r["prompt"] for r in eval_prompts(d)] == PROMPTS


@pytest.mark.parametrize("which", ["prompts", "texts"])
def test_packing_refuses_a_planted_link_and_reads_nothing_through_it(tmp_path: Path, which: str) -> None:
    """A link planted where a finished run packs its prompts (an eval's prompts.jsonl, the run's text store): refused
    by name; its target is not read into the run directory, and the link is left as it was."""
    store = tmp_path / TEXTS
    d = _eval(tmp_path / "evals" / "a" / "r1", store, range(3))
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes((d / "prompts.jsonl").read_bytes() if which == "prompts" else store.read_bytes())
    link = d / "prompts.jsonl" if which == "prompts" else store
    link.unlink()
    link.symlink_to(outside)
    with pytest.raises(PlantedLink, match="is a symbolic link"):
        pack_prompts(d) if which == "prompts" else pack(store)
    assert link.is_symlink() and not packed(link).exists() and outside.read_bytes()


def test_texts_read_back_whole_hold_a_shared_prefix_once() -> None:
    """The reader holds a prefix consecutive prompts share (a few-shot block) once, and gives every text back
    exactly; texts that share nothing long are held as they are."""
    from harness.results.prompt_store import HEAD_MIN_CHARS, Texts

    shots = "Question: 1 + 1?\nAnswer: 2\n\n" * (HEAD_MIN_CHARS // 10)
    few_shot = [shots + f"Question: {i} + 2 ’?\nAnswer:" for i in range(50)]
    apart = [f"{i} " * 3 for i in range(20)]
    rows = [(_sha(t), t) for t in [*few_shot, *apart]]
    texts = Texts(rows)
    assert dict(texts.items()) == dict(rows) and list(texts) == [s for s, _ in rows] and len(texts) == len(rows)
    assert texts.get("missing") is None and "missing" not in texts
    assert sum(len(t) for _, t in texts._tails.values()) < len(shots) + sum(len(t) - len(shots) for t in few_shot) \
        + sum(len(t) for t in apart)
