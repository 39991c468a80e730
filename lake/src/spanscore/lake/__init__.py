"""spanscore lake: the DuckLake that the collector writes and everyone else reads.

Usage::

    from spanscore.lake import connect
    con = connect("./lake")                  # embedded: ./lake/catalog.sqlite + ./lake/data/
    con.sql("SELECT tool_name, count(*) FROM tool_calls GROUP BY ALL").show()

    connect("postgresql://app@db:5432/spans?data_path=s3://bucket/spans/", create=True)

The connection is an in-memory DuckDB with the lake attached as ``lake`` and selected, so plain
table names (``spans``, ``logs``, ``tool_calls``, ``conversations``, ``eval_runs``, ``scores``)
work. DuckDB extensions load with signature checks on, from the pinned PyPI wheels when present.

Environment:
    SPANSCORE_LAKE       the lake, where a command takes ``--lake``
    SPANSCORE_DATA_PATH  data files of a new PostgreSQL-catalog lake (local dir or s3:// URL)
    SPANSCORE_S3_ENDPOINT, SPANSCORE_S3_REGION, SPANSCORE_S3_URL_STYLE, SPANSCORE_S3_USE_SSL
                         an S3-compatible store for the data (else AWS_ENDPOINT_URL[_S3],
                         AWS_REGION / AWS_DEFAULT_REGION); credentials from AWS_ACCESS_KEY_ID,
                         AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN or a DuckDB secret
"""

from spanscore.lake.connection import (
    append_rows,
    commits_since,
    connect,
    current_snapshot,
    load_extension,
    memory_in_use,
    query,
    side_cursor,
)
from spanscore.lake.location import ALIAS, LakeError, LakeLocation, LakeVersionError, S3Settings
from spanscore.lake.locks import LakeHeld, commit_turn, elected, single_writer
from spanscore.lake.maintenance import maintain
from spanscore.lake.migrate import ensure_schema, include_log_records_in_views, schema_version
from spanscore.lake.retry import is_interrupt, is_transient, retrying
from spanscore.lake.schema.rules import VIEWS
from spanscore.lake.schema.tables import (
    SCHEMA_VERSION,
    TABLES,
    Column,
    arrow_schema,
    quote_identifier,
)
from spanscore.lake.snapshots import data_size, snapshot_exists

__all__ = [
    "ALIAS",
    "SCHEMA_VERSION",
    "TABLES",
    "VIEWS",
    "Column",
    "LakeError",
    "LakeHeld",
    "LakeLocation",
    "LakeVersionError",
    "S3Settings",
    "append_rows",
    "arrow_schema",
    "commit_turn",
    "commits_since",
    "connect",
    "current_snapshot",
    "data_size",
    "elected",
    "ensure_schema",
    "include_log_records_in_views",
    "is_interrupt",
    "is_transient",
    "load_extension",
    "maintain",
    "memory_in_use",
    "query",
    "quote_identifier",
    "retrying",
    "schema_version",
    "side_cursor",
    "single_writer",
    "snapshot_exists",
]
