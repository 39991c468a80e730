"""The lake's schema version, its migrations, and the views (created or replaced only when the
rules they are made of changed, so a reader never waits on a catalog write)."""

from __future__ import annotations

import hashlib

import duckdb

from spanscore.lake import schema
from spanscore.lake.location import (
    ALIAS,
    LakeError,
    LakeLocation,
    LakeVersionError,
    log,
    sql_string,
)
from spanscore.lake.retry import retrying

# Spans (and log records) per row group of the files every write makes, from the lake's
# creation on: one conversation then reads about this many spans of each wide column in each
# file its rows lie in. DuckDB's default, 122,880, made a lake of large commits before its
# first maintenance (which sets this) read seven times as much for each span of the
# conversation, and take twice as long (docs/design/reading-one-conversation.md). Compaction
# sorts in row groups of this size too (`maintenance.SORTED_ROW_GROUP_SPANS`).
ROW_GROUP_SPANS = 16_384
ROW_GROUP_TABLES = ("spans", "logs")


def _lake_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main'",
        [ALIAS],
    ).fetchall()
    return {r[0] for r in rows}


def schema_version(con: duckdb.DuckDBPyConnection, *, in_transaction: bool = True) -> int | None:
    """The lake's schema version, or None for an empty lake. Outside a transaction
    (`in_transaction=False`) the version table is read straight away, a missing one read as
    an empty lake: listing the lake's tables first took 14 of `connect()`'s 60 ms of catalog
    work. In a transaction a failed statement would abort it, so the tables are listed."""
    if not in_transaction:
        try:
            row = con.execute(f"SELECT max(version) FROM {ALIAS}.main.spanscore_schema").fetchone()
        except duckdb.CatalogException:
            return None
    elif "spanscore_schema" not in _lake_tables(con):
        return None
    else:
        row = con.execute(f"SELECT max(version) FROM {ALIAS}.main.spanscore_schema").fetchone()
    return int(row[0]) if row and row[0] is not None else None


def ensure_schema(
    con: duckdb.DuckDBPyConnection,
    *,
    create: bool,
    migrate: bool,
    location: LakeLocation | None = None,
) -> int:
    """Check the lake's schema, create it (`create`) or upgrade it (`migrate`); its version."""
    where = location.describe() if location else "the lake"
    version = schema_version(con, in_transaction=False)
    if version is None and _lake_tables(con) - set(schema.TABLES):
        raise LakeVersionError(
            f"{where} holds tables but no spanscore schema record: it is not a spanscore lake"
        )
    if version is not None and version > schema.SCHEMA_VERSION:
        raise LakeVersionError(
            f"{where} has schema version {version}, written by a newer spanscore; this one "
            f"reads up to version {schema.SCHEMA_VERSION}. Upgrade spanscore."
        )
    if version == schema.SCHEMA_VERSION:
        _ensure_views(con, writable=migrate)
        return version
    if version is None and not create:
        raise LakeError(f"{where} is empty: start `spanscore serve` on it first")
    if version is not None and not migrate:
        raise LakeError(
            f"{where} has schema version {version} and this spanscore needs "
            f"{schema.SCHEMA_VERSION}: open it once read-write (for example `spanscore sql "
            "--write --lake ... 'SELECT 1'`) to migrate it"
        )

    def apply() -> int:
        con.execute("BEGIN")
        current = schema_version(con) or 0
        if current >= schema.SCHEMA_VERSION:  # another process got there first
            con.execute("COMMIT")
            return current
        for target in range(current + 1, schema.SCHEMA_VERSION + 1):
            for statement in schema.MIGRATIONS[target]:
                con.execute(statement)
        _create_views(con, _views_for(con))
        con.execute(
            "INSERT INTO spanscore_schema VALUES (?, now(), ?)",
            [schema.SCHEMA_VERSION, _package_version()],
        )
        con.execute("COMMIT")
        if not current:
            # A new lake: its first commits are written in small row groups too (an option
            # cannot be set on tables created in the same transaction; if this fails, the
            # first maintenance sets it).
            for table in ROW_GROUP_TABLES:
                con.execute(
                    f"CALL {ALIAS}.set_option('parquet_row_group_size', '{ROW_GROUP_SPANS}', "
                    f"table_name => {sql_string(table)})"
                )
        log.info("lake schema at version %d (was %s)", schema.SCHEMA_VERSION, current or "empty")
        return schema.SCHEMA_VERSION

    return retrying(apply, con=con, what="schema migration")


def _view_mark(body: str) -> str:
    """The comment a view carries: which definition it was created from."""
    return "spanscore:" + hashlib.sha256(body.encode()).hexdigest()[:16]


def _create_views(
    con: duckdb.DuckDBPyConnection,
    views: dict[str, str],
    *,
    temporary: bool = False,
    qualified: bool = False,
) -> None:
    """`qualified`: name the lake's views in full, for a connection whose default catalog is
    another."""
    for name, body in views.items():
        quoted = schema.quote_identifier(name)
        if qualified:
            quoted = f"{ALIAS}.main.{quoted}"
        if temporary:
            con.execute(f"CREATE OR REPLACE TEMP VIEW {quoted} AS {body}")
        else:
            con.execute(f"CREATE OR REPLACE VIEW {quoted} AS {body}")
            con.execute(f"COMMENT ON VIEW {quoted} IS {sql_string(_view_mark(body))}")


def view_marks(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    return dict(
        con.execute(
            "SELECT view_name, comment FROM duckdb_views() "
            "WHERE database_name = ? AND schema_name = 'main'",
            [ALIAS],
        ).fetchall()
    )


def has_views(marks: dict[str, str], views: dict[str, str]) -> bool:
    return all(marks.get(name) == _view_mark(body) for name, body in views.items())


def _views_for(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """The views this lake should have: without what log records say while none of its log
    records says anything about a span (`schema.LOG_RECORD_CONTENT`)."""
    found = con.execute(
        f"SELECT EXISTS (SELECT 1 FROM {ALIAS}.logs WHERE {schema.LOG_RECORD_CONTENT})"
    ).fetchone()
    return schema.VIEWS if found and found[0] else schema.VIEWS_WITHOUT_LOG_RECORDS


def include_log_records_in_views(con: duckdb.DuckDBPyConnection) -> bool:
    """Give the lake the views that read log records, in the caller's transaction (the one
    storing the first log record that says something about a span, so that no snapshot has
    such a record and views that leave it out); False when it had them already. Two writers
    doing this at once conflict, and the one retried finds them there."""
    if has_views(view_marks(con), schema.VIEWS):
        return False
    _create_views(con, schema.VIEWS, qualified=True)
    return True


def _ensure_views(con: duckdb.DuckDBPyConnection, *, writable: bool) -> None:
    """Views that are missing (someone dropped one) or stale (replaced, or made by another
    spanscore version) are created again from `schema.VIEWS` (or, in a lake without log
    records about spans, `schema.VIEWS_WITHOUT_LOG_RECORDS`): in the lake when the connection
    may write, else as temporary views of this connection, which take precedence over the
    lake's (the next read-write open repairs the lake itself)."""

    def stale() -> dict[str, str]:
        marks = view_marks(con)
        if has_views(marks, schema.VIEWS) or has_views(marks, schema.VIEWS_WITHOUT_LOG_RECORDS):
            return {}
        return {
            name: body
            for name, body in _views_for(con).items()
            if marks.get(name) != _view_mark(body)
        }

    if not stale():
        return
    if not writable:
        _create_views(con, stale(), temporary=True)
        return

    def repair() -> None:
        con.execute("BEGIN")
        # Looked at again in the transaction: a writer may have given the lake the views that
        # read log records meanwhile.
        views = stale()
        _create_views(con, views)
        con.execute("COMMIT")
        if views:
            log.info("lake views recreated: %s", ", ".join(views))

    retrying(repair, con=con, what="recreate views")


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spanscore-lake")
    except PackageNotFoundError:
        return "unknown"
