"""Trajectories rebuilt from the lake: the rows read (`rows`) and assembled (`assemble`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Sequence

import duckdb
import pyarrow as pa

from spanscore.evaluation.trajectory.assemble import Assembler
from spanscore.evaluation.trajectory.model import Trajectory
from spanscore.evaluation.trajectory.rows import (
    CHUNK_SPANS,
    attribute_keys,
    conversation_chunks,
    rows_of_chunks,
)


def load_trajectories(
    con: duckdb.DuckDBPyConnection,
    *,
    conversation_ids: Sequence[str] | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    batch_rows: int = 100_000,
    attributes: Sequence[str] = (),
    chunk_spans: int = CHUNK_SPANS,
    stored: bool = True,
) -> Iterator[Trajectory]:
    """Rebuild the trajectories of the given conversations, or of every conversation with a
    span starting in [since, until), or of every conversation, in order of conversation id.

    Streams: the conversations are read in chunks of about `chunk_spans` spans, each by a query
    of its own, which a background thread runs (on a cursor of `con`) while the chunk before is
    assembled; memory holds about two chunks of rows. Each conversation is read whole by one
    query; on a lake that is being written, chunks may see different snapshots.

    `attributes`: span attribute keys to collect into `Trajectory.attributes`, besides
    `CONVERSATION_ATTRIBUTES` (e.g. the keys a suite selects scenarios by). `stored`: read the
    rows maintenance stored where they are current (`trajectory_rows`)."""
    chunks = conversation_chunks(
        con,
        conversation_ids=conversation_ids,
        since=since,
        until=until,
        chunk_spans=chunk_spans,
    )
    batches = rows_of_chunks(
        con, chunks, batch_rows=batch_rows, attributes=attributes, stored=stored
    )
    yield from trajectories_from_batches(batches, attributes)


def load_trajectory(
    con: duckdb.DuckDBPyConnection, conversation_id: str, *, attributes: Sequence[str] = ()
) -> Trajectory | None:
    found = load_trajectories(con, conversation_ids=[conversation_id], attributes=attributes)
    return next(iter(found), None)


def trajectories_from_rows(
    rows: pa.RecordBatch | pa.Table, attributes: Sequence[str] = ()
) -> Iterator[Trajectory]:
    """Trajectories from `trajectory_rows` output holding whole conversations."""
    return trajectories_from_batches([rows], attributes)


def trajectories_from_batches(
    batches: Iterable[pa.RecordBatch | pa.Table], attributes: Sequence[str] = ()
) -> Iterator[Trajectory]:
    """Trajectories from `trajectory_rows` output in order, batch after batch (a conversation
    may go on in the next batch)."""
    assembler = Assembler(attribute_keys(attributes))
    for batch in batches:
        yield from assembler.feed(batch)
    yield from assembler.finish()
