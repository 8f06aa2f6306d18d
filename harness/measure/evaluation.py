"""One eval: a task's questions sent to one running server, every answer stored as it arrives (the unit the
orchestration repeats per arm and repeat). It imports no plotting or table libraries: the eval path stays light."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.measure.prompt_tokens import PromptTokens
from harness.measure.runner import Interrupted, Progress, Refusals, Stop, in_turn, run, signals_to, watchdogs
from harness.results.eval_schema import SampleRecord
from harness.results.eval_store import META, EvalStore, load_samples, summarize
from harness.results.fileio import OutputError, StoreError
from harness.results.integrity import Scorer
from harness.serving.client import Client, ClientConfig, Reply, ServerGone, ServerStalled, WrongServer
from harness.serving.wire import NOT_THIS_REQUEST
from harness.tasks.gsm8k import Dataset, RecipeConfig
from harness.tasks.interface import Item, Task

__all__ = ["EvalOptions", "Interrupted", "ServerGone", "ServerStalled", "TaskBuilder", "WrongServer",
           "format_summary", "run_eval", "run_eval_async", "run_task_eval_async"]

#: Builds the eval's task once the server has said which model it serves (its ``model_path``, or None).
TaskBuilder = Callable[[str | None], Task]

@dataclass
class EvalOptions:
    progress: bool = True
    #: Polled during the eval; a reason aborts it (unsent and in-flight questions stay missing: a rerun sends them)
    abort_check: Callable[[], str | None] | None = None
    extra_meta: dict[str, Any] = field(default_factory=dict)
    warmup: bool = True
    #: Wait up to this long for the server's health endpoint before the first request (0: do not wait).
    wait_ready_s: float = 0.0
    #: Gets one-line status messages (e.g. "waiting for the server to load (10/600 s)").
    on_status: Callable[[str], None] | None = None
    #: The prompts' token counts on this server, shared by every pass on one launch (None: this eval's own):
    #: each answer's ``prompt_tokens`` is checked against its prompt's
    prompt_tokens: PromptTokens | None = None
    #: The text store the prompts go to, shared by a run's evals (None: one in the eval's own directory)
    prompt_texts: Path | None = None


async def _server_facts(client: Client) -> dict[str, Any]:
    """Best-effort ``/get_model_info`` and ``/get_server_info`` (SGLang names, then the newer ones), both asked at
    once."""
    facts: dict[str, Any] = {}

    async def ask(key: str, paths: tuple[str, ...]) -> None:
        for p in paths:
            try:
                facts[key] = await client.get_json(p)
                return
            except Exception:  # noqa: BLE001 - optional endpoints; absence is fine
                continue

    await asyncio.gather(ask("model_info", ("/get_model_info", "/model_info")),
                         ask("server_info", ("/get_server_info", "/server_info")))
    return {k: facts[k] for k in ("model_info", "server_info") if k in facts}


def scorer(task: Task) -> Scorer:
    """``task``'s grader as the rows' check takes it: (output, label) -> (pred, correct, invalid)."""
    def score(output: str, label: Any) -> tuple[Any, bool, bool]:
        graded = task.grade(output, Item(index=-1, prompt="", label=label, row=-1))
        return graded.pred, graded.score >= 1.0, graded.invalid
    return score


def _record(task: Task, item: Item, reply: Reply) -> SampleRecord:
    if reply.error is not None or reply.text is None:
        return SampleRecord(index=item.index, prompt_sha256=item.prompt_sha256, output=None, pred=None,
                            label=item.label, correct=None, invalid=None, finish_reason=None, prompt_tokens=None,
                            completion_tokens=None, latency_s=reply.latency_s, attempts=reply.attempts,
                            error=reply.error or "empty reply")
    graded = task.grade(reply.text, item)
    return SampleRecord(index=item.index, prompt_sha256=item.prompt_sha256, output=reply.text, pred=graded.pred,
                        label=item.label, correct=graded.score >= 1.0, invalid=graded.invalid,
                        finish_reason=reply.finish_reason, prompt_tokens=reply.prompt_tokens,
                        completion_tokens=reply.completion_tokens, latency_s=reply.latency_s,
                        attempts=reply.attempts, error=None,
                        score=None if graded.score in (0.0, 1.0) else graded.score, reasoning=reply.reasoning)


async def run_eval_async(test: Dataset, recipe: RecipeConfig, client_cfg: ClientConfig, out_dir: str | Path,
                         train: Dataset | None = None, opts: EvalOptions | None = None) -> dict[str, Any]:
    """Run (or resume) one GSM8K eval into ``out_dir``; return its summary (also written to summary.json).

    Raises :class:`~harness.measure.runner.Interrupted` (SIGINT/SIGTERM), :class:`ServerStalled` (hung server),
    :class:`WrongServer` (the URL serves another API) or :class:`ServerGone` (the server died); answers
    already received are on disk in every case, and a rerun sends only the missing questions.
    """
    from harness.tasks.registry import TaskData, kind

    def gsm8k_task(model_path: str | None) -> Task:
        if recipe.model_path is None:
            recipe.model_path = model_path
        return kind("gsm8k").build(TaskData(test, train), recipe)

    return await run_task_eval_async(gsm8k_task, client_cfg, out_dir, opts)


async def run_task_eval_async(build_task: TaskBuilder, client_cfg: ClientConfig, out_dir: str | Path,
                              opts: EvalOptions | None = None) -> dict[str, Any]:
    """Run (or resume) one eval of the task ``build_task`` makes into ``out_dir`` (see :func:`run_eval_async`)."""
    opts = opts or EvalOptions()
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise StoreError(f"{out} exists and is not a directory")
    stop = Stop()
    tell = opts.on_status or (lambda s: print(f"abh: {s}", file=sys.stderr))
    store = EvalStore(out, opts.prompt_texts)
    if out.is_dir():
        store.lock()  # a second process into this directory stops here, before it asks anything
    try:
        with signals_to(stop):
            async with Client(client_cfg) as client:
                for notice in client.notices:  # the parallelism fitted to the open-file limit
                    tell(f"warning: {notice}")
                client.on_notice = lambda s: tell(f"note: {s}")
                try:
                    return await _run(build_task, client, store, opts, stop)
                finally:
                    stop.raise_for_reason()
    finally:
        store.close()


async def _run(build_task: TaskBuilder, client: Client, store: EvalStore, opts: EvalOptions,
               stop: Stop) -> dict[str, Any]:
    cfg, out = client.cfg, store.root
    if opts.wait_ready_s > 0:
        await stop.race(client.wait_ready(opts.wait_ready_s, opts.on_status))
    facts = await stop.race(_server_facts(client)) or {}
    await stop.race(client.prepare())  # the OpenAI model name
    if stop.event.is_set():
        return {}  # interrupted before anything was written; the caller raises
    api = client.api
    task = build_task((facts.get("model_info") or {}).get("model_path") or api.model or None)
    sampling = task.sampling_params(chat=api.chat)
    server_info = facts.get("server_info") or {}
    simulated = bool(server_info.get("simulated")) or bool(opts.extra_meta.get("simulated"))
    meta = {**task.describe(), "indices": [q.index for q in task.items], "api": api.name,
            "url": cfg.url, "parallel": cfg.parallel, "parallel_used": client.parallel, "simulated": simulated,
            "server": {k: server_info.get(k) for k in ("version", "build", "model_path", "engine")
                       if server_info.get(k) is not None},
            **{k: v for k, v in opts.extra_meta.items() if k != "simulated"}}

    async def warm_up() -> float:
        """SGLang's frontend warm-up (inside its timed batch, so its time counts in the latency); a URL that
        does not serve the API is refused here, once. Returns its duration."""
        t = time.perf_counter()
        body = api.warmup_body(task.few_shot, task.items[0].prompt, sampling)
        warm = await stop.race(client.generate(body))
        if warm is None or warm.error is None:
            return time.perf_counter() - t
        if warm.status is not None and 300 <= warm.status < 400:  # never followed: the URL is not the server's
            raise WrongServer(f"{cfg.url}: {warm.error}")
        if warm.not_served:
            found = f" (Server: {warm.server})" if warm.server else ""
            raise WrongServer(f"{cfg.url} does not serve the {api.name} API: POST {api.generate_path} answered "
                              f"{warm.error[:160]}{found}; check the URL and the API")
        if warm.refused:
            raise ServerGone(f"nothing listens at {cfg.url} ({warm.error})")
        (opts.on_status or (lambda s: print(s, file=sys.stderr)))(f"warning: warm-up request failed: {warm.error}")
        return time.perf_counter() - t

    with watchdogs(client, stop, opts.abort_check):
        # A fresh eval warms up before its directory is made, so a wrong URL or Ctrl-C leaves nothing behind;
        # a resumed one checks its directory first (a mismatch is refused before any request).
        fresh = not (out / META).exists()
        warm_s = 0.0
        counts = opts.prompt_tokens if opts.prompt_tokens is not None else PromptTokens()
        # a fresh eval sends every question: their counts are asked while the warm-up runs (its answer is
        # awaited either way, and no answer is checked before they are learnt)
        learning = asyncio.ensure_future(_learn_prompt_tokens(client, counts, task.items)) if fresh else None
        try:
            if fresh and opts.warmup and task.warms_up:
                warm_s = await warm_up()
            if stop.event.is_set():
                return {}
            # the rows kept must be answers to these questions, scored as this task scores
            done = store.open(meta, {q.index: (q.prompt_sha256, q.label) for q in task.items}, scorer(task))
            pending = [q for q in task.items if q.index not in done]
            if not fresh and opts.warmup and pending and task.warms_up:
                warm_s = await warm_up()
            await stop.race(learning if learning is not None else _learn_prompt_tokens(client, counts, pending))
        finally:
            if learning is not None and not learning.done():  # refused or stopped before they were learnt
                learning.cancel()
                await asyncio.gather(learning, return_exceptions=True)
        # interrupted or not: the directory is open, and _ask writes its summary however it ends
        return await _ask(task, client, store, pending, done, opts, stop, simulated, warm_s, counts)


#: prompts per /tokenize request: every prompt's ids at once are ~30 bytes a token as Python ints (400 MB for 13k
#: 5-shot GSM8K prompts), of which only the counts are kept
TOKENIZE_BATCH = 512
async def _learn_prompt_tokens(client: Client, counts: PromptTokens, pending: Sequence[Item]) -> None:
    """The pending prompts' token counts by the server's tokenizer, :data:`TOKENIZE_BATCH` a request where it takes
    a list (not for the chat API: its count includes the template), the first batch alone and then
    :data:`~harness.measure.runner.PREPARE_IN_FLIGHT` at a time (:func:`~harness.measure.runner.in_turn`);
    nothing more learnt once it cannot (then the first answer to each prompt on this launch sets its count). A
    prompt the tokenizer of this launch has already counted (an earlier pass on it) is not asked again: its ids
    are ~8 MB of JSON an eval, made, sent and read for a count already known."""
    if client.api.chat:
        return
    pending = [q for q in pending if not counts.tokenized(PromptTokens.key(client.api.name, q.prompt_sha256))]
    if not pending:
        return

    async def learn(part: Sequence[Item]) -> bool | None:
        try:
            ids = await client.tokenize_all([q.prompt for q in part], True)
        except ServerGone:  # the generation requests find out whether the server is gone
            return None
        if ids is None:
            return None
        counts.learn([PromptTokens.key(client.api.name, q.prompt_sha256) for q in part], [len(x) for x in ids])
        return True  # only the counts kept

    await in_turn([pending[start:start + TOKENIZE_BATCH] for start in range(0, len(pending), TOKENIZE_BATCH)], learn)


class _TurnWriter:
    """An eval's rows, queued as the answers arrive and written once a turn of the event loop: one write a file
    for all the answers of a turn (a crash loses that turn's: a resume asks them again). A write that fails (a
    full disk) stops the eval; what is on disk stays, a rerun sends the rest."""

    def __init__(self, store: EvalStore, stop: Stop):
        self.store, self.stop = store, stop
        self._due: asyncio.Handle | None = None

    def write(self, rec: SampleRecord, q: Item) -> bool:
        """Queue ``rec`` (the answer to ``q``), written at the end of this turn; False when a write failed."""
        try:
            self.store.queue(rec, q.prompt, q.head)
        except OutputError as e:  # an earlier write failed
            self.stop.fail(e)
            return False
        if self._due is None:
            self._due = asyncio.get_running_loop().call_soon(self.flush)
        return True

    def flush(self) -> None:
        """Write what is queued now."""
        if self._due is not None:
            self._due.cancel()
            self._due = None
        try:
            self.store.flush()
        except OutputError as e:
            self.stop.fail(e)


async def _ask(task: Task, client: Client, store: EvalStore, pending: list[Item],
               done: dict[int, SampleRecord], opts: EvalOptions, stop: Stop,
               simulated: bool, warm_s: float, counts: PromptTokens) -> dict[str, Any]:
    """Send the pending questions, store each answer as it arrives; write the summary however it ends.
    ``warm_s``: the warm-up's duration, counted in the wall time as SGLang's script counts it; ``counts``: each
    prompt's token count on this server, which its answer must repeat."""
    cfg, api, out = client.cfg, client.api, store.root
    sampling = task.sampling_params(chat=api.chat)
    n_items = len(task.items)
    progress = Progress(n_items, opts.progress, f"{out.parent.name}/{out.name}", initial=len(done),
                        correct=sum(1 for r in done.values() if r.correct), accuracy=True,
                        in_flight=lambda: client.in_flight, note=client.status)
    t0 = time.perf_counter()
    refusals: Refusals[tuple[Item, Reply]] = Refusals(cfg.url, stop)  # unanswered: errors if the server lives
    mixed: list[str] = []  # errors of answers that were another request's

    rows = _TurnWriter(store, stop)

    def write(q: Item, reply: Reply) -> None:
        rec = _record(task, q, reply)
        if rec.error is not None and rec.error.startswith(NOT_THIS_REQUEST):
            mixed.append(rec.error)
        if rows.write(rec, q):
            progress.update(error=rec.error is not None, correct=bool(rec.correct))

    async def one(q: Item) -> None:
        key = PromptTokens.key(api.name, q.prompt_sha256)
        reply = await client.generate(api.generation_body(q.prompt, sampling),
                                      lambda gen: counts.check(key, gen.prompt_tokens))
        if reply.error is not None and stop.after_failure(opts.abort_check):
            return  # failed because the server died: "missing" (sent again on resume), not an error
        if reply.lost:
            refusals.hold((q, reply), reply.refused)
            return
        if not stop.event.is_set():  # the server answers again: the unanswered ones were real request errors
            for held in refusals.release():
                write(*held)
        write(q, reply)

    queue = iter(pending)

    async def worker() -> None:
        # the pending questions in order, one at a time per worker: as many in flight as the client sends at
        # once, without a task (and its request body) made up front for every question
        for q in queue:
            if stop.event.is_set():
                return
            await one(q)

    workers = min(client.parallel, len(pending))
    tasks = [] if stop.event.is_set() else [asyncio.ensure_future(worker()) for _ in range(workers)]
    try:
        with progress.ticking():
            finished = bool(tasks) and await stop.race(asyncio.gather(*tasks)) is not None
        if finished and not stop.event.is_set():  # (the last request may be the one that tripped it)
            for held in refusals.release():
                write(*held)
    finally:
        for t in tasks:  # stopped: in-flight requests are cancelled, never stored as errors
            if not t.done():
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # retrieve, so nothing is logged
        progress.close()
        if mixed:
            (opts.on_status or (lambda s: print(f"abh: {s}", file=sys.stderr)))(
                f"warning: {len(mixed)} question(s) of {out.parent.name}/{out.name} got answers to other requests "
                f"from {cfg.url} (counted as request errors), e.g. {mixed[0]}")
        rows.flush()  # what the last turn queued
        wall = time.perf_counter() - t0 + warm_s
        store.close_files()
        samples = load_samples(out, cached=False)  # the summary about to be written makes a cached copy stale
        prev_wall = float(store.meta.get("wall_s_total", 0.0))
        described = task.describe()
        summary = {**summarize(samples, n_items, wall),
                   "wall_s_this_session": wall, "resumed": bool(store.meta.get("resumes")),
                   "recipe": task.recipe.to_dict(), "dataset_sha256": described["dataset_sha256"],
                   "dataset_canonical": described["dataset_canonical"], "api": api.name, "simulated": simulated,
                   "complete": len(samples) == n_items and stop.reason is None,
                   "aborted": stop.reason}
        if summary["resumed"]:
            summary["latency_s"] = prev_wall + wall
            total = summary["latency_s"]
            summary["output_throughput"] = summary["output_tokens"] / total if total > 0 else None
        store.meta["wall_s_total"] = prev_wall + wall
        try:
            store.save_meta()
            store.write_summary(summary)
        except OutputError:
            if store.failed is None:
                raise
            # the disk that refused the answers refuses the summary too: the first error is the one to report
    return summary


def run_eval(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Synchronous wrapper of :func:`run_eval_async`."""
    return run(run_eval_async(*args, **kwargs))


def format_summary(s: dict[str, Any]) -> str:
    acc = "n/a" if s.get("accuracy") is None else f"{s['accuracy']:.3f}"
    inv = "n/a" if s.get("invalid_rate") is None else f"{s['invalid_rate']:.3f}"
    thr = "n/a" if s.get("output_throughput") is None else f"{s['output_throughput']:.1f} tok/s"
    sim = "  [SIMULATED]" if s.get("simulated") else ""
    return (f"Accuracy: {acc}  Invalid: {inv}  Errors: {s['errors']}/{s['n']}  Missing: {s.get('missing', 0)}  "
            f"Latency: {s['latency_s']:.3f} s  Output throughput: {thr}{sim}")
