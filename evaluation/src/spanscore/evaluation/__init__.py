"""spanscore evaluation: score conversations stored in the lake.

Usage::

    from spanscore.evaluation import open_lake
    con = open_lake("./lake")   # DuckDB connection, lake attached as `lake`, views defined
    con.sql("SELECT * FROM conversations ORDER BY start_time DESC LIMIT 10").show()

Environment:
    SPANSCORE_LAKE   the default lake of the `spanscore` commands
"""

from __future__ import annotations

import os

import duckdb

from spanscore.lake import connect


def open_lake(
    lake: str | os.PathLike[str] | None = None, *, read_only: bool = False
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the lake attached and selected (default: $SPANSCORE_LAKE)."""
    spec = lake if lake is not None else os.environ.get("SPANSCORE_LAKE", "")
    return connect(spec, read_only=read_only)


__all__ = ["open_lake"]
