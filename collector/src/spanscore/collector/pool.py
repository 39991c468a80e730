"""Decoding and flattening off the main interpreter, so that ingest uses every core.

Turning protobuf into rows is pure Python and holds the GIL; in one process it caps ingest at
one core. `FlattenPool` runs it in worker processes (spawned, not forked: the collector has
threads) and hands back Arrow batches; the main process only receives, queues and commits.
With `workers=0` it runs in the calling thread (tests, small deployments).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import threading
from concurrent.futures import BrokenExecutor, ProcessPoolExecutor

from . import otlp
from .flatten import Flattened, Flattener, Limits

log = logging.getLogger("spanscore.collector.pool")

_flattener: Flattener | None = None


def _init_worker(limits: Limits, conversation_attribute: str | None) -> None:
    global _flattener
    _flattener = Flattener(limits, conversation_attribute)
    _exit_with_parent()


def _exit_with_parent() -> None:
    """End this worker when the collector dies, however it dies.

    A worker waits on a queue whose writing end it holds itself, so a `kill -9` of the
    collector never wakes it: workers (and multiprocessing's resource tracker, which waits for
    them) would run on, orphaned, holding memory. The parent's sentinel, a pipe the parent
    holds open, becomes readable when it dies.
    """
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="spanscore-parent-watch", daemon=True).start()


def flatten_request(flattener: Flattener, signal: str, body: bytes, as_json: bool) -> Flattened:
    """Decode one OTLP request body and flatten it; raises otlp.BadRequest."""
    shape = otlp.TRACES if signal == "spans" else otlp.LOGS
    decoded = (otlp.decode_json if as_json else otlp.decode_protobuf)(
        body, shape, flattener.limits.max_items_per_request
    )
    if signal == "spans":
        flat = flattener.spans(decoded.groups, decoded.skipped)
    else:
        flat = flattener.logs(decoded.groups, decoded.skipped)
    flat.rejected += decoded.rejected
    flat.problems[:0] = decoded.problems
    return flat


def _work(signal: str, body: bytes, as_json: bool) -> Flattened:
    assert _flattener is not None, "worker not initialised"
    return flatten_request(_flattener, signal, body, as_json)


def _ready() -> bool:
    return _flattener is not None


class FlattenPool:
    """`run(signal, body, as_json)` in worker processes (or inline when `workers == 0`)."""

    def __init__(
        self, limits: Limits, conversation_attribute: str | None = None, workers: int = 0
    ) -> None:
        self.workers = workers
        self._args = (limits, conversation_attribute)
        self._inline = Flattener(limits, conversation_attribute)
        self._lock = threading.Lock()
        self._executor: ProcessPoolExecutor | None = None
        if workers > 0:
            self._executor = self._start()

    def _start(self) -> ProcessPoolExecutor:
        executor = ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=self._args,
        )
        # Start every worker now: a broken install shows at start-up, not on the first export.
        for future in [executor.submit(_ready) for _ in range(self.workers)]:
            future.result(timeout=120)
        return executor

    def run(self, signal: str, body: bytes, as_json: bool) -> Flattened:
        executor = self._executor
        if executor is None:
            return flatten_request(self._inline, signal, body, as_json)
        try:
            return executor.submit(_work, signal, body, as_json).result()
        except BrokenExecutor:
            # A worker died (out of memory, killed): replace the pool, answer this export by
            # decoding it here.
            log.error("a flatten worker died; restarting the pool")
            with self._lock:
                if self._executor is executor:
                    executor.shutdown(wait=False, cancel_futures=True)
                    self._executor = self._start()
            return flatten_request(self._inline, signal, body, as_json)

    def close(self) -> None:
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True, cancel_futures=True)
                self._executor = None
