"""Calibration of the paths a user takes, on a generator of our own (tests/helpers/paths_generator.py: log-odds
question difficulty, Student-t(3) launch shifts on every question, pass flips at temperature 0, a few errors),
through :func:`harness.analysis.comparison.compare_runs`: what ``abh compare`` and ``abh ab`` run on the stored
evals after reading them (``--check K`` writes K experiments to eval directories and runs ``abh compare`` itself
on them, asserting the same verdict and p).

Per row: the share of experiments whose verdict is improved/regressed under no effect (rejects), the share of
those ``--fail-on`` acts on (gated FPR: what a CI gate fails on falsely), the same had the user passed
``--assume-no-launch-shift`` (the FPR the user then owns), the share of verdicts that say
``[instances only]`` first, and the coverage of the verdict's interval of the configurations' true Δ under an
effect of +0.1 on the log-odds (about +1 pp); each with its 95 % Wilson interval.

    python benchmarks/calibrate_paths.py [--experiments 2000] [--question-level-experiments N] [--rows ab_aa_r1,...]
                                         [--jobs 2] [--check 3] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from helpers import paths_generator as G  # noqa: E402

from harness.analysis.comparison import NO_LAUNCH_SHIFT, compare_runs  # noqa: E402
from harness.analysis.gate import comparison_exit  # noqa: E402
from harness.report.headline import INSTANCES_ONLY, headline  # noqa: E402
from harness.results.schema import Comparison  # noqa: E402
from harness.stats import wilson_interval  # noqa: E402

EFFECT = 0.1  # log-odds: about +1 pp at 73 % accuracy
#: compute the question-level MDE in the table's comparisons (--check runs abh compare with it)
CHECK_MDE = False


@dataclass(frozen=True)
class UserPath:
    """One path: the servers it evaluates and how ``abh compare`` / ``abh ab`` are asked."""

    label: str
    servers: tuple[G.Server, ...]
    assume: bool = False
    from_passes: bool = False


def ab(repeats: int, aa: bool, *, assume: bool = False) -> UserPath:
    """``abh ab URL_A URL_B [--aa URL_A2] --repeats R``: one launch per URL, R interleaved passes on each."""
    servers = [G.Server("a", "http://a:1", repeats), G.Server("b", "http://b:2", repeats)]
    if aa:
        servers.append(G.Server("aa", "http://a2:3", repeats))
    label = (f"abh ab --aa, repeats {repeats} (1 launch A + 1 A2 + 1 B)" if aa else
             f"abh ab, repeats {repeats} (1 launch A + 1 B)" + (" --assume-no-launch-shift" if assume else ""))
    return UserPath(label, tuple(servers), assume=assume)


def no_ids(servers_per_arm: int, passes: int, *, from_passes: bool = False) -> UserPath:
    """``abh eval`` by hand (no launch id recorded, the URL is): ``servers_per_arm`` servers per arm (a fresh
    launch each, each its own URL), ``passes`` evals on each, then ``abh compare``."""
    servers = [G.Server(role, f"http://{role}{k}:{10 * k + j}", passes, records_launch=False)
               for j, role in enumerate(("a", "b")) for k in range(1, servers_per_arm + 1)]
    what = (f"{passes} passes on 1 server per arm" if servers_per_arm == 1 else
            f"{servers_per_arm} servers (launches) per arm, {passes} pass(es) each")
    return UserPath(f"no launch ids: {what}" + (", --launches-from-passes" if from_passes else ""), tuple(servers),
                 from_passes=from_passes)


PATHS: dict[str, UserPath] = {
    "ab_aa_r1": ab(1, True), "ab_aa_r3": ab(3, True), "ab_r1": ab(1, False), "ab_r3": ab(3, False),
    "noid_1x3": no_ids(1, 3), "noid_3x1": no_ids(3, 1), "noid_1x3_frompasses": no_ids(1, 3, from_passes=True),
}
SHIFTS = (("t3", 0.15), ("t3", 0.3))


@dataclass
class Counts:
    n: int = 0
    rejects: int = 0
    gated: int = 0
    gated_assumed: int = 0
    instances_only: int = 0
    covered: int = 0
    n_cover: int = 0

    def add(self, other: Counts) -> Counts:
        return Counts(*(getattr(self, f) + getattr(other, f) for f in self.__dataclass_fields__))


def verdict_of(path: UserPath, exp: G.Experiment, resamples: int = 20) -> Comparison:
    """The comparison ``abh compare`` makes of these evals (``resamples``: the diagnostics' bootstrap only)."""
    return compare_runs(exp.a, exp.b, exp.aa, n_resamples=resamples, assume_no_launch_shift=path.assume,
                        launches_from_passes=path.from_passes)


def gated_false(c: Comparison) -> bool:
    """A CI gate (``--fail-on any-difference``) fails on this verdict."""
    return comparison_exit(c, "any-difference") == 7


def run_block(args: tuple[str, str, float, int, int]) -> Counts:
    """``experiments`` experiments of one path and world, under no effect and under EFFECT (seeded)."""
    key, shift, sd, experiments, seed = args
    if not CHECK_MDE:
        # the question-level test's exact MDE enters only an inconclusive verdict's words (not its verdict,
        # p, interval or headline's first words) and makes each comparison ~8x slower: left out here
        import harness.stats.accuracy as acc
        acc.safe_mde_paired_exact = lambda *_a, **_k: None  # type: ignore[assignment]
    path, world = PATHS[key], G.World(shift=shift, shift_sd=sd)
    b, flips = world.questions(), world.flip_rates()
    truth = G.true_delta(world, EFFECT)
    rng = np.random.default_rng(seed)
    out = Counts()
    for _ in range(experiments):
        c = verdict_of(path, G.experiment(world, list(path.servers), 0.0, rng, b, flips))
        out.n += 1
        out.rejects += c.verdict in ("improved", "regressed")
        out.gated += gated_false(c)
        out.gated_assumed += gated_false(replace(c, assumptions=[NO_LAUNCH_SHIFT]))
        out.instances_only += headline(c).startswith(INSTANCES_ONLY)
        e = verdict_of(path, G.experiment(world, list(path.servers), EFFECT, rng, b, flips))
        out.n_cover += 1
        out.covered += e.delta_ci[0] <= truth <= e.delta_ci[1]
    return out


def rate(k: int, n: int) -> str:
    lo, hi = wilson_interval(k, n, 0.05)
    return f"{100 * k / n:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]"


#: the paths whose verdict is the question-level test (its exact MDE makes each comparison ~8x slower)
QUESTION_LEVEL = ("ab_r1", "ab_r3", "noid_1x3")


def table(keys: list[str], experiments: int, jobs: int, say: Callable[[str], None],
          question_level_experiments: int | None = None) -> str:
    lines = [f"| path | launch shift | experiments | rejects at Δ = 0 | FPR --fail-on acts on | ... with "
             f"--assume-no-launch-shift | verdicts [instances only] | coverage at +{EFFECT} log-odds |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    chunks = max(1, jobs * 2)
    for key in keys:
        for shift, sd in SHIFTS:
            t0 = time.monotonic()
            m = question_level_experiments if key in QUESTION_LEVEL and question_level_experiments else experiments
            sizes = [m // chunks + (i < m % chunks) for i in range(chunks)]
            work = [(key, shift, sd, k, 1000 * i + int(100 * sd) + 7) for i, k in enumerate(sizes) if k]
            if jobs > 1:
                with ProcessPoolExecutor(jobs) as pool:
                    parts = list(pool.map(run_block, work))
            else:
                parts = [run_block(w) for w in work]
            c = Counts()
            for p in parts:
                c = c.add(p)
            lines.append(f"| {PATHS[key].label} | {shift} sd {sd} | {c.n} | {rate(c.rejects, c.n)} | "
                         f"{rate(c.gated, c.n)} | {rate(c.gated_assumed, c.n)} | {rate(c.instances_only, c.n)} | "
                         f"{rate(c.covered, c.n_cover)} |")
            say(f"{lines[-1]}  ({time.monotonic() - t0:.0f} s)")
    return "\n".join(lines)


def check_against_cli(k: int, say: Callable[[str], None]) -> None:
    """``k`` experiments of each path written as eval directories and compared by ``abh compare`` itself: the
    same verdict and p as :func:`compare_runs` on the same data (so the table is the CLI's)."""
    from helpers.evals import make_eval

    from harness.cli.main import main
    from harness.results.fileio import read_json

    world = G.World(shift_sd=0.3)
    rng = np.random.default_rng(99)
    for key, path in PATHS.items():
        for j in range(k):
            exp = G.experiment(world, list(path.servers), 0.0, rng)
            want = verdict_of(path, exp)
            with tempfile.TemporaryDirectory() as tmp:
                argv = ["compare", "--out", f"{tmp}/cmp", "--resamples", "200"]
                for role, runs in (("a", exp.a), ("b", exp.b), ("aa", exp.aa)):
                    for i, r in enumerate(runs):
                        extra = {k: r.meta[k] for k in ("launch", "url") if k in r.meta}
                        correct = np.nan_to_num(r.scores, nan=0.0).astype(bool)
                        errors = tuple(int(q) for q in np.flatnonzero(np.isnan(r.scores)))
                        d = make_eval(Path(tmp) / f"{role}{i}", correct, errors=errors, sha=G.DATASET, **extra)
                        argv += [f"--{role}", str(d)]
                argv += ["--assume-no-launch-shift"] if path.assume else []
                argv += ["--launches-from-passes"] if path.from_passes else []
                code = main(argv)
                got = read_json(Path(tmp) / "cmp" / "comparison.json")
            assert got["verdict"] == want.verdict and abs((got["p"] or 0) - (want.p or 0)) < 1e-12, (key, j)
            assert code == comparison_exit(want), (key, j, code)
        say(f"checked against abh compare: {key} x {k}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiments", type=int, default=2000)
    ap.add_argument("--question-level-experiments", type=int, default=None, metavar="N",
                    help=f"experiments per row of the question-level paths ({', '.join(QUESTION_LEVEL)}; default: "
                         "--experiments)")
    ap.add_argument("--rows", default=",".join(PATHS), help=f"comma-separated of: {', '.join(PATHS)}")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--check", type=int, default=0, metavar="K",
                    help="first run abh compare on K experiments of each path and check it gives the same verdict")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if a.check:
        check_against_cli(a.check, say)
    text = table([k for k in a.rows.split(",") if k], a.experiments, a.jobs, say, a.question_level_experiments)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
