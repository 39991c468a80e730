"""What makes a stored row the same row when an export is retried: its identity.

The writer remembers the identity keys of the rows it committed recently and drops an incoming
row whose key it has seen (an export retried after a lost acknowledgement); the flattener drops
a repeat within one request by the same columns. A span is its trace and span id. A log record
is its trace, span, both times, event name and body; one with no time at all has no identity
(two such records may well be two events): its key is None and it is never dropped.

Keys are Python hashes of the columns' values, computed the same way for incoming batches and
for the rows read back from the lake at start-up. They never leave the process, so Python's
per-process hash seed does not matter; a DuckDB `hash()` query cost each commit ten times as
much CPU (a statement and a registered table per commit).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import pyarrow as pa

Kind = Literal["spans", "logs"]

SPAN_IDENTITY = ("trace_id", "span_id")
LOG_IDENTITY = (
    "time_unix_nano",
    "observed_time_unix_nano",
    "trace_id",
    "span_id",
    "event_name",
    "body",
)
IDENTITY: dict[Kind, tuple[str, ...]] = {"spans": SPAN_IDENTITY, "logs": LOG_IDENTITY}


def has_identity(time_unix_nano: int | None, observed_time_unix_nano: int | None) -> bool:
    """A log record with neither time has none."""
    return bool(time_unix_nano or observed_time_unix_nano)


def keys(rows: pa.Table | pa.RecordBatch, kind: Kind) -> list[int | None]:
    """The identity key of each row (None: a log record without identity)."""
    columns = [rows.column(name).to_pylist() for name in IDENTITY[kind]]
    if kind == "spans":
        return list(map(hash, zip(*columns, strict=True)))
    return [
        hash(values) if has_identity(values[0], values[1]) else None
        for values in zip(*columns, strict=True)
    ]


def keys_of_batches(batches: Iterable[pa.RecordBatch], kind: Kind) -> list[int]:
    """The keys of the rows with an identity, in order, batch by batch (bounded memory)."""
    found: list[int] = []
    for batch in batches:
        found.extend(k for k in keys(batch, kind) if k is not None)
    return found
