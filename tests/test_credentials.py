"""Credentials (issue 22, item 3): a URL's user:password@ is sent as basic auth and appears nowhere abh records
or prints; an API key from the environment is sent as a bearer token and never recorded; values in a known
token format are redacted whatever their name. Against a real server that checks the header it gets."""

from __future__ import annotations

import base64
import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TEST_JSONL
from helpers.faultserver import FaultServer
from helpers.waiting import PATIENCE_S

from harness import exitcodes
from harness.cli.main import main as abh_main
from harness.results.fileio import read_json
from harness.util.redact import REDACTED, redact_env, redact_text, redact_tree, scrub

PASSWORD = "secretpw9"
BASIC = "Basic " + base64.b64encode(f"user:{PASSWORD}".encode()).decode()
API_KEY = "plain0key0without0any0known0format"  # not redacted by its form: only never being recorded hides it


def abh(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``abh ARGS`` as a command, in its own process (what it prints is what a terminal would show)."""
    return subprocess.run([sys.executable, "-m", "harness.cli.main", *args], capture_output=True, text=True,
                          timeout=PATIENCE_S, env={**os.environ, **(env or {})})


def abh_here(*args: str) -> subprocess.CompletedProcess:
    """``abh ARGS`` in this process: exit code, stdout and stderr as a command's."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = abh_main(list(args))
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def with_userinfo(url: str) -> str:
    return url.replace("http://", f"http://user:{PASSWORD}@")


def assert_nowhere(secret: str, root: Path, *outputs: str) -> None:
    files = [f for f in root.rglob("*") if f.is_file()]
    assert files
    for f in files:
        assert secret.encode() not in f.read_bytes(), f
    for text in outputs:
        assert secret not in text


def test_abh_eval_sends_userinfo_as_basic_auth_and_records_the_bare_url(tmp_path):
    out = tmp_path / "ev"
    with FaultServer("auth", expect=BASIC) as srv:
        r = abh_here("eval", "--url", with_userinfo(srv.url), "--out", str(out), "--data", str(TEST_JSONL),
                     "--num-questions", "3", "--no-progress")
        assert r.returncode == exitcodes.OK, r.stderr
        assert set(srv.auth_seen) == {BASIC}  # every request carried it (the server answers 401 otherwise)
    assert read_json(out / "eval.json")["url"] == srv.url
    assert_nowhere(PASSWORD, out, r.stdout, r.stderr)


def test_abh_eval_sends_the_api_key_of_an_env_var_and_records_none(tmp_path, monkeypatch):
    out = tmp_path / "ev"
    monkeypatch.setenv("ABH_TEST_KEY", API_KEY)
    with FaultServer("auth", expect=f"Bearer {API_KEY}") as srv:
        r = abh_here("eval", "--url", srv.url, "--out", str(out), "--data", str(TEST_JSONL), "--num-questions", "3",
                     "--no-progress", "--api-key-env", "ABH_TEST_KEY")
        assert r.returncode == exitcodes.OK, r.stderr
        assert set(srv.auth_seen) == {f"Bearer {API_KEY}"}
    assert_nowhere(API_KEY, out, r.stdout, r.stderr)
    r = abh_here("eval", "--url", srv.url, "--out", str(tmp_path / "x"), "--api-key-env", "ABH_NO_SUCH_VAR")
    assert r.returncode == exitcodes.BAD_CONFIG and "--api-key-env=ABH_NO_SUCH_VAR: that environment variable is " \
        "not set" in r.stderr and not (tmp_path / "x").exists()


@pytest.mark.slow  # a whole run of processes: abh eval's userinfo test and abh ab's api-key test stay in the default run
def test_abh_ab_reaches_userinfo_urls_and_leaks_the_password_nowhere(tmp_path):
    """manifest.json, run.log, eval.json, comparison.json/.md, summary.json, report.html and the terminal."""
    out = tmp_path / "ab"
    with FaultServer("auth", expect=BASIC) as sa, FaultServer("auth", expect=BASIC) as sb:
        r = abh("ab", with_userinfo(sa.url), with_userinfo(sb.url), "--out", str(out), "--data", str(TEST_JSONL),
                "--num-questions", "4", "--no-progress")
        assert r.returncode == exitcodes.OK, r.stderr
        assert set(sa.auth_seen) == set(sb.auth_seen) == {BASIC}
    for name in ("manifest.json", "run.log", "comparison.json", "comparison.md", "summary.json", "report.html"):
        assert (out / name).is_file(), name
    assert_nowhere(PASSWORD, out, r.stdout, r.stderr)
    manifest = read_json(out / "manifest.json")
    assert manifest["config"]["arms"]["a"]["engine"]["url"] == sa.url
    assert read_json(out / "evals" / "a" / "r1" / "eval.json")["url"] == sa.url


def test_abh_ab_with_an_api_key(tmp_path, monkeypatch):
    out = tmp_path / "ab"
    monkeypatch.setenv("ABH_TEST_KEY", API_KEY)
    with FaultServer("auth", expect=f"Bearer {API_KEY}") as sa, FaultServer("auth", expect=f"Bearer {API_KEY}") as sb:
        r = abh_here("ab", with_userinfo(sa.url), sb.url, "--out", str(out), "--data", str(TEST_JSONL),
                     "--num-questions", "4", "--no-progress", "--api-key-env", "ABH_TEST_KEY")
        assert r.returncode == exitcodes.OK, r.stderr
        assert set(sa.auth_seen) == set(sb.auth_seen) == {f"Bearer {API_KEY}"}  # the key wins over userinfo
    assert_nowhere(API_KEY, out, r.stdout, r.stderr)
    assert_nowhere(PASSWORD, out, r.stdout, r.stderr)
    assert read_json(out / "manifest.json")["config"]["client"]["api_key_env"] == "ABH_TEST_KEY"


def test_a_bad_url_is_refused_without_repeating_its_password(tmp_path):
    r = abh_here("eval", "--url", f"http://user:{PASSWORD}@127.0.0.1:notaport", "--out", str(tmp_path / "x"))
    assert r.returncode == exitcodes.BAD_CONFIG and "not a valid URL" in r.stderr and PASSWORD not in r.stderr


TOKENS = ["hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx", "ghp_" + "a1" * 18,
          "github_pat_" + "A1b2" * 10, "AKIAABCDEFGHIJKLMNOP",
          "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"]


@pytest.mark.parametrize("token", TOKENS, ids=["hf", "sk", "ghp", "github_pat", "aws", "jwt"])
def test_a_token_looking_value_is_redacted_whatever_its_name(token):
    assert token not in redact_text(f"MY_SETTING={token}") and REDACTED in redact_text(f"x {token} y")
    assert redact_env({"MY_SETTING": token}) == {"MY_SETTING": REDACTED}
    assert redact_tree({"harmless": [f"--flag={token}"], "n": {"v": token}}) == \
        {"harmless": [f"--flag={REDACTED}"], "n": {"v": REDACTED}}


@pytest.mark.parametrize("text", ["sha256 " + "ab" * 32, "task-force-operations-alpha-beta", "gh_pages", "sk-3",
                                  "mail me@example.com", "https://github.com/sgl-project/sglang", "AKIA1"])
def test_ordinary_values_are_kept(text):
    assert scrub(text) == text


def test_userinfo_is_removed_from_any_text():
    assert scrub("GET http://u:p@h:1/x and https://tok@h2/") == "GET http://h:1/x and https://h2/"
