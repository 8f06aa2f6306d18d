"""One eval: a task's questions sent to one running server, every answer stored as it arrives.

This is the unit the orchestration repeats per (arm, repeat); ``abh eval`` runs it against a server
that is already up. It imports no plotting or table libraries: the eval path stays light.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.client import Client, ClientConfig, Reply
from harness.store import EvalStore, SampleRecord, load_samples, summarize
from harness.tasks.gsm8k import GSM8K, Dataset, RecipeConfig

#: Requests in a row refused after all their retries before an eval decides the server is gone.
REFUSED_STREAK = 10


class ServerGone(RuntimeError):
    """The server stopped serving mid-eval (its process died); answers so far are on disk."""


class EvalInterrupted(BaseException):
    """SIGINT or SIGTERM arrived mid-eval; answers so far are on disk and the eval is resumable."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class EvalOptions:
    progress: bool = True
    #: Called about once a second during the eval; a non-None return is the reason to abort
    #: (e.g. "server process exited with code -9"). Unsent and in-flight questions stay missing, so a
    #: rerun sends them.
    abort_check: Callable[[], str | None] | None = None
    extra_meta: dict[str, Any] = field(default_factory=dict)
    warmup: bool = True


async def _server_facts(client: Client) -> dict[str, Any]:
    """Best-effort ``/get_model_info`` and ``/get_server_info`` (SGLang names, then the newer ones)."""
    facts: dict[str, Any] = {}
    for key, paths in (("model_info", ("/get_model_info", "/model_info")),
                       ("server_info", ("/get_server_info", "/server_info"))):
        for p in paths:
            try:
                facts[key] = await client.get_json(p)
                break
            except Exception:  # noqa: BLE001 - optional endpoints; absence is fine
                continue
    return facts


def _record(q_index: int, sha: str, label: int, reply: Reply) -> SampleRecord:
    if reply.error is not None or reply.text is None:
        return SampleRecord(index=q_index, prompt_sha256=sha, output=None, pred=None, label=label,
                            correct=None, invalid=None, finish_reason=None, prompt_tokens=None,
                            completion_tokens=None, latency_s=reply.latency_s, attempts=reply.attempts,
                            error=reply.error or "empty reply")
    pred, correct, invalid = GSM8K.score(reply.text, label)
    return SampleRecord(index=q_index, prompt_sha256=sha, output=reply.text, pred=pred, label=label,
                        correct=correct, invalid=invalid, finish_reason=reply.finish_reason,
                        prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
                        latency_s=reply.latency_s, attempts=reply.attempts, error=None)


class _Progress:
    def __init__(self, total: int, initial: int, correct: int, enabled: bool, label: str):
        self.correct, self.answered, self.errors = correct, initial, 0
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=label, unit="q", file=sys.stderr,
                            mininterval=0.5 if sys.stderr.isatty() else 5.0, dynamic_ncols=True)

    def update(self, rec: SampleRecord) -> None:
        if rec.error is not None:
            self.errors += 1
        else:
            self.answered += 1
            self.correct += bool(rec.correct)
        if self.bar is not None:
            acc = self.correct / self.answered if self.answered else 0.0
            self.bar.set_postfix(acc=f"{acc:.3f}", err=self.errors, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


async def run_eval_async(test: Dataset, recipe: RecipeConfig, client_cfg: ClientConfig, out_dir: str | Path,
                         train: Dataset | None = None, opts: EvalOptions | None = None) -> dict[str, Any]:
    """Run (or resume) one eval into ``out_dir``; return its summary (also written to summary.json)."""
    opts = opts or EvalOptions()
    out = Path(out_dir)
    async with Client(client_cfg) as client:
        facts = await _server_facts(client)
        if client_cfg.api == "openai":
            try:
                await client.resolve_model()
            except Exception as e:  # noqa: BLE001
                raise ServerGone(f"cannot list models at {client_cfg.url}/v1/models: {e}") from e
        if recipe.model_path is None:
            recipe.model_path = (facts.get("model_info") or {}).get("model_path") or client_cfg.model or None
        task = GSM8K(test, recipe, train)
        server_info = facts.get("server_info") or {}
        simulated = bool(server_info.get("simulated")) or bool(opts.extra_meta.get("simulated"))
        meta = {**task.describe(), "indices": [q.index for q in task.questions], "api": client_cfg.api,
                "url": client_cfg.url, "parallel": client_cfg.parallel, "simulated": simulated,
                "server": {k: server_info.get(k) for k in ("version", "build", "model_path", "engine")
                           if server_info.get(k) is not None},
                **{k: v for k, v in opts.extra_meta.items() if k != "simulated"}}
        store = EvalStore(out)
        done = store.open(meta)
        pending = [q for q in task.questions if q.index not in done]
        progress = _Progress(len(task.questions), len(done), sum(1 for r in done.values() if r.correct),
                             opts.progress, label=f"{out.parent.name}/{out.name}")
        t0 = time.perf_counter()
        abort_reason: str | None = None
        interrupted: list[int] = []
        handled: list[tuple[int, Any]] = []
        try:
            if pending and opts.warmup:
                if client_cfg.api == "sglang":
                    warm = await client.generate(task.warmup_body())
                else:
                    body = task.completions_body(task.questions[0], client_cfg.model)
                    warm = await client.generate({**body, "prompt": task.few_shot or body["prompt"],
                                                  "max_tokens": 1})
                if warm.error is not None:
                    print(f"warning: warm-up request failed: {warm.error}", file=sys.stderr)

            abort: list[str] = []
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()

            def on_signal(signum: int) -> None:
                # Ctrl-C / SIGTERM mid-eval: stop sending, keep every answer already on disk.
                interrupted.append(signum)
                abort.append(f"interrupted by {signal.Signals(signum).name}")
                stop.set()

            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    previous = signal.getsignal(sig)
                    loop.add_signal_handler(sig, on_signal, sig)
                    handled.append((sig, previous))
                except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
                    pass

            held: list[tuple[Any, Reply]] = []  # refused replies: errors if the server lives, else missing

            def write(q, reply: Reply) -> None:  # type: ignore[no-untyped-def]
                rec = _record(q.index, q.prompt_sha256, q.label, reply)
                store.append(rec, q.prompt)
                progress.update(rec)

            async def one(q):  # type: ignore[no-untyped-def]
                body = (task.generate_body(q) if client_cfg.api == "sglang"
                        else task.completions_body(q, client_cfg.model))
                reply = await client.generate(body)
                if reply.error is not None and opts.abort_check is not None and not abort:
                    reason = opts.abort_check()
                    if reason is not None:
                        abort.append(reason)
                        stop.set()
                if abort and reply.error is not None:
                    return  # failed because the server died: "missing" (sent again on resume), not an error
                if reply.refused:
                    # Hold it: a run of refused connections after retries means the server is gone (abh eval
                    # has no process to watch); then these questions stay missing rather than errors.
                    held.append((q, reply))
                    if len(held) >= REFUSED_STREAK:
                        abort.append(f"{client_cfg.url} refuses connections ({len(held)} requests in a row "
                                     "after retries): the server is gone")
                        stop.set()
                    return
                while held:  # the server answers again: the refusals were real request errors
                    write(*held.pop(0))
                write(q, reply)

            tasks = [asyncio.ensure_future(one(q)) for q in pending]
            everything = asyncio.gather(*tasks)
            stopper = asyncio.ensure_future(stop.wait())
            watcher = asyncio.ensure_future(_watch(opts.abort_check, abort, stop)) if opts.abort_check else None
            try:
                await asyncio.wait({everything, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if abort:
                    abort_reason = abort[0]
                else:
                    await everything
                    while held:
                        write(*held.pop(0))
            finally:
                for sig, previous in handled:
                    loop.remove_signal_handler(sig)
                    signal.signal(sig, previous)  # give the caller's handler back
                for t in (watcher, stopper):
                    if t is not None:
                        t.cancel()
                for t in tasks:
                    if not t.done():
                        t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                if not everything.done():
                    everything.cancel()
                await asyncio.gather(everything, return_exceptions=True)  # retrieve, so nothing is logged
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            progress.close()
            wall = time.perf_counter() - t0
            store.close()
            samples = load_samples(out)
            prev_wall = float(store.meta.get("wall_s_total", 0.0))
            summary = {**summarize(samples, len(task.questions), wall),
                       "wall_s_this_session": wall, "resumed": bool(store.meta.get("resumes")),
                       "recipe": task.recipe.to_dict(), "dataset_sha256": test.sha256,
                       "dataset_canonical": test.canonical, "api": client_cfg.api, "simulated": simulated,
                       "complete": len(samples) == len(task.questions) and abort_reason is None,
                       "aborted": abort_reason}
            if summary["resumed"]:
                summary["latency_s"] = prev_wall + wall
                total = summary["latency_s"]
                summary["output_throughput"] = summary["output_tokens"] / total if total > 0 else None
            store.meta["wall_s_total"] = prev_wall + wall
            store.save_meta()
            store.write_summary(summary)
    if interrupted:
        raise EvalInterrupted(interrupted[0])
    if abort_reason is not None:
        raise ServerGone(abort_reason)
    return summary


async def _watch(check: Callable[[], str | None], abort: list[str], stop: asyncio.Event) -> None:
    """Poll ``check`` (is the server process alive?) and trip ``stop`` when it gives a reason."""
    while not abort:
        reason = check()
        if reason is not None:
            abort.append(reason)
            stop.set()
            return
        await asyncio.sleep(0.5)


def run_eval(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Synchronous wrapper of :func:`run_eval_async`."""
    try:  # uvloop (Linux/macOS) roughly halves the client's per-request overhead at parallel 1319
        import uvloop
    except ImportError:
        return asyncio.run(run_eval_async(*args, **kwargs))
    return uvloop.run(run_eval_async(*args, **kwargs))


def format_summary(s: dict[str, Any]) -> str:
    acc = "n/a" if s.get("accuracy") is None else f"{s['accuracy']:.3f}"
    inv = "n/a" if s.get("invalid_rate") is None else f"{s['invalid_rate']:.3f}"
    thr = "n/a" if s.get("output_throughput") is None else f"{s['output_throughput']:.1f} tok/s"
    sim = "  [SIMULATED]" if s.get("simulated") else ""
    return (f"Accuracy: {acc}  Invalid: {inv}  Errors: {s['errors']}/{s['n']}  Missing: {s.get('missing', 0)}  "
            f"Latency: {s['latency_s']:.3f} s  Output throughput: {thr}{sim}")
