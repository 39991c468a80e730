"""A window read in many chunks, its spans read from the lake once.

A load of many conversations queries them chunk by chunk (memory holds a chunk's rows, not the
window's). Each query chooses its conversations by id, which prunes the lake's files only
where they are sorted by conversation: after maintenance sorted them on an embedded lake, not
before it, nor on a shared lake (its maintenance merges without sorting). There every query
read the conversation ids of the whole window again, so that reading grew with the square of
the window: an evaluation of 100,000 conversations in 21 queries spent more of this process's
time choosing spans than anything else (bench/evaluate.py).

Spread, the chunks after the first are read from the lake `SPREAD_CHUNKS` at a time, when the
first of them is wanted: their spans and log records are written to Parquet files per chunk,
in a directory of this process's own in the system's temporary directory (at most that many
chunks' spans, compressed). Each chunk is then read from its own files, with the same rules
(`spanscore.lake.schema.Source`), and they are removed. Chunks whose files cannot be written
are read from the lake as before.
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
from spanscore.lake.location import sql_string
from spanscore.lake.schema import LOG_RECORD_CONTENT, Source

log = logging.getLogger("spanscore.trajectory")

# A load of this many chunks or more is read spread: with fewer, the copy would read the lake
# as often as the chunks' own queries, and write and read the rows again besides.
SPREAD_FROM_CHUNKS = 3

# Chunks copied by one read of the lake, when the first of them is wanted. DuckDB's
# partitioned Parquet writer holds more the more it writes (about 200 MB more for a million
# spans, 600 MB for five), and the copy waits on disk until its chunks are read: this bounds
# both by what a few chunks hold, and still reads the lake that many times less often.
SPREAD_CHUNKS = 8

# The scratch directories of spread windows (`scratch.scratch_directory`).
SPREAD_PREFIX = "spanscore-spread-"

# Rows a DuckDB thread holds before it writes them to the chunks' files (DuckDB's default, half
# a million, held about a gigabyte of spans), and rows per row group of those files (each open
# file holds one).
_FLUSH_ROWS = 10_000
_ROW_GROUP_ROWS = 2_048

_ROW = "lake_row"  # the column holding each span's row id in the lake

# What a copy that failed raises, and the chunks of its read are then read from the lake.
_CANNOT_WRITE = (
    duckdb.IOException,
    duckdb.PermissionException,
    duckdb.OutOfMemoryException,
    OSError,
)


class Spread:
    """The spans and log records of `chunks[start:]` (lists of conversation ids), read from the
    lake by `con` (at its snapshot) into `directory`, `SPREAD_CHUNKS` chunks per read, when the
    first of them is wanted: `source(k)` says where the rules read chunk k's (None: from the
    lake, its read having failed), `drop(k)` removes them."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        chunks: Sequence[Sequence[str]],
        directory: str,
        start: int = 0,
    ) -> None:
        self._con = con
        self._chunks = chunks
        self._start = start
        self._directory = Path(directory)
        self._directory.mkdir(parents=True)
        self._read: dict[int, bool] = {}  # a copy's first chunk: whether it was written
        self._written: set[int] = set()  # chunks the copy wrote spans of

    def source(self, k: int) -> Source | None:
        """Where chunk k's spans and log records are read (none written: the lake's, none
        chosen; None: from the lake, the copy having failed)."""
        first = self._first_of(k)
        if first not in self._read:
            self._read[first] = self._spread(first)
        if not self._read[first]:
            return None
        spans = self._files("spans", k)
        if spans is None and k in self._written:
            gone = self._partition("spans", k)
            raise FileNotFoundError(f"the copy of a chunk's spans is gone: {gone}")
        return Source(
            spans=spans or f"(SELECT *, NULL::BIGINT AS {_ROW} FROM spans WHERE false)",
            logs=self._files("logs", k) or "(SELECT * FROM logs WHERE false)",
            row_id=f"s.{_ROW}",
        )

    def drop(self, k: int) -> None:
        """Chunk k is read: its files go."""
        for table in ("spans", "logs"):
            shutil.rmtree(self._partition(table, k), ignore_errors=True)

    def _spread(self, first: int) -> bool:
        """Copies the chunks from `first` (`SPREAD_CHUNKS` of them); False where it failed."""
        chunks = {
            k: list(dict.fromkeys(self._chunks[k]))  # an id twice would copy its spans twice
            for k in range(first, min(first + SPREAD_CHUNKS, len(self._chunks)))
        }
        ids = [c for chunk in chunks.values() for c in chunk]
        if not ids:
            return True
        group = self._directory / f"from-{first}"
        con = self._con
        con.register(
            "spanscore_spread",
            pa.table(
                {
                    "conversation_id": pa.array(ids, pa.string()),
                    "chunk": pa.array(
                        [k for k, chunk in chunks.items() for _ in chunk], pa.int32()
                    ),
                }
            ),
        )
        # A plain range as well as the join: the lake prunes files by it.
        bounds = {"first": min(ids), "last": max(ids)}
        options = (
            "FORMAT parquet, PARTITION_BY (chunk), COMPRESSION lz4_raw, "
            f"ROW_GROUP_SIZE {_ROW_GROUP_ROWS}"
        )
        try:
            group.mkdir()
            con.execute(f"SET partitioned_write_flush_threshold = {_FLUSH_ROWS}")
            con.execute(
                f"""COPY (SELECT c.chunk, s.*, s.rowid AS {_ROW}
                    FROM spans s JOIN spanscore_spread c USING (conversation_id)
                    WHERE s.conversation_id BETWEEN $first AND $last
                ) TO {sql_string(str(group / "spans"))} ({options})""",
                bounds,
            )
            con.execute(
                f"""COPY (SELECT c.chunk, l.*
                    FROM logs l JOIN spanscore_spread c USING (conversation_id)
                    WHERE l.conversation_id BETWEEN $first AND $last AND {LOG_RECORD_CONTENT}
                ) TO {sql_string(str(group / "logs"))} ({options})""",
                bounds,
            )
        except _CANNOT_WRITE as exc:
            log.warning(
                "reading %d chunks from the lake: could not copy them (%s)", len(chunks), exc
            )
            shutil.rmtree(group, ignore_errors=True)
            return False
        finally:
            con.execute("RESET partitioned_write_flush_threshold")
            con.unregister("spanscore_spread")
        self._written |= {k for k in chunks if self._files("spans", k) is not None}
        return True

    def _first_of(self, k: int) -> int:
        """The first chunk of the copy that holds chunk k."""
        return self._start + (k - self._start) // SPREAD_CHUNKS * SPREAD_CHUNKS

    def _partition(self, table: str, k: int) -> Path:
        return self._directory / f"from-{self._first_of(k)}" / table / f"chunk={k}"

    def _files(self, table: str, k: int) -> str | None:
        partition = self._partition(table, k)
        if not partition.is_dir() or not any(partition.glob("*.parquet")):
            return None
        return (
            f"read_parquet({sql_string(str(partition / '*.parquet'))}, hive_partitioning = false)"
        )


def spread(
    con: duckdb.DuckDBPyConnection,
    chunks: Sequence[Sequence[str]],
    cleanup: contextlib.ExitStack,
    start: int = 0,
) -> Spread | None:
    """`Spread` in a scratch directory that `cleanup` removes, or None where none can be made
    (no temporary directory): the chunks are then read from the lake, as unspread."""
    try:
        window = Path(cleanup.enter_context(scratch_directory(SPREAD_PREFIX))) / "window"
        return Spread(con, chunks, str(window), start)
    except OSError as exc:
        log.warning("reading each chunk from the lake: could not spread the window (%s)", exc)
        return None
