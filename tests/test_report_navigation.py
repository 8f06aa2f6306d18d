"""What a reviewer navigates in report.html (issue 23, items 5-7): the table of contents, the reproduce box with
copy buttons, sortable flipped questions with the point where the texts part, a browser of every question,
the "diverge most" table labelled and tucked away when the outputs are indistinguishable, llama.cpp's KV types
by name, the flipped counts reconciled with the 2×2 table, and no "inf pp"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers.docs import comparison
from helpers.rundirs import build_run_dir

from harness.report import data, write_report
from harness.report.headline import headline
from harness.report.texts import first_difference
from harness.report.words import effect_pp
from harness.results import schema
from harness.results.fileio import atomic_write_text, read_json
from harness.util.ggml import named, type_name


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = build_run_dir(tmp_path_factory.mktemp("nav") / "run", n=80, repeats=2, aa=True)
    return root, write_report(root).read_text()


def test_a_table_of_contents_links_every_section_shown(run: tuple[Path, str]) -> None:
    _, html = run
    toc = re.search(r'<nav id="toc"[^>]*>(.*?)</nav>', html, re.S)
    assert toc is not None
    links = re.findall(r'href="#([\w-]+)"', toc.group(1))
    assert links[:2] == ["verdict", "reproduce"] and "flipped" in links and "questions" in links
    for target in links:
        assert f'id="{target}"' in html, target
    assert "position: sticky" in html


def test_the_reproduce_box_holds_the_commands_with_copy_buttons(run: tuple[Path, str]) -> None:
    root, html = run
    box = html[html.index('id="reproduce"'):html.index('id="compared"')]
    targets = re.findall(r'<button class="copy" type="button" data-target="([\w-]+)">copy</button>', box)
    assert targets == ["cmd-abh", "cmd-a", "cmd-b"]
    for t in targets:
        assert f'<pre class="cmd" id="{t}">' in box
    assert html.index('id="reproduce"') < html.index('id="accuracy"')  # near the top
    assert "sglang.launch_server" in box and "abh run" in box


def test_flipped_questions_sort_and_mark_where_the_texts_part(run: tuple[Path, str]) -> None:
    _, html = run
    flips = html[html.index('<table id="flips"'):html.index("</table>", html.index('<table id="flips"'))]
    assert 'class="sortable"' in flips and flips.count('data-sort="') == 5
    assert '<mark class="fd" title="where the two outputs part">' in flips
    assert first_difference("The answer is 12.", "The answer is 13.") == 15
    assert first_difference("same", "same") is None and first_difference("ab", "abc") == 2


def test_every_question_is_in_the_browser(run: tuple[Path, str]) -> None:
    root, html = run
    rows = json.loads(re.search(r'id="questions-data">(.*?)</script>', html, re.S).group(1))
    c = schema.load_comparison(root / "comparison.json")
    assert len(rows) == c.n_total and {r["c"] for r in rows} <= set(data.OUTCOMES)
    by_cat = {k: sum(r["c"] == k for r in rows) for k in data.OUTCOMES}
    flipped = re.search(r"(\d+) only B right, (\d+) only A right", html)
    assert flipped is not None and int(flipped.group(1)) == by_cat["b"] and int(flipped.group(2)) == by_cat["a"]
    assert all(len(r["a"]["p"]) == 2 and len(r["b"]["p"]) == 2 for r in rows)  # both repeats' answers


def test_the_flip_counts_say_how_they_relate_to_the_2x2_table(run: tuple[Path, str]) -> None:
    _, html = run
    assert "These count questions; the 2×2 table above counts question mass" in html
    one = write_report(build_run_dir(Path(run[0]).parent / "one", n=40)).read_text()
    assert "With one run per arm these are the 2×2 table's discordant cells" in one


def test_diverge_most_is_labelled_and_tucked_away_when_indistinguishable(tmp_path: Path) -> None:
    root = build_run_dir(tmp_path / "run", n=30)
    c = read_json(root / "comparison.json")
    top = [{"question": 3, "tokens": 10, "kld": 1e-4, "kld_aa": 1e-4, "d": 0.0, "same_top_rate": 1.0,
            "rms_dlogprob": None, "text_identical": True, "first_divergence": None, "first_divergence_char": None,
            "first_divergence_source": None, "first_divergence_span": None, "text_identical_aa": True,
            "first_divergence_aa": None}]
    for verdict, hidden in (("indistinguishable", True), ("diverged", False)):
        c["divergence"] = {"verdict": verdict, "verdict_reason": "", "kld_mean": 1e-4, "kld_mean_aa": 1e-4,
                           "p": 0.4, "top_questions": top}
        atomic_write_text(root / "comparison.json", json.dumps(c))
        html = write_report(root).read_text()
        assert ('<details id="div-top-box"><summary>Questions ranked by KLD A‖B minus the A/A floor' in html) is hidden
        assert ("ranked by mean KLD A‖B minus the A/A floor" in html) is not hidden


def test_llamacpp_kv_types_are_named() -> None:
    assert type_name(8) == "q8_0" and type_name("1") == "f16" and type_name("x") is None
    assert named("8") == "8 (q8_0)" and named("99") == "99"
    view = data.diff_view({"arm_diff": {"differences": [{"key": "args.--type_k", "values": {"a": "1", "b": "8"}}],
                                        "disallowed": []}, "arms": {"a": {}, "b": {}}},
                          {"a": "kv-f16", "b": "kv-q8_0"})
    assert view is not None and (view["rows"][0]["a"], view["rows"][0]["b"]) == ("1 (f16)", "8 (q8_0)")


def test_an_undetectable_effect_is_said_in_words_not_inf() -> None:
    assert effect_pp(float("inf")) == effect_pp(1.25) == "none (no effect up to 100 pp is detectable)"
    assert effect_pp(0.0462) == "4.62 pp"
    line = headline(comparison(verdict="inconclusive", mde=float("inf")))
    assert "inf" not in line and "no effect up to 100 pp is detectable" in line
