"""report.html: content, escaping of untrusted model output, SIMULATED banner, sweep report, ``abh report``.

The run / comparison directories are built by ``helpers.rundirs.build_run_dir``."""

from __future__ import annotations

import html as htmlmod
import json
import re
from pathlib import Path

import pytest
from helpers.docs import doc
from helpers.rundirs import BOLD, INJECT_INDEX, SCRIPT_ALERT, SCRIPT_TITLE, build_run_dir

from harness.cli.report import report_main as main
from harness.report import detect, write_report, write_sweep_report
from harness.report.data import question_from_prompt
from harness.report.headline import headline
from harness.results import schema


def _text(html: str) -> str:
    """Visible text, roughly: tags dropped, entities decoded (what a browser would show)."""
    return htmlmod.unescape(re.sub(r"<[^>]+>", " ", html))


# ------------------------------------------------------------------------------------------ tests
def test_run_report_content(tmp_path: Path) -> None:
    root = build_run_dir(tmp_path / "run", n=80, repeats=2, aa=True)
    c = json.loads((root / "comparison.json").read_text())
    path = write_report(root)
    assert path == root / "report.html"
    html = path.read_text()
    text = _text(html)
    # verdict first, with its quotable sentence
    assert text.index(c["verdict"].upper().replace("_", " ")) < text.index("Accuracy per arm")
    assert headline(schema.load_comparison(root / "comparison.json")).split(" ", 2)[2] in text
    for arm in ("a", "b"):
        assert f"{100 * c['arms'][arm]['accuracy']:.2f} %" in text
        for r in c["arms"][arm]["repeats"]:
            assert f"{100 * r:.2f} %" in text
    assert f"{100 * c['delta']:+.2f}".replace("-", "\u2212") in text
    assert f"±{100 * c['noise_band'][1]:.2f} pp" in text
    assert f"{100 * c['mde']:.2f} pp" in text
    assert "margin ±1.00 pp" in text
    for k in ("both", "a_only", "b_only", "neither"):
        assert f">{c[k]}<" in html
    # what was compared: commands (one flag per line), env with secrets redacted, checks with evidence
    assert "--enforce-shared-experts-fusion" in text and "SGLANG_USE_AITER=1" in text
    assert "***REDACTED***" in text and "hf_token=abc" not in text
    assert "The arms differ only in: source.patch, python" in text
    assert re.search(r'class="dl"[^>]*>/opt/venv-fix/bin/python3 -m sglang.launch_server', html)
    assert "patch applied" in text and "has_per_rank_fused_shared_slots" in text
    assert "4 of 4 passed" not in text and "2 of 2 passed" in text
    # flipped questions, question text from the dataset, latency/throughput, provenance
    assert 'id="flips"' in html and "Tom has 6 apples" in text
    assert "output tok/s" in text and "mi355x-node07" in text and "4996bf4" in text
    # self-contained: no external resources
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html and not re.search(r"url\((?!#)", html)  # only in-page SVG references
    assert "Content-Security-Policy" in html


def test_model_output_is_escaped(tmp_path: Path) -> None:
    root = build_run_dir(tmp_path / "run", n=40)
    html = write_report(root).read_text()
    assert SCRIPT_ALERT not in html and SCRIPT_TITLE not in html and BOLD not in html
    assert "<img src=x" not in html and "<i>red</i>" not in html
    unmarked = re.sub(r'<mark class="fd"[^>]*>|</mark>', "", html)  # where the two outputs part is marked
    assert htmlmod.escape(SCRIPT_ALERT, quote=False) in unmarked.replace("&#39;", "'")
    assert "&lt;b&gt;bold claim&lt;/b&gt;" in unmarked
    assert "&lt;i&gt;red&lt;/i&gt;" in unmarked  # question text too
    # the only script that runs is the page's own; the question browser's data is JSON that no "<" can end early
    assert len(re.findall(r"<script>", html)) == 1 and len(re.findall(r"<script", html)) == 3
    assert "alert(" not in html.split("<script>")[1].split("</script>")[0]
    for block in re.findall(r'<script type="application/json" id="[^"]+">(.*?)</script>', html, re.S):
        assert "<" not in block and ">" not in block
    data = json.loads(re.search(r'id="questions-data">(.*?)</script>', html, re.S).group(1))
    assert len(data) == 40 and any("<b>bold claim</b>" in q["a"]["o"] + q["b"]["o"] for q in data)


def test_simulated_banner(tmp_path: Path) -> None:
    sim = write_report(build_run_dir(tmp_path / "sim", n=30, simulated=True)).read_text()
    real = write_report(build_run_dir(tmp_path / "real", n=30, simulated=False)).read_text()
    assert 'id="simulated-banner"' in sim and "[SIMULATED]" in sim
    assert 'id="simulated-banner"' not in real and "SIMULATED" not in real


def test_comparison_dir_without_manifest(tmp_path: Path) -> None:
    out = build_run_dir(tmp_path / "cmpcase", n=50, run=False, simulated=False, margin=None)
    assert detect(out) == "comparison"
    html = write_report(out).read_text()
    text = _text(html)
    assert "fix vs baseline" in text  # names from eval.json
    assert "What was compared" not in text  # no manifest: nothing claimed about launches
    assert "Flipped questions" in text and "Tom has" in text


def test_question_text_falls_back_to_prompts(tmp_path: Path) -> None:
    root = build_run_dir(tmp_path / "run", n=30)
    (root / "data" / "test.jsonl").unlink()
    text = _text(write_report(root).read_text())
    assert f"Question {INJECT_INDEX}: Tom has" in text
    assert question_from_prompt("Question: a\nAnswer: 1\n\nQuestion: b?\nAnswer:") == "b?"


def test_not_comparable_and_errors(tmp_path: Path) -> None:
    root = build_run_dir(tmp_path / "run", n=50, errors={0, 1, 2, 5})
    c = json.loads((root / "comparison.json").read_text())
    assert c["verdict"] == "not_comparable"
    text = _text(write_report(root).read_text())
    assert "NOT COMPARABLE" in text and headline(schema.load_comparison(root / "comparison.json")).split(": ", 1)[1] in text
    assert "4 dropped for request errors" in text


def test_run_without_comparison(tmp_path: Path) -> None:
    root = build_run_dir(tmp_path / "run", n=20)
    (root / "comparison.json").unlink()
    text = _text(write_report(root).read_text())
    assert "NOT COMPARABLE" in text and "no comparison.json" in text and "--enforce-shared-experts-fusion" in text


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_sweep_report(tmp_path: Path) -> None:
    from harness.analysis.sweep import summarize_sweep

    sweep = tmp_path / "sweep"
    for k, (pa, pb) in enumerate([(0.9, 0.9), (0.85, 0.95), (0.9, 0.8)]):
        job = build_run_dir(sweep / f"job{k}_x={k}", n=200, p_a=pa, p_b=pb, seed=k, inject=False)
        write_report(job)
    s = doc(summarize_sweep(sweep, "holm"))
    assert detect(sweep) == "sweep"
    html = write_sweep_report(sweep).read_text()
    text = _text(html)
    for r in s["comparisons"]:
        assert r["label"] in text  # the swept keys, not the whole job directory name
        assert f"{100 * r['delta']:+.2f}".replace("-", "\u2212") in text
        assert r["verdict"].upper().replace("_", " ") in text
    assert "holm" in text and "<svg" in html and 'href="job1_x=1/report.html"' in html
    assert 'id="simulated-banner"' in html


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli.main import main as abh

    root = build_run_dir(tmp_path / "run", n=20)
    assert main([str(root)]) == 0
    assert (root / "report.html").exists() and "(run)" in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert abh(["report", str(empty)]) == 2
    assert "nothing to report" in capsys.readouterr().err
    assert main([str(tmp_path / "missing")]) == 2
