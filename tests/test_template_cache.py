"""The report templates' compiled code is kept between processes (Jinja's bytecode file cache), and a cache that
is garbled, unwritable or unavailable is no cache: the report is the same either way."""

from __future__ import annotations

import tempfile
from pathlib import Path

import jinja2
import pytest

from harness.report import html, template_cache

CONTEXT = {"x": "<b>"}


def _env(cache: jinja2.BytecodeCache | None) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.DictLoader({"t.j2": "{% for i in range(2) %}{{ x }}{{ i }}{% endfor %}"}),
                              autoescape=True, bytecode_cache=cache)


def _no_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("compiled although the cache holds the template")

    monkeypatch.setattr(jinja2.Environment, "compile", refuse)


def test_a_template_compiled_once_is_read_back_by_the_next_environment(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    want = _env(template_cache.bytecode_cache(str(tmp_path))).get_template("t.j2").render(CONTEXT)
    assert [p.name.startswith("__abh_report_") for p in tmp_path.iterdir()] == [True]
    _no_compiling(monkeypatch)
    assert _env(template_cache.bytecode_cache(str(tmp_path))).get_template("t.j2").render(CONTEXT) == want


def test_the_report_environment_keeps_its_compiled_templates() -> None:
    assert isinstance(html._env().bytecode_cache, jinja2.BytecodeCache)


def test_a_garbled_cache_file_is_compiled_afresh(tmp_path: Path) -> None:
    want = _env(None).get_template("t.j2").render(CONTEXT)
    _env(template_cache.bytecode_cache(str(tmp_path))).get_template("t.j2")
    for f in tmp_path.iterdir():
        f.write_bytes(f.read_bytes()[:40] + b"\x00garbage")  # the header intact, the code torn
    assert _env(template_cache.bytecode_cache(str(tmp_path))).get_template("t.j2").render(CONTEXT) == want


def test_a_cache_that_cannot_be_written_or_had_renders_as_before(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    want = _env(None).get_template("t.j2").render(CONTEXT)
    gone = template_cache.bytecode_cache(str(tmp_path / "missing"))  # every write fails
    assert _env(gone).get_template("t.j2").render(CONTEXT) == want
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(blocker))  # no per-user directory can be made under a file
    assert template_cache.bytecode_cache() is None
    assert _env(template_cache.bytecode_cache()).get_template("t.j2").render(CONTEXT) == want
