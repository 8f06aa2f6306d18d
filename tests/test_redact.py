"""Redaction of secrets: env, argv, free text, whole trees, Hydra's output and sweeps. Nothing secret in a whole
run's files and output: test_run.py::test_the_demo_run_records_and_prints_no_secret (on the shared demo run)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.waiting import PATIENCE_S

from harness.cli.run import redact_multirun_yaml
from harness.results.fileio import read_json
from harness.util.redact import (
    REDACTED,
    Redactor,
    is_secret_name,
    redact_argv,
    redact_env,
    redact_text,
    redact_tree,
    secret_values,
)
from harness.util.redact_stdio import RedactingWriter, redacted_stdio

R = REDACTED


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


#: Real text, each line with exactly what redaction must make of it: secrets hidden, and nothing else.
HIDDEN = [
    ("HF_TOKEN=abc", f"HF_TOKEN={R}"),
    ("--api-key abc", f"--api-key {R}"),
    ('"api_key": "abc"', f'"api_key": "{R}"'),
    ("password: x", f"password: {R}"),
    ("db password = hunter2", f"db password = {R}"),
    ("Authorization: Bearer sk-abcdef123", f"Authorization: Bearer {R}"),
    ("curl -H 'Authorization: Basic dXNlcjpwYXNz' http://h", f"curl -H 'Authorization: Basic {R}' http://h"),
    ("ServerArgs(model_path='m', tokenizer_path='m', api_key='sk-123', tp_size=8, max_prefill_tokens=16384)",
     f"ServerArgs(model_path='m', tokenizer_path='m', api_key='{R}', tp_size=8, max_prefill_tokens=16384)"),
    ("export OPENAI_API_KEY=sk-9", f"export OPENAI_API_KEY={R}"),
    ("abh run -m +arms.a.env.HF_TOKEN=s1,s2 task.num_questions=20",
     f"abh run -m +arms.a.env.HF_TOKEN={R} task.num_questions=20"),
    ("override_dirname: +engine.env.HF_TOKEN=hf_x,engine.flip_rate=0.01",
     f"override_dirname: +engine.env.HF_TOKEN={R},engine.flip_rate=0.01"),
    ("+arms.a.env.HF_TOKEN=choice(s1,s2)", f"+arms.a.env.HF_TOKEN={R}"),
    ("+engine.args=[--api-key,sk-abcdef]", f"+engine.args=[--api-key,{R}]"),
    ("['python', '-m', 'sglang.launch_server', '--api-key', 'sk-1']",
     f"['python', '-m', 'sglang.launch_server', '--api-key', '{R}']"),
    ('{"apiKey":"abc","max_tokens":512}', f'{{"apiKey":"{R}","max_tokens":512}}'),
    ("x-api-key: abc123", f"x-api-key: {R}"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI", f"AWS_SECRET_ACCESS_KEY={R}"),
    ("abh run: error: unrecognized arguments: --hf-token=sekrit2",
     f"abh run: error: unrecognized arguments: --hf-token={R}"),
    ("Either remove + prefix: 'arms.a.env.HF_TOKEN=sekrit8'", f"Either remove + prefix: 'arms.a.env.HF_TOKEN={R}'"),
    ("{'access_token': 'ya29.x', 'token_type': 'Bearer'}", f"{{'access_token': '{R}', 'token_type': 'Bearer'}}"),
    ("--token hf_abc --tp 8", f"--token {R} --tp 8"),
]
KEPT = [  # llama.cpp and SGLang logs, tokenizer configs, the harness's own options and prose
    "print_info: EOS token        = 2 '</s>'",
    "print_info: BOS token        = 1 '<s>'",
    "print_info: EOG token        = 2 '</s>'",
    "print_info: max token length = 48",
    "llama_model_loader: - kv  21:            tokenizer.ggml.eos_token_id u32              = 2",
    "llama_model_loader: - kv  24:               tokenizer.ggml.add_bos_token bool             = true",
    "slot update_slots: id  0 | task 0 | new prompt, n_ctx_slot = 4096, n_keep = 0, n_prompt_tokens = 102",
    "prompt eval time =      12.30 ms /   102 tokens (    0.12 ms per token,  8292.68 tokens per second)",
    "Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0",
    "Decode batch. #running-req: 1, #token: 38, token usage: 0.00, cuda graph: True, gen throughput (token/s): 12.34",
    "KV Cache is allocated. #tokens: 1048576, K size: 6.00 GB, V size: 6.00 GB",
    "max_total_num_tokens=1048576, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2048",
    '"num_key_value_heads": 8, "max_position_embeddings": 4096',
    '"bos_token": "<s>", "eos_token": "</s>", "pad_token": null',
    "--max-new-tokens 512 --tokenizer-path /m --skip-tokenizer-init",
    "task.max_new_tokens=512 stop_token_ids=[2, 32000] token_type_ids: [0, 0]",
    "scored 12 1-token answers; the 1-token rule: strict",
    "api_key=None, admin_api_key=None",
    "key: build",
    "a basic test: basic settings apply; the bearer of bad news",
    "monkey_patch: enabled, sort_key: name, cache_key: abc",
    "job0_+engine.env.HF_TOKEN=REDACTED,experiment.repeats=1",  # a sweep dir name, already redacted
]


@pytest.mark.parametrize(("text", "want"), HIDDEN)
def test_redact_text_hides_secret_values(text, want):
    assert redact_text(text) == want


@pytest.mark.parametrize("text", KEPT)
def test_redact_text_keeps_what_is_not_secret(text):
    assert redact_text(text) == text


def test_secret_names_by_word():
    secret = ["HF_TOKEN", "api_key", "--api-key", "OPENAI_API_KEY", "password", "secret_key", "apiKey", "HFToken",
              "hf_token2", "x-api-key", "access_token", "APIKEY", "api_keys", "token", "my_secret", "DB_PASSWD",
              "GOOGLE_APPLICATION_CREDENTIALS"]
    benign = ["tokenizer", "TOKENIZER_PATH", "max_new_tokens", "TOKENS", "token_ids", "stop_token_ids",
              "num_key_value_heads", "eos_token", "pad_token", "key", "keys", "sort_keys", "monkey", "token_type_ids"]
    assert [n for n in secret if not is_secret_name(n)] == []
    assert [n for n in benign if is_secret_name(n)] == []


def test_printed_yaml_lists_and_blocks_under_secret_names():
    text = ("engine:\n  args:\n  - --api-key\n  - sk-1\n  - --tp\n  - '8'\n  env:\n    HF_TOKEN: hf_abc\n"
            "    api_keys:\n    - k1\n    - k2\n    PRIVATE_KEY: |\n      -----BEGIN\n      xyz\n    OTHER: '1'\n"
            "  kind: sim\n")
    want = (f"engine:\n  args:\n  - --api-key\n  - {R}\n  - --tp\n  - '8'\n  env:\n    HF_TOKEN: {R}\n"
            f"    api_keys:\n    - {R}\n    - {R}\n    PRIVATE_KEY: {R}\n      {R}\n      {R}\n    OTHER: '1'\n"
            "  kind: sim\n")
    assert redact_text(text) == want


def test_secret_values_of_a_command_line_and_literal_redaction():
    argv = ["+arms.a.env.HF_TOKEN=[sekrit5", "--api-key", "sk-xyz", "+engine.args=[--api-key,sk-abc]",
            "+x.HF_TOKEN=choice(aaa1,bbb2)", "HF_TOKEN=s1,s2", "task.num_questions=300", "--tp", "8"]
    found = secret_values(argv)
    assert {"sekrit5", "sk-xyz", "sk-abc", "aaa1", "bbb2"} <= found
    assert not found & {"choice", "300", "8", "task.num_questions", "s1", "s2"}  # no function names, no 2-char parts
    r = Redactor(found)
    # Hydra's parse error repeats the value without its name
    assert r.line("no viable alternative at input '[sekrit5'") == f"no viable alternative at input '{R}'"
    assert r.line("sekrit55 and xsk-xyz stay") == "sekrit55 and xsk-xyz stay"  # whole values only


def test_redacting_writer_keeps_progress_live_and_lines_whole():
    target = io.StringIO()
    w = RedactingWriter(target, Redactor())
    w.write("\rgsm8k a r1:  10%|#         | 2/20")
    w.flush()  # tqdm flushes after each update: it shows at once
    assert target.getvalue() == "\rgsm8k a r1:  10%|#         | 2/20"
    w.write("\rgsm8k a r1: 100%|##########| 20/20\n")
    # a secret written in pieces, with no flush between (print() writes its arguments one by one)
    w.write("HF_TOKEN")
    w.write("=")
    assert "HF_TOKEN" not in target.getvalue()  # held until the line ends
    w.write("sekrit\n")
    assert target.getvalue().endswith(f"20/20\nHF_TOKEN={R}\n")
    assert w.isatty() is False and w.getvalue() == target.getvalue()  # the rest is the wrapped stream's


def test_redacted_stdio_swaps_and_restores_the_streams(capsys):
    before = sys.stdout, sys.stderr
    with redacted_stdio(["+arms.a.env.HF_TOKEN=sekrit123"]):
        assert isinstance(sys.stdout, RedactingWriter) and isinstance(sys.stderr, RedactingWriter)
        print("HF_TOKEN: sekrit123")
        print("error at input 'sekrit123'", file=sys.stderr, end="")  # a partial line, flushed at exit
    assert (sys.stdout, sys.stderr) == before
    out, err = capsys.readouterr()
    assert out == f"HF_TOKEN: {R}\n" and err == f"error at input '{R}'"


def test_multirun_yaml_keeps_no_sweep_value(tmp_path):
    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - +arms.a.env.HF_TOKEN=s1,s2\n    - +engine.args=[--api-key,sk-one]\n"
        "  job:\n    override_dirname: +arms.a.env.HF_TOKEN=s1,s2,task.num_questions=20\n"
        "arms:\n  a:\n    env:\n      HF_TOKEN: s1,s2\n")
    redact_multirun_yaml(tmp_path, argv=["-m", "+arms.a.env.HF_TOKEN=s1,s2", "+engine.args=[--api-key,sk-one]"])
    text = (tmp_path / "multirun.yaml").read_text()
    assert "s1" not in text and "s2" not in text and "sk-one" not in text
    assert f"override_dirname: +arms.a.env.HF_TOKEN={R},task.num_questions=20" in text


def _abh_run(args: list[str], cwd: Path, timeout: float = PATIENCE_S, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli.main", "run", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env={**os.environ, **env})


#: One `abh run` process each (~2.5 s): the default run keeps one of each kind (the config printed, argparse's
#: error, Hydra's override error); the other variants of a kind are slow.
SLOW = pytest.mark.slow


@pytest.mark.parametrize("args", [
    pytest.param(["--cfg", "job", "+arms.a.env.HF_TOKEN=sekrit123"], marks=SLOW),
    pytest.param(["--cfg", "job", "--resolve", "+arms.a.env.HF_TOKEN=sekrit123"], marks=SLOW),
    ["--cfg", "all", "+engine.env.HF_TOKEN=sekrit123", "+engine.args=[--api-key,sekrit123]"],
    pytest.param(["--help", "+arms.a.env.HF_TOKEN=sekrit123"], marks=SLOW),
    ["--hf-token=sekrit123"],  # argparse: unrecognized arguments
    ["+arms.a.env.HF_TOKEN=[sekrit123"],  # override grammar error
    pytest.param(["+arms.a.env.HF_TOKEN=sekrit123", "+arms.a.env.HF_TOKEN=sekrit123"], marks=SLOW),  # "Could not append"
    pytest.param(["arms.a.env.HF_TOKEN=sekrit123"], marks=SLOW),  # "To append to your config use +..."
])
def test_hydra_never_prints_a_secret(tmp_path, args):
    r = _abh_run(args, tmp_path)
    both = r.stdout + r.stderr
    assert "sekrit123" not in both
    if args[0] == "--help":  # abh run's own help echoes no override at all
        assert "usage: abh run" in r.stdout
    else:
        assert REDACTED in both  # the line was there, redacted (not merely absent)
    if args[0] == "--cfg":
        assert r.returncode == 0 and "max_new_tokens: 512" in r.stdout  # the rest of the config is intact
    else:
        assert r.returncode in (0, 2)


def test_a_traceback_through_hydra_full_error_is_redacted(tmp_path):
    r = _abh_run(["+arms.a.env.HF_TOKEN=sekrit123{"], tmp_path, HYDRA_FULL_ERROR="1")
    assert "Traceback" in r.stderr and "OverrideParseException" in r.stderr
    assert "sekrit123" not in r.stdout + r.stderr and REDACTED in r.stderr


@pytest.mark.slow  # the default run: test_run.py's sweep (a secret in no file or directory name) and
# test_multirun_yaml_keeps_no_sweep_value above
def test_sweep_keeps_no_secret_anywhere(tmp_path):
    r = _abh_run(["-m", "task.num_questions=20", "experiment.repeats=1", "experiment.aa_control=false",
                  "report=false", "progress=false", "+engine.env.HF_TOKEN=sekA1xx,sekB2yy"], tmp_path, timeout=PATIENCE_S)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "sekA1xx" not in r.stdout + r.stderr and "sekB2yy" not in r.stdout + r.stderr
    assert "inconclusive" in r.stdout or "improved" in r.stdout  # the sweep ran and printed its table
    sweep = tmp_path / "results" / "demo-sweep"
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert jobs == ["job0", "job1"]  # no override value in a directory name; the summary maps them
    rows = read_json(sweep / "sweep_summary.json")["comparisons"]
    assert all(f"+engine.env.HF_TOKEN={R}" in row["overrides"] for row in rows)
    for f in sweep.rglob("*"):
        assert "sek" not in f.name
        if f.is_file():
            text = f.read_text(errors="replace")
            assert "sekA1xx" not in text and "sekB2yy" not in text, f
    assert f"HF_TOKEN={R}" in (sweep / "multirun.yaml").read_text()
