"""The shared export path: decode, flatten, queue, wait for the commit, answer.

Both front ends (gRPC and HTTP) call one `Ingest` with the request's body once it has arrived;
they differ only in how a request arrives and how its `Outcome` is answered. `Ingest` never
raises: every failure is an `Outcome`.

An export is acknowledged (`OK`) only once its rows are committed to the lake (see the
writer). Under backpressure it is refused with a retryable code and a delay to retry after:
RESOURCE_EXHAUSTED when the write queue is full, UNAVAILABLE when the collector is stopping,
the commit takes longer than `commit_deadline_s` (plus a margin), or the lake refused it (the
lake's own error, which names hosts and databases, goes to the log and /status, not to the
client). Items that cannot be read are rejected one by one (`rejected`, with a message); the
rest of the export is stored.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.compute as pc
from google.rpc import code_pb2

from . import otlp
from .admission import Admission, Body, Outcome
from .flatten import summarize
from .pool import FlattenPool
from .stats import Stats
from .writer import GroupCommitWriter, Pending, QueueFull, WriterClosed

log = logging.getLogger("spanscore.collector")


class Ingest:
    """The export path of one collector, over its admission, flattening pool and writer."""

    def __init__(
        self,
        admission: Admission,
        pool: FlattenPool,
        writer: GroupCommitWriter,
        stats: Stats,
        commit_deadline_s: float,
    ) -> None:
        self.admission = admission
        self.pool = pool
        self.writer = writer
        self.stats = stats
        self.commit_deadline_s = commit_deadline_s

    def __call__(
        self, shape: otlp._Shape, body: Body, as_json: bool, admitted: bool = False
    ) -> Outcome:
        """Decode, flatten, queue and wait for the commit. Never raises.

        With `admitted`, the caller already holds a slot from `admit()`; it is released here
        once the body is decoded. The body is let go then too, before the wait for the commit.
        """
        signal = "spans" if shape is otlp.TRACES else "logs"
        if not admitted:
            refusal = self.admission.admit()
            if refusal is not None:
                return refusal
        data = body.take()
        try:
            try:
                flat = self.pool.run(signal, data, as_json)
            except otlp.BadRequest as exc:
                self.stats.add("refused_bad_request")
                return Outcome(code_pb2.INVALID_ARGUMENT, str(exc))
            except Exception as exc:  # a bug must answer the client, not kill the handler
                log.exception("could not decode an export")
                self.stats.add("refused_internal")
                return Outcome(code_pb2.INTERNAL, f"could not read the request: {exc}")
        finally:
            del data
            body.close()
            self.admission.release()
        rejected = flat.rejected
        problems = flat.problems
        if flat.unexpected:
            # A shape no rule foresaw: the item is rejected, and the operator hears of it.
            self.stats.add(f"{signal}_unreadable", len(flat.unexpected))
            log.warning(
                "rejected %d %s that could not be read, first: %s",
                len(flat.unexpected),
                signal,
                flat.unexpected[0],
            )
        self.stats.add(f"{signal}_received", flat.rows + rejected)
        self.stats.add(f"{signal}_rejected", rejected)
        self.stats.add(f"{signal}_truncated", flat.truncated)
        if signal == "spans" and flat.rows:
            self.stats.add("spans_without_conversation_id", _trace_stood_in(flat.batch))
        pending = Pending(**{signal: flat.batch})
        message = summarize(problems)
        if flat.rows:
            try:
                self.writer.submit(pending)
            except QueueFull as exc:
                self.stats.add(f"{signal}_refused_queue_full", flat.rows)
                return Outcome(
                    code_pb2.RESOURCE_EXHAUSTED, str(exc), retry_after_s=exc.retry_after_s
                )
            except WriterClosed as exc:
                self.stats.add(f"{signal}_refused_shutting_down", flat.rows)
                return Outcome(code_pb2.UNAVAILABLE, str(exc), retry_after_s=5)
            if not pending.done.wait(self.commit_deadline_s + 5):
                self.stats.add(f"{signal}_unacknowledged_timeout", flat.rows)
                return Outcome(
                    code_pb2.UNAVAILABLE, "the commit is taking too long; retry", retry_after_s=5
                )
            if pending.error is not None:
                # The lake's own error names hosts and databases: it goes to the log and
                # /status, not to clients.
                return Outcome(
                    code_pb2.UNAVAILABLE,
                    "the lake did not accept the commit; retry (the collector's log says why)",
                    retry_after_s=5,
                )
        return Outcome(
            code_pb2.OK,
            message,
            rejected=rejected,
            body=otlp.response_bytes(shape, rejected, message, as_json),
        )


def _trace_stood_in(batch: pa.RecordBatch) -> int:
    """Spans that carried no conversation id of their own (the trace id stood in): an agent
    that never sets one is stored as one conversation per trace."""
    same = pc.equal(batch.column("conversation_id"), batch.column("trace_id"))
    return int(pc.sum(same).as_py() or 0)
