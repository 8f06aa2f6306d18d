"""Benchmark: the divergence object from three scoring passes of 1319 questions x ~200 tokens x top-20.

Writes three synthetic passes (A's reference pass, B, A') with harness.results.token_store (Parquet), then computes the
divergence side by side, each variant in a fresh subprocess so its peak RSS is its own:

- ``baseline``: the interpreter with pyarrow and harness.analysis.divergence imported, nothing computed (imports are
  outside every variant's wall time);
- ``columnar``: :func:`harness.analysis.divergence.compute_divergence` (numpy columns, chunked; the test at 9,999
  sign flips and the BCa interval included);
- ``naive``: the same numbers from per-token Python objects: ``to_pylist()`` rows, a ``{id: logprob}`` dict per
  token, KL in a Python loop, then the same test on the per-question means.

Prints wall and CPU time (CPU time is what to compare on a busy machine), peak RSS (``VmHWM``) and the KLDs each variant found (they must agree).

    python benchmarks/bench_divergence.py [--questions 1319] [--tokens 200] [--k 20] [--skip-naive]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


# ------------------------------------------------------------------------------------------ data
def synth(out: Path, questions: int, tokens: int, k: int, seed: int = 0) -> dict[str, float]:
    """Three passes over shared candidates: each pass perturbs k + 4 candidate logits (+ a tail) and reports
    its own top-k, so B's list can hold ids outside A's. Returns write times and file sizes."""
    from scipy.special import log_softmax

    from harness.results.token_store import ScoresWriter

    rng = np.random.default_rng(seed)
    lens = np.clip(rng.normal(tokens, tokens / 4, questions).astype(int), 10, 4 * tokens)
    n = int(lens.sum())
    c = k + 4
    start, stride = rng.integers(0, 32768, n), 2 * rng.integers(1, 4000, n) + 1
    cand = ((start[:, None] + np.arange(c)[None, :] * stride[:, None]) % 32768).astype(np.int32)
    z = rng.normal(0, 1.5, (n, c + 1))
    z[:, 0] += rng.uniform(2, 9, n)          # the greedy token (the reference token)
    z[:, -1] = rng.uniform(-2, 2, n)         # the rest of the vocabulary, lumped
    build = rng.standard_normal((n, c + 1))
    offsets = np.concatenate([[0], np.cumsum(lens)])
    stats: dict[str, float] = {"tokens": n}
    for name, shift, noise in (("a", 0.0, 0.02), ("b", 0.15, 0.02), ("aa", 0.0, 0.02)):
        lp = log_softmax(z + shift * build + noise * rng.standard_normal(z.shape), axis=1)[:, :c]
        order = np.argsort(-lp, axis=1)[:, :k]
        ids = np.take_along_axis(cand, order, axis=1)
        lps = np.take_along_axis(lp, order, axis=1)
        t0 = time.perf_counter()
        with ScoresWriter(out / name, top_k=k, meta={"engine": "synthetic"}) as w:
            for i in rng.permutation(questions):          # answers arrive out of order
                r = slice(offsets[i], offsets[i + 1])
                w.add(int(i), cand[r, 0], lp[r, 0], ids[r], lps[r])
        stats[f"write_s_{name}"] = time.perf_counter() - t0
        stats[f"mib_{name}"] = (out / name / "scores.parquet").stat().st_size / 2**20
    return stats


# ------------------------------------------------------------------------------------------ variants
def run_columnar(root: Path) -> dict[str, float]:
    from harness.analysis.divergence import compute_divergence

    d = compute_divergence(root / "a", root / "b", root / "aa", n_resamples=9_999, seed=0)
    return {"kld_mean": d["kld_mean"], "kld_mean_aa": d["kld_mean_aa"], "p": d["p"], "tokens": d["tokens"]}


def run_naive(root: Path) -> dict[str, float]:
    """Per-token Python objects: every row a dict, every top-k a dict."""
    import pyarrow.parquet as pq

    from harness.stats import kld as dv
    def rows(name: str) -> dict[tuple[int, int], dict]:
        out = {}
        for r in pq.read_table(root / name / "scores.parquet").to_pylist():
            r["top"] = dict(zip(r["top_ids"], r["top_logprobs"], strict=True))
            out[(r["question"], r["position"])] = r
        return out

    ref, ab, aa = rows("a"), rows("b"), rows("aa")

    def kl(p: dict[int, float], q: dict[int, float]) -> float:
        shared = [i for i in p if i in q]
        head = sum(math.exp(p[i]) * (p[i] - max(q[i], dv.MIN_LOGPROB)) for i in shared)
        pt = max(1 - sum(math.exp(p[i]) for i in shared), dv.TAIL_FLOOR)
        qt = max(1 - sum(math.exp(q[i]) for i in shared), dv.TAIL_FLOOR)
        tail = 0.0 if pt <= dv.TAIL_FLOOR and qt <= dv.TAIL_FLOOR else pt * (math.log(pt) - math.log(qt))
        return max(head + tail, 0.0)

    per_q: dict[int, list[list[float]]] = {}
    all_ab, all_aa = [], []
    for key in sorted(ref):
        a = ref[key]["top"]
        x, y = kl(a, ab[key]["top"]), kl(a, aa[key]["top"])
        all_ab.append(x)
        all_aa.append(y)
        per_q.setdefault(key[0], []).append([x, y])
    qs = sorted(per_q)
    kq_ab = np.array([np.mean([v[0] for v in per_q[q]]) for q in qs])
    kq_aa = np.array([np.mean([v[1] for v in per_q[q]]) for q in qs])
    t = dv.divergence_test(kq_ab, kq_aa, np.array([len(per_q[q]) for q in qs]), n_resamples=9_999, seed=0)
    return {"kld_mean": float(np.mean(all_ab)), "kld_mean_aa": float(np.mean(all_aa)), "p": t.p,
            "tokens": len(all_ab)}


def child(variant: str, root: Path) -> None:
    import pyarrow.parquet  # noqa: F401  (baseline: the modules every variant imports, outside the timing)

    import harness.analysis.divergence  # noqa: F401

    t0 = time.perf_counter()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    res: dict[str, float] = {}
    if variant == "columnar":
        res = run_columnar(root)
    elif variant == "naive":
        res = run_naive(root)
    wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu = ru.ru_utime - ru0.ru_utime + ru.ru_stime - ru0.ru_stime
    print(json.dumps({"variant": variant, "wall_s": wall, "cpu_s": cpu, "peak_rss_mib": peak_rss_mib(), **res}))


def peak_rss_mib() -> float:
    """This process's peak RSS: VmHWM (reset by exec, unlike ru_maxrss, which keeps the forking parent's)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=1319)
    ap.add_argument("--tokens", type=int, default=200, help="mean tokens per reference completion")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--root", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.root)
        return
    with tempfile.TemporaryDirectory(prefix="abh-bench-div-") as tmp:
        root = Path(tmp)
        s = synth(root, args.questions, args.tokens, args.k)
        print(f"{args.questions} questions, {s['tokens']:.0f} tokens, top-{args.k}, three passes; Parquet "
              f"(zstd) {s['mib_a']:.1f} / {s['mib_b']:.1f} / {s['mib_aa']:.1f} MiB, written in "
              f"{s['write_s_a']:.2f} / {s['write_s_b']:.2f} / {s['write_s_aa']:.2f} s (ScoresWriter, streamed)")
        variants = ["baseline", "columnar"] + ([] if args.skip_naive else ["naive"])
        results = []
        for v in variants:
            out = subprocess.run([sys.executable, __file__, "--child", v, "--root", str(root)],
                                 capture_output=True, text=True, check=True)
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"{'variant':10s} {'wall s':>8s} {'CPU s':>8s} {'peak RSS MiB':>13s} {'KLD A||B':>11s} "
              f"{'KLD A||A':>11s} {'p':>8s}")
        for r in results:
            kl = f"{r['kld_mean']:.6g}" if "kld_mean" in r else "-"
            kla = f"{r['kld_mean_aa']:.6g}" if "kld_mean_aa" in r else "-"
            p = f"{r['p']:.3g}" if "p" in r else "-"
            print(f"{r['variant']:10s} {r['wall_s']:8.2f} {r['cpu_s']:8.2f} {r['peak_rss_mib']:13.0f} {kl:>11s} "
                  f"{kla:>11s} {p:>8s}")
        by = {r["variant"]: r for r in results}
        if "naive" in by:
            agree = math.isclose(by["naive"]["kld_mean"], by["columnar"]["kld_mean"], rel_tol=1e-9)
            print(f"naive / columnar: {by['naive']['wall_s'] / by['columnar']['wall_s']:.1f}x the time, "
                  f"{(by['naive']['peak_rss_mib'] - by['baseline']['peak_rss_mib']) / max(1.0, by['columnar']['peak_rss_mib'] - by['baseline']['peak_rss_mib']):.1f}x "
                  f"the memory above baseline; KLDs agree: {agree}")


if __name__ == "__main__":
    main()
