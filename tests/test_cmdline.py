"""How commands are shown: one owner for the dry run, the launch description and the report."""

from __future__ import annotations

from harness.arms.arm import ResolvedArm
from harness.config import SGLangEngineConfig
from harness.engines import create_engine
from harness.util.cmdline import command_line, is_flag, redact_command, shell_command
from harness.util.redact import REDACTED


def test_shell_command_one_flag_per_line_secrets_redacted():
    argv = ["/env/bin/python", "-m", "sglang.launch_server", "--model-path", "/m odel", "--tp", "8",
            "--enable-dp-attention", "--api-key", "sk-1", "--lr", "-1e-3", "--x=1", "pos"]
    text = shell_command(argv, {"HF_TOKEN": "hf_1", "A": "x y"})
    assert text.split(" \\\n") == [
        f"HF_TOKEN='{REDACTED}'", "A='x y'", "/env/bin/python -m sglang.launch_server", "  --model-path '/m odel'",
        "  --tp 8", "  --enable-dp-attention", f"  --api-key '{REDACTED}'", "  --lr -1e-3", "  --x=1", "  pos"]
    # positionals right after the program stay with it; a ready-made command line is shown as it is
    assert shell_command(["llama-server", "serve", "--port", "8"]) == "llama-server serve \\\n  --port 8"
    assert shell_command("python -m x --y 1") == "python -m x --y 1"
    assert shell_command(None) == shell_command([]) == ""
    # env given as ready-made lines (an older manifest) is redacted too
    assert shell_command(["p"], ["HF_TOKEN=abc", "A=1"]) == f"HF_TOKEN={REDACTED} \\\nA=1 \\\np"


def test_one_line_and_redaction_of_assignments():
    assert command_line(["python", "-m", "m", "--a", "b c"], {"X": "1"}) == "X=1 python -m m --a 'b c'"
    assert redact_command(["abh run", "engine.env.HF_TOKEN=hf_x", "+arms.a.env.MY_SECRET=s", "x.max_tokens=5",
                           "--api-key=k"]) == [
        "abh run", f"engine.env.HF_TOKEN={REDACTED}", f"+arms.a.env.MY_SECRET={REDACTED}", "x.max_tokens=5",
        f"--api-key={REDACTED}"]
    assert is_flag("--tp") and is_flag("-m") and not is_flag("-5") and not is_flag("-1e-3") and not is_flag("-")


def test_launch_spec_and_report_show_the_same_command(tmp_path):
    from harness.report.data import arm_views

    cfg = SGLangEngineConfig(model_path="m", port=30123, args=["--api-key", "sk-live"], env={"HF_TOKEN": "t"})
    spec = create_engine(cfg, ResolvedArm(key="a", name="a"), tmp_path, "a").launch_spec()
    shown = spec.pretty()
    assert shown == shell_command(spec.server_argv, spec.env_delta)
    assert "sk-live" not in shown and f"HF_TOKEN='{REDACTED}'" in shown and "  --port 30123 \\" in shown
    manifest = {"arms": {"a": {"name": "a", "launch": {"argv": spec.server_argv, "env": spec.env_delta}}}}
    assert arm_views(manifest, {"a": "a"})[0]["command"] == shown
