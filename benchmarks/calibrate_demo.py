"""How often the demo's design finds its own true effect when every launch draws a random seed: the simulator's
outcome model (:mod:`abh_simulator.model`, the demo's arms and noise) through the verdict's test
(:func:`harness.stats.launchvar.launch_aware_test`). Why the demo seeds its launches from their ids
(``engine.seed_by_launch``): a random draw of its design is INCONCLUSIVE about one run in six.

    python benchmarks/calibrate_demo.py [--draws 400] [--a 0.930] [--b 0.945] [--repeats 2] [--restart]

Prints the share of draws found IMPROVED and the 95 % interval's width (median, 90th percentile).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from abh_simulator import model  # noqa: E402
from harness.stats.launches import ArmRuns  # noqa: E402
from harness.stats.launchvar import launch_aware_test  # noqa: E402


def runs(base: list[bool], tag: str, launches: int, passes: int, flip_rate: float, noise: str,
         rng: random.Random) -> ArmRuns:
    """``launches`` launches of an arm, ``passes`` evals on each, every launch on its own random seed."""
    rows, ids = [], []
    for k in range(launches):
        seed = rng.getrandbits(31)
        launch = model.launch_outcomes(base, flip_rate, noise, seed)
        for p in range(passes):
            rows.append(model.pass_outcomes(launch, flip_rate, noise, seed, p))
            ids.append(f"{tag}-{k + 1}")
    return ArmRuns(np.array(rows, dtype=float), tuple(ids))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument("--a", type=float, default=0.930, help="arm A's accuracy (the demo's baseline)")
    ap.add_argument("--b", type=float, default=0.945, help="arm B's accuracy (the demo's fix)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--restart", action="store_true", help="each repeat on a fresh launch (restart_per_repeat)")
    ap.add_argument("--flip-rate", type=float, default=0.02)
    ap.add_argument("--noise", default="pass")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    base_a = model.base_outcomes(model.ability_for_accuracy(a.a))
    base_b = model.base_outcomes(model.ability_for_accuracy(a.b))
    rng = random.Random(a.seed)
    launches, passes = (a.repeats, 1) if a.restart else (1, a.repeats)
    found, widths = 0, []
    for _ in range(a.draws):
        arm_a = runs(base_a, "a", launches, passes, a.flip_rate, a.noise, rng)
        arm_b = runs(base_b, "b", launches, passes, a.flip_rate, a.noise, rng)
        aa = runs(base_a, "aa", 2, 1, a.flip_rate, a.noise, rng)  # the A/A control: two fresh launches of A
        r = launch_aware_test(arm_a, arm_b, aa)
        found += bool(r.significant and r.ci[0] > 0)
        widths.append(100 * (r.ci[1] - r.ci[0]))
    effect = 100 * (sum(base_b) - sum(base_a)) / len(base_a)
    print(f"true effect on the simulator's questions {effect:+.2f} pp; {a.repeats} repeat(s) "
          f"{'each on a fresh launch' if a.restart else 'on one launch per arm'}, A/A on 2 fresh launches")
    print(f"IMPROVED {found}/{a.draws} = {found / a.draws:.3f}; interval width median {np.median(widths):.2f} pp, "
          f"90th percentile {np.percentile(widths, 90):.2f} pp")


if __name__ == "__main__":
    main()
