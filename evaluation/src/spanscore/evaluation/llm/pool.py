"""The run's judge: one async pool answering every question, from the cache first.

`JudgeRunner` owns an event loop on a background thread. `submit(requests)` (thread-safe)
returns a future of the answers by request digest; the pool:
1. looks every question up in the lake's `judge_cache` (a hit costs nothing and is counted);
2. asks the rest through `JudgeClient` (adaptive concurrency, retries), the same question once
   however many conversations ask it at the same time;
3. stops asking at the budget (`max_calls`, `max_cost_usd`): later questions get a `skipped`
   answer saying so;
4. stores each new answer in the cache within a second (group commits), so a killed run pays
   again at most for the answers of its last second.

`collect_batch` answers questions through the OpenAI Batch API instead (half price): it uploads
the JSONL file, creates the batch, reports its id (the run records it before waiting), polls
until the batch ends and stores the answers in the cache, where the scoring pass finds them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import io
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import duckdb
import orjson
import pyarrow as pa

from spanscore.evaluation.llm.client import JudgeClient
from spanscore.evaluation.llm.types import JudgeAnswer, JudgeConfig, JudgeRequest, Usage
from spanscore.lake import ALIAS, arrow_schema, connect, retrying, side_cursor
from spanscore.lake.schema.tables import JUDGE_CACHE

log = logging.getLogger("spanscore.judge")


T = TypeVar("T")


class JudgeCache:
    """The lake's `judge_cache` table: answers by cache key (thread-safe).

    `put` runs on the judge's event loop for every answer, so it only appends to a buffer under
    its own lock: it never waits for a lake query or a flush that holds the connection."""

    def __init__(self, lake: str | duckdb.DuckDBPyConnection) -> None:
        # A run passes its own connection (opening another one costs a quarter of a second).
        self._lake: duckdb.DuckDBPyConnection | None = None  # closed with the cache
        if isinstance(lake, str):
            lake = self._lake = connect(lake)
        # Lookups and writes register Arrow tables: on a side cursor, which is also the
        # connection of this cache's own thread.
        self._con = side_cursor(lake)
        self._lock = threading.Lock()  # the connection
        self._buffer_lock = threading.Lock()
        self._buffer: list[dict[str, Any]] = []
        self._memory: dict[str, JudgeAnswer] | None = None  # see `preload`

    def preload(self, purpose_prefix: str) -> int:
        """Read every cached answer whose purpose starts with `purpose_prefix` into memory, and
        from then on answer lookups from memory only. For a caller that asks one question at a
        time (a simulated user's turn): a lookup in the lake per question cost a query each,
        tens of milliseconds of CPU, where the judge looks up a whole batch at once."""
        with self._lock:
            rows = self._con.execute(
                f"SELECT key, any_value(model), any_value(answer) FROM {ALIAS}.judge_cache "
                "WHERE starts_with(purpose, ?) GROUP BY key",
                [purpose_prefix],
            ).fetchall()
        self._memory = {
            key: JudgeAnswer(value=orjson.loads(answer), cached=True, model=model)
            for key, model, answer in rows
        }
        return len(rows)

    @property
    def in_memory(self) -> bool:
        """Whether look-ups are answered from memory (`preload`), never from the lake."""
        return self._memory is not None

    def get_many(self, keys: list[str]) -> dict[str, JudgeAnswer]:
        if not keys:
            return {}
        if self._memory is not None:
            return {key: self._memory[key] for key in keys if key in self._memory}
        with self._lock:
            self._con.register("spanscore_keys", pa.table({"key": keys}))
            try:
                rows = self._con.execute(
                    f"SELECT key, any_value(model), any_value(answer) FROM {ALIAS}.judge_cache "
                    "WHERE key IN (SELECT key FROM spanscore_keys) GROUP BY key"
                ).fetchall()
            finally:
                self._con.unregister("spanscore_keys")
        return {
            key: JudgeAnswer(value=orjson.loads(answer), cached=True, model=model)
            for key, model, answer in rows
        }

    def put(self, key: str, request: JudgeRequest, answer: JudgeAnswer, run_id: str) -> None:
        with self._buffer_lock:
            self._buffer.append(
                {
                    "key": key,
                    "kind": request.kind,
                    "purpose": request.purpose,
                    "model": answer.model,
                    "answer": orjson.dumps(answer.value).decode(),
                    "prompt_tokens": answer.usage.prompt_tokens,
                    "cached_tokens": answer.usage.cached_tokens,
                    "completion_tokens": answer.usage.completion_tokens,
                    "cost_usd": answer.usage.cost_usd,
                    "run_id": run_id,
                    "created_at": dt.datetime.now(dt.UTC),
                    "conversation_id": request.asked_for or None,
                }
            )

    def flush(self) -> int:
        with self._buffer_lock:
            rows, self._buffer = self._buffer, []
        if not rows:
            return 0
        with self._lock:
            table = pa.Table.from_pylist(rows, schema=arrow_schema(JUDGE_CACHE))
            columns = ", ".join(f'"{c.name}"' for c in JUDGE_CACHE)

            def write() -> None:
                self._con.register("spanscore_cache_rows", table)
                try:
                    self._con.execute(
                        f"INSERT INTO {ALIAS}.judge_cache ({columns}) "
                        f"SELECT {columns} FROM spanscore_cache_rows"
                    )
                finally:
                    self._con.unregister("spanscore_cache_rows")

            try:
                retrying(write, con=self._con, what="store judge answers")
            except BaseException:
                with self._buffer_lock:  # kept for the next flush, in their order
                    self._buffer[:0] = rows
                raise
            return len(rows)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            # Under the lock: a lookup or flush whose awaiting task was cancelled at shutdown
            # may still be running on an executor thread, and closing a DuckDB connection
            # under a running query crashes the process.
            with self._lock:
                self._con.close()
                if self._lake is not None:
                    self._lake.close()


@dataclass
class JudgeTotals:
    """What the judge did in a run (the `eval_runs` judge columns)."""

    calls: int = 0
    cache_hits: int = 0
    skipped: int = 0
    failed: int = 0
    usage: Usage = field(default_factory=Usage)
    batches: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "skipped": self.skipped,
            "failed": self.failed,
            "prompt_tokens": self.usage.prompt_tokens,
            "cached_tokens": self.usage.cached_tokens,
            "completion_tokens": self.usage.completion_tokens,
            "cost_usd": self.usage.cost_usd,
            "batches": list(self.batches),
        }


class JudgeRunner:
    """The judge of one run (see the module doc). Use as a context manager."""

    # A commit costs the same 20 ms of CPU for 1 answer or 1,000: once a second, that is 2 % of
    # a core whatever the rate (every 0.2 s, it was a millisecond of CPU per judged call).
    flush_interval_s = 1.0

    def __init__(
        self,
        config: JudgeConfig,
        *,
        lake: str | duckdb.DuckDBPyConnection | None = None,
        run_id: str = "",
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.client = JudgeClient(config, environ=environ)
        self.cache = JudgeCache(lake) if lake is not None and config.cache else None
        self.run_id = run_id
        self.totals = JudgeTotals()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="spanscore-judge", daemon=True)
        self._asking: dict[str, asyncio.Future[JudgeAnswer]] = {}
        self._started_calls = 0
        self._stopping = False
        self._flusher: concurrent.futures.Future[None] | None = None

    # lifecycle

    def __enter__(self) -> JudgeRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> JudgeRunner:
        try:
            self.client.check()
        except BaseException:
            if self.cache is not None:
                self.cache.close()
            raise
        self._thread.start()
        if self.cache is not None:
            self._flusher = asyncio.run_coroutine_threadsafe(self._flush_often(), self._loop)
        return self

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def close(self) -> None:
        """Stop: questions still being asked are cancelled; stored answers are flushed."""
        if not self._thread.is_alive():
            if self.cache is not None:
                self.cache.close()
            return
        self._stopping = True
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        if self.cache is not None:
            self.cache.close()

    async def _shutdown(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.client.aclose()
        # A cancelled task's lake lookup or flush goes on in its executor thread: wait for it,
        # so that nothing uses the cache's connection once it closes.
        await self._loop.shutdown_default_executor()

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    # answering

    def submit(
        self, requests: Mapping[str, JudgeRequest]
    ) -> concurrent.futures.Future[dict[str, JudgeAnswer]]:
        """Answers (by digest) of `requests` (by digest), from any thread."""
        return asyncio.run_coroutine_threadsafe(self._answer_all(dict(requests)), self._loop)

    def answer(self, requests: Mapping[str, JudgeRequest]) -> dict[str, JudgeAnswer]:
        return self.submit(requests).result()

    def limit_info(self) -> dict[str, Any]:
        limit = self.client.limit
        return {
            "ceiling": limit.ceiling,
            "limit": round(limit.limit, 2),
            "peak_in_flight": limit.peak,
            "throttled": self.client.stats.throttled,
            "retries": self.client.stats.retries,
            "attempts": self.client.stats.attempts,
            "endpoint": self.client.endpoint(),
            "last_error": self.client.stats.last_error,
            "lowest_limit_after_429": limit.lowest_after_throttle,
            "structured_output_fallback": self.client.stats.structured_fallback,
        }

    async def _answer_all(self, requests: dict[str, JudgeRequest]) -> dict[str, JudgeAnswer]:
        keys = {digest: self.client.cache_key(r) for digest, r in requests.items()}
        found: dict[str, JudgeAnswer] = {}
        if self.cache is not None and self.cache.in_memory:
            found = self.cache.get_many(list(keys.values()))  # a dict look-up: no thread hop
        elif self.cache is not None:
            found = await asyncio.to_thread(self.cache.get_many, sorted(set(keys.values())))
        answers: dict[str, JudgeAnswer] = {}
        waiting: dict[str, asyncio.Future[JudgeAnswer]] = {}
        for digest, request in requests.items():
            key = keys[digest]
            if key in found:
                answers[digest] = found[key]
                with self._lock:
                    self.totals.cache_hits += 1
            else:
                waiting[digest] = self._ask_once(key, request)
        if waiting:
            done = await asyncio.gather(*waiting.values())
            answers.update(zip(waiting, done, strict=True))
        return answers

    def _ask_once(self, key: str, request: JudgeRequest) -> asyncio.Future[JudgeAnswer]:
        """The same question asked by several conversations at once is asked once."""
        asking = self._asking.get(key)
        if asking is None:
            asking = asyncio.ensure_future(self._ask(key, request))
            self._asking[key] = asking
            asking.add_done_callback(lambda _: self._asking.pop(key, None))
        return asking

    def _over_budget(self) -> str | None:
        config = self.config
        if config.max_calls is not None and self._started_calls >= config.max_calls:
            return f"skipped: the judge budget of {config.max_calls} calls is spent"
        cost = self.totals.usage.cost_usd
        if config.max_cost_usd is not None and cost is not None and cost >= config.max_cost_usd:
            return f"skipped: the judge budget of ${config.max_cost_usd:g} is spent"
        return None

    async def _ask(self, key: str, request: JudgeRequest) -> JudgeAnswer:
        over = self._over_budget()
        if over is not None:
            with self._lock:
                self.totals.skipped += 1
            return JudgeAnswer(skipped=over)
        self._started_calls += 1
        answer = await self.client.ask(request)
        with self._lock:
            if answer.ok:
                self.totals.calls += 1
                self.totals.usage = self.totals.usage + answer.usage
            else:
                self.totals.failed += 1
        if answer.ok and self.cache is not None:
            self.cache.put(key, request, answer, self.run_id)
        return answer

    async def _flush_often(self) -> None:
        assert self.cache is not None
        while not self._stopping:
            await asyncio.sleep(self.flush_interval_s)
            try:
                await asyncio.to_thread(self.cache.flush)
            except Exception as exc:  # the next flush retries: answers stay buffered
                log.warning("storing judge answers failed (will retry): %s", exc)

    def flush(self) -> None:
        if self.cache is not None:
            self.cache.flush()

    # the Batch API

    def uncached(self, requests: Mapping[str, JudgeRequest]) -> dict[str, JudgeRequest]:
        """The requests the cache cannot answer (by cache key)."""
        keys = {self.client.cache_key(r): r for r in requests.values()}
        found = self.cache.get_many(sorted(keys)) if self.cache is not None else {}
        return {k: r for k, r in keys.items() if k not in found}

    def create_batches(
        self, requests: Mapping[str, JudgeRequest], max_lines: int = 50_000
    ) -> list[str]:
        """Upload `requests` (by cache key) as batch input files and create the batches; their
        ids, to record before waiting."""
        return self._call(self._create_batches(dict(requests), max_lines))

    async def _create_batches(self, requests: dict[str, JudgeRequest], max_lines: int) -> list[str]:
        client = self.client.client()
        items = sorted(requests.items())
        ids: list[str] = []
        for start in range(0, len(items), max_lines):
            by_endpoint: dict[str, list[bytes]] = {}
            for key, request in items[start : start + max_lines]:
                url = "/v1/embeddings" if request.kind == "embedding" else "/v1/chat/completions"
                line = {
                    "custom_id": key,
                    "method": "POST",
                    "url": url,
                    "body": self.client.body(request),
                }
                by_endpoint.setdefault(url, []).append(orjson.dumps(line))
            for url, lines in sorted(by_endpoint.items()):
                data = b"\n".join(lines) + b"\n"
                uploaded = await client.files.create(
                    file=("spanscore-judge.jsonl", io.BytesIO(data)),
                    purpose="batch",
                    timeout=self._file_timeout_s(),
                )
                batch = await client.batches.create(
                    input_file_id=uploaded.id,
                    endpoint=url,  # type: ignore[arg-type]
                    completion_window="24h",
                    metadata={"spanscore_run": self.run_id[:64] or "spanscore"},
                )
                ids.append(batch.id)
        with self._lock:
            self.totals.batches.extend(ids)
        return ids

    def collect_batches(
        self,
        batch_ids: list[str],
        requests: Mapping[str, JudgeRequest],
        *,
        progress: Callable[[str], None] | None = None,
    ) -> dict[str, str]:
        """Wait for the batches, store their answers in the cache; the final status of each.
        `requests` (by cache key) tells how to read each line (lines of unknown keys are
        skipped). Interruptible (KeyboardInterrupt) while waiting."""
        statuses: dict[str, str] = {}
        for batch_id in batch_ids:
            while True:
                batch = self._call(self.client.client().batches.retrieve(batch_id))
                if batch.status in ("completed", "failed", "expired", "cancelled"):
                    break
                if progress is not None:
                    counts = batch.request_counts
                    done = f"{counts.completed}/{counts.total}" if counts else "?"
                    progress(f"batch {batch_id}: {batch.status} ({done} answered)")
                time.sleep(self.config.batch_poll_s)
            statuses[batch_id] = batch.status
            if batch.output_file_id:
                content = self._call(
                    self.client.client().files.content(
                        batch.output_file_id, timeout=self._file_timeout_s()
                    )
                )
                self._store_batch_output(content.read(), requests)
        self.flush()
        return statuses

    def _file_timeout_s(self) -> float:
        """A batch file's transfer gets at least ten minutes: the judge's transport times the
        whole answer, and a batch file is up to 200 MB where a judge's answer is a few kB."""
        return max(600.0, self.config.timeout_s)

    def _store_batch_output(self, data: bytes, requests: Mapping[str, JudgeRequest]) -> None:
        for line in data.splitlines():
            if not line.strip():
                continue
            try:
                item = orjson.loads(line)
                key = item["custom_id"]
                response = item.get("response") or {}
                body = response.get("body") or {}
            except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
                log.warning("unreadable batch output line: %.120r", line)
                continue
            request = requests.get(key)
            if request is None or response.get("status_code") != 200:
                continue  # failed lines are asked directly by the scoring pass
            model = self.config.model if request.kind == "chat" else self.config.embedding_model
            try:
                value = self.client.read(request, body, batch=True)
            except ValueError as exc:
                log.warning("batch answer for %s unusable: %s", request.purpose, exc)
                continue
            usage = self.client.usage(model, body, batch=True)
            answer = JudgeAnswer(value=value, model=str(body.get("model") or model), usage=usage)
            with self._lock:
                self.totals.calls += 1
                self.totals.usage = self.totals.usage + usage
            if self.cache is not None:
                self.cache.put(key, request, answer, self.run_id)
