"""Redaction of secrets: env, argv, free text, whole trees, and nothing secret in a run's files."""

from __future__ import annotations

import subprocess
import sys

from harness.redact import REDACTED, is_secret_name, redact_argv, redact_env, redact_text, redact_tree


def test_redaction_of_env_and_argv():
    env = {"HF_TOKEN": "t", "OPENAI_API_KEY": "k", "my_secret": "s", "DB_PASSWORD": "p", "AWS_SECRET_ACCESS_KEY": "a",
           "TOKENIZER_PATH": "/tok", "SGLANG_MAX_TOKENS": "5", "SGLANG_USE_AITER": "1"}
    out = redact_env(env)
    for k in ("HF_TOKEN", "OPENAI_API_KEY", "my_secret", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY"):
        assert out[k] == REDACTED
    assert out["TOKENIZER_PATH"] == "/tok" and out["SGLANG_MAX_TOKENS"] == "5" and out["SGLANG_USE_AITER"] == "1"
    argv = ["python", "-m", "x", "--api-key", "sk-1", "--api-key=sk-2", "--hf-token", "hf_x", "--password=p",
            "--tokenizer-path", "/tok", "--max-new-tokens", "5", "--skip-tokenizer-init", "--secret-flag",
            "--tp", "8"]
    r = redact_argv(argv)
    assert r == ["python", "-m", "x", "--api-key", REDACTED, f"--api-key={REDACTED}", "--hf-token", REDACTED,
                 f"--password={REDACTED}", "--tokenizer-path", "/tok", "--max-new-tokens", "5",
                 "--skip-tokenizer-init", "--secret-flag", "--tp", "8"]
    assert "sk-1" not in " ".join(r) and "sk-2" not in " ".join(r)
    assert is_secret_name("x-api-key") and not is_secret_name("stop_token_ids")


def test_redact_tree_covers_config_argv_overrides_and_server_info():
    tree = {
        "config": {"engine": {"env": {"HF_TOKEN": "hf_abc", "SGLANG_USE_AITER": "1"}, "args": ["--api-key", "s3"]},
                   "arms": {"a": {"checks": [{"kind": "http", "key": "build", "equals": "fix"}]}},
                   "task": {"max_new_tokens": 512}},
        "argv": ["abh run", "engine.env.OPENAI_API_KEY=sk-1", "experiment.repeats=3"],
        "probe": {"server_info": {"api_key": "topsecret", "tp_size": 8, "admin_api_key": None}},
    }
    out = redact_tree(tree)
    text = repr(out)
    for secret in ("hf_abc", "s3", "sk-1", "topsecret"):
        assert secret not in text
    assert out["config"]["engine"]["env"]["HF_TOKEN"] == REDACTED
    assert out["config"]["engine"]["env"]["SGLANG_USE_AITER"] == "1"
    assert out["config"]["arms"]["a"]["checks"][0]["key"] == "build"
    assert out["config"]["task"]["max_new_tokens"] == 512
    assert out["argv"][2] == "experiment.repeats=3"
    assert out["probe"]["server_info"]["tp_size"] == 8


def test_secrets_never_reach_the_run_manifest(tmp_path):
    r = subprocess.run([sys.executable, "-m", "harness.cli", "run", f"hydra.run.dir={tmp_path}/run", "progress=false",
                        "task.num_questions=20", "client.parallel=20", "experiment.repeats=1",
                        "experiment.aa_control=false", "+engine.env.HF_TOKEN=hf_leak123",
                        "+arms.a.env.MY_SECRET=leak456", "+arms.b.env.MY_SECRET=leak456", "report=true"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    for f in (tmp_path / "run").rglob("*"):
        if f.is_file() and f.suffix in (".json", ".jsonl", ".html"):
            text = f.read_text(errors="replace")
            assert "hf_leak123" not in text and "leak456" not in text, f
    assert "hf_leak123" not in r.stdout + r.stderr


def test_redact_text_in_logs_and_overrides():
    cases = {
        "ServerArgs(model_path='m', api_key='sk-123', tp_size=8)": "api_key='***REDACTED***'",
        "+engine.args=[--api-key,sk-abcdef]": "--api-key,***REDACTED***",
        "override_dirname: +engine.env.HF_TOKEN=hf_x,engine.flip_rate=0.01": "HF_TOKEN=***REDACTED***,engine",
        "Authorization: Bearer sk-abcdef123": "Bearer ***REDACTED***",
        "export OPENAI_API_KEY=sk-9": "OPENAI_API_KEY=***REDACTED***",
    }
    for text, want in cases.items():
        assert want in redact_text(text), text
    for benign in ("--max-new-tokens 512", "tokenizer_path=/m", "key: build", "api_key=None", "a basic test"):
        assert REDACTED not in redact_text(benign), benign
