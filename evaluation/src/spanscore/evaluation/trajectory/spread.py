"""A window read in many chunks, its spans read from the lake once.

A load of many conversations queries them chunk by chunk (memory holds a chunk's rows, not the
window's). Each query chooses its conversations by id, which prunes the lake's files only
where they are sorted by conversation: after maintenance sorted them on an embedded lake, not
before it, nor on a shared lake (its maintenance merges without sorting). There every query
read the conversation ids of the whole window again, so that reading grew with the square of
the window: an evaluation of 100,000 conversations in 20 queries spent more of this process's
time choosing spans than anything else (bench/evaluate.py).

Spread, the spans and log records of `SPREAD_CHUNKS` chunks at a time are read once and
written to Parquet files per chunk, in a directory of this process's own in the system's
temporary directory (about those chunks' spans, compressed). Each chunk is then read from its
own files, with the same rules (`spanscore.lake.schema.Source`), and they are removed. Where
they cannot be written, the chunks are read from the lake as before.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from spanscore.evaluation.trajectory.scratch import scratch_directory
from spanscore.lake.schema import LOG_RECORD_CONTENT, Source

log = logging.getLogger("spanscore.trajectory")

# Chunks of one load, from which it is read spread (two queries of the lake's own read what
# the spreading reads once, and it writes and reads it again besides).
SPREAD_FROM_CHUNKS = 3

# Chunks spread by one read of the lake. DuckDB's partitioned write holds more of what it
# writes the more it writes (about 200 MB more for a million spans, 600 MB for five): a read
# per this many chunks keeps that to what a few chunks hold, and still reads the lake that
# many times less often.
SPREAD_CHUNKS = 8

# The scratch directories of spread windows (`scratch.scratch_directory`).
SPREAD_PREFIX = "spanscore-spread-"

# Rows a DuckDB thread holds before it writes them to the chunks' files (DuckDB's default, half
# a million, held about a gigabyte of spans), and rows per row group of those files (each open
# file holds one).
_FLUSH_ROWS = 10_000
_ROW_GROUP_ROWS = 2_048

_ROW = "lake_row"  # the column holding each span's row id in the lake


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class Spread:
    """The spans and log records of `chunks` (lists of conversation ids), read from the lake by
    `con` (at its snapshot) into `directory`, `SPREAD_CHUNKS` chunks per read; `source(k)` says
    where the rules read chunk k's, `drop(k)` removes them."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection, chunks: Sequence[Sequence[str]], directory: str
    ) -> None:
        self._directory = Path(directory)
        self._directory.mkdir(parents=True)
        for first in range(0, len(chunks), SPREAD_CHUNKS):
            self._spread(con, chunks[first : first + SPREAD_CHUNKS], first)

    def _spread(
        self, con: duckdb.DuckDBPyConnection, chunks: Sequence[Sequence[str]], first: int
    ) -> None:
        ids = [c for chunk in chunks for c in chunk]
        if not ids:
            return
        con.register(
            "spanscore_spread",
            pa.table(
                {
                    "conversation_id": pa.array(ids, pa.string()),
                    "chunk": pa.array(
                        [first + k for k, chunk in enumerate(chunks) for _ in chunk], pa.int32()
                    ),
                }
            ),
        )
        # A plain range as well as the join: the lake prunes files by it.
        bounds = f"BETWEEN {_literal(min(ids))} AND {_literal(max(ids))}"
        options = (
            "FORMAT parquet, PARTITION_BY (chunk), COMPRESSION lz4_raw, "
            f"ROW_GROUP_SIZE {_ROW_GROUP_ROWS}"
        )
        group = self._directory / f"from-{first}"
        group.mkdir()
        try:
            con.execute(f"SET partitioned_write_flush_threshold = {_FLUSH_ROWS}")
            con.execute(
                f"""COPY (SELECT c.chunk, s.*, s.rowid AS {_ROW}
                    FROM spans s JOIN spanscore_spread c USING (conversation_id)
                    WHERE s.conversation_id {bounds}
                ) TO {_literal(str(group / "spans"))} ({options})"""
            )
            con.execute(
                f"""COPY (SELECT c.chunk, l.*
                    FROM logs l JOIN spanscore_spread c USING (conversation_id)
                    WHERE l.conversation_id {bounds} AND {LOG_RECORD_CONTENT}
                ) TO {_literal(str(group / "logs"))} ({options})"""
            )
        finally:
            con.execute("RESET partitioned_write_flush_threshold")
            con.unregister("spanscore_spread")

    def _partition(self, table: str, k: int) -> Path:
        first = k - k % SPREAD_CHUNKS
        return self._directory / f"from-{first}" / table / f"chunk={k}"

    def _files(self, table: str, k: int) -> str | None:
        partition = self._partition(table, k)
        if not partition.is_dir() or not any(partition.glob("*.parquet")):
            return None
        return f"read_parquet({_literal(str(partition / '*.parquet'))}, hive_partitioning = false)"

    def source(self, k: int) -> Source:
        """Where chunk k's spans and log records are read (none written: the lake's, none
        chosen)."""
        spans = self._files("spans", k)
        logs = self._files("logs", k)
        return Source(
            spans=spans or f"(SELECT *, NULL::BIGINT AS {_ROW} FROM spans WHERE false)",
            logs=logs or "(SELECT * FROM logs WHERE false)",
            row_id=f"s.{_ROW}",
        )

    def drop(self, k: int) -> None:
        """Chunk k is read: its files go."""
        for table in ("spans", "logs"):
            shutil.rmtree(self._partition(table, k), ignore_errors=True)


def spread(
    con: duckdb.DuckDBPyConnection,
    chunks: Sequence[Sequence[str]],
    cleanup: contextlib.ExitStack,
) -> Spread | None:
    """The chunks spread in a scratch directory that `cleanup` removes, or None where they
    could not be written (no temporary directory, the disk is full): they are then read from
    the lake, as unspread."""
    window: Path | None = None
    try:
        window = Path(cleanup.enter_context(scratch_directory(SPREAD_PREFIX))) / "window"
        return Spread(con, chunks, str(window))
    except (duckdb.IOException, duckdb.PermissionException, OSError) as exc:
        log.warning("reading each chunk from the lake: could not spread the window (%s)", exc)
        if window is not None:
            shutil.rmtree(window, ignore_errors=True)
        return None
