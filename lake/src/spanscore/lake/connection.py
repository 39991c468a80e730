"""Opening the lake: where it is, loading DuckDB's extensions, attaching, migrating, retrying."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sqlite3
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from spanscore.lake.location import (
    ALIAS,
    METADATA,
    REMOTE_SCHEMES,
    LakeError,
    LakeLocation,
    S3Settings,
    sql_string,
)
from spanscore.lake.locks import register_turn, turn_of
from spanscore.lake.migrate import ensure_schema
from spanscore.lake.retry import is_transient, retrying
from spanscore.lake.schema.tables import quote_identifier

# Extension name -> the PyPI wheel's import name that carries the signed binary.
_EXTENSION_WHEELS = {
    "ducklake": "duckdb_extension_ducklake",
    "sqlite_scanner": "duckdb_extension_sqlite_scanner",
    "postgres_scanner": "duckdb_extension_postgres_scanner",
    "httpfs": "duckdb_extension_httpfs",
    "aws": "duckdb_extension_aws",
}


def _wheel_extension_path(extension: str) -> Path | None:
    spec = importlib.util.find_spec(_EXTENSION_WHEELS[extension])
    if spec is None or spec.origin is None:
        return None
    path = (
        Path(spec.origin).parent
        / "extensions"
        / f"v{duckdb.__version__}"
        / f"{extension}.duckdb_extension"
    )
    return path if path.exists() else None


def load_extension(con: duckdb.DuckDBPyConnection, extension: str) -> None:
    """Load a DuckDB extension with signature checks on.

    The signed binary from the pinned PyPI wheel is preferred (no network, exact version); then
    an extension already installed in DuckDB's extension directory; then the registry.
    """
    path = _wheel_extension_path(extension)
    if path is not None:
        con.execute(f"LOAD '{path}'")
        return
    try:
        con.execute(f"LOAD {extension}")
    except duckdb.Error:
        try:
            con.execute(f"INSTALL {extension}")
            con.execute(f"LOAD {extension}")
        except duckdb.Error as exc:
            raise LakeError(
                f"cannot load DuckDB extension {extension!r}: {exc}. Install the wheel "
                f"{_EXTENSION_WHEELS[extension].replace('_', '-')}=={duckdb.__version__}"
            ) from exc


def _no_lake(directory: Path, catalog: str) -> str:
    """Why `directory` is no lake, and what to do: a lake beside it with a close name is most
    likely the one meant (a typo must not lead to a new, empty lake)."""
    import difflib

    parent = directory.parent
    try:
        lakes = [p.name for p in parent.iterdir() if (p / catalog).is_file()]
    except OSError:
        lakes = []
    close = difflib.get_close_matches(directory.name, lakes, n=1, cutoff=0.6)
    if close:
        return f"no lake at {directory}: did you mean {parent / close[0]}?"
    return f"no lake at {directory} (start `spanscore serve --lake {directory}` to create one)"


def _prepare_sqlite_catalog(path: Path, create: bool) -> None:
    """Create the catalog file in WAL mode: readers then never block the writer (or vice versa).

    WAL is a property of the database file, so every later client (DuckDB's sqlite extension,
    the plain duckdb CLI) uses it too.
    """
    if path.exists():
        return
    if not create:
        raise LakeError(_no_lake(path.parent, path.name))
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA journal_mode=WAL")
    finally:
        con.close()


def connect(
    spec: str | os.PathLike[str] | LakeLocation,
    *,
    create: bool = False,
    read_only: bool = False,
    data_path: str | None = None,
    threads: int | None = None,
    snapshot: int | None = None,
    memory_limit: str | None = None,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the lake attached as `lake` (and selected), schema checked.

    `snapshot` attaches the lake read-only as it was at that snapshot (`current_snapshot`):
    several connections, even in several processes, then read exactly the same data while
    writers go on committing.

    `create=True` creates a missing lake; otherwise a missing lake is an error that says what to
    run. A lake written by an older spanscore is migrated when opened read-write. The
    connection is an in-memory DuckDB: temporary tables and registered Arrow tables stay out
    of the lake.

    `memory_limit` (DuckDB's syntax, such as "1GB") bounds DuckDB's buffer pool. Without it
    DuckDB may keep up to 80 % of the machine's memory cached, which a long-running process
    (the collector) slowly does.
    """
    location = spec if isinstance(spec, LakeLocation) else LakeLocation.parse(spec, data_path)
    config: dict[str, str | bool | int | float | list[str]] = {
        "allow_unsigned_extensions": False,
        # DuckDB's allocator keeps up to 128 MB cached after each task by default: a process
        # that queries all night (an evaluation, the collector) piled it up, 150 MiB more at
        # 100,000 conversations than at 20,000 in one run. Returned past 16 MB, in the
        # background, it measured no slower (bench/evaluate.py, bench/ingest.py).
        "allocator_flush_threshold": "16MB",
        "allocator_background_threads": True,
    }
    if threads is not None:
        config["threads"] = threads
    if memory_limit is not None:
        config["memory_limit"] = memory_limit
    con = duckdb.connect(config=config)
    try:
        con.execute("SET enable_progress_bar = false")  # it would print into query output
        if read_only or snapshot is not None:
            # Readers (`spanscore sql`, the report, an evaluation's workers) query the same
            # files again and again: keep their Parquet footers and bloom filters parsed (a
            # tenth off one conversation from a view). Not for the long-running writers, whose
            # cache would hold every file compaction has since deleted.
            con.execute("SET parquet_metadata_cache = true")
        if snapshot is not None:
            # An evaluation's readers read each span of their window once (the later queries
            # from copies they delete: `spread`), and DuckDB kept every file's bytes it read,
            # 140 MB at 100,000 conversations against a fifth of that at 20,000: memory set
            # by the window, not the batch (bench/evaluate.py).
            con.execute("SET enable_external_file_cache = false")
        load_extension(con, "postgres_scanner" if location.is_postgres else "sqlite_scanner")
        load_extension(con, "ducklake")
        if location.is_postgres or is_remote(location.data_path):
            _configure_object_store(con, location)
        con.execute("SET ducklake_max_retry_count = 100")
        con.execute("SET ducklake_retry_wait_ms = 20")
        con.execute("SET ducklake_retry_backoff = 1.5")
        if location.directory is not None:
            _prepare_sqlite_catalog(location.directory / "catalog.sqlite", create)
        _attach(con, location, create=create, read_only=read_only, snapshot=snapshot)
        con.execute(f"USE {ALIAS}")
        if location.directory is not None and not read_only and snapshot is None:
            register_turn(con, location.directory)
        ensure_schema(
            con, create=create, migrate=not read_only and snapshot is None, location=location
        )
    except Exception:
        con.close()
        raise
    return con


def _created_meanwhile(exc: BaseException) -> bool:
    """Transient, or lost the race to create a new PostgreSQL catalog: processes started
    together on a fresh shared lake all create its tables, and PostgreSQL refuses all but one
    (a duplicate type or table). Attaching again opens the catalog the winner created."""
    text = str(exc)
    return is_transient(exc) or (
        "duplicate key value violates unique constraint" in text or "already exists" in text
    )


def is_remote(path: str | None) -> bool:
    return bool(path) and str(path).lower().startswith(REMOTE_SCHEMES)


def _configure_object_store(con: duckdb.DuckDBPyConnection, location: LakeLocation) -> None:
    """Load httpfs (a shared lake's data may be on object storage; readers learn the data path
    only from the catalog) and create the S3 secret from the settings, if any."""
    load_extension(con, "httpfs")
    settings = location.s3 or S3Settings()
    sql = settings.secret_sql()
    if sql is None:
        return
    if not settings.key_id:
        load_extension(con, "aws")  # the credential chain lives in the aws extension
    try:
        con.execute(sql)
    except duckdb.Error as exc:
        # The statement holds credentials: name the settings, not the SQL.
        raise LakeError(
            f"cannot configure object storage for {location.describe()} "
            f"(endpoint {settings.endpoint or 'AWS'}, region {settings.region or 'default'}, "
            f"url_style {settings.url_style or 'vhost'}): {type(exc).__name__}"
        ) from None


def _attach(
    con: duckdb.DuckDBPyConnection,
    location: LakeLocation,
    *,
    create: bool,
    read_only: bool,
    snapshot: int | None = None,
) -> None:
    options = []
    if snapshot is not None:
        options.append(f"SNAPSHOT_VERSION {int(snapshot)}")
        read_only = True
    if location.data_path and create:
        options.append(f"DATA_PATH {sql_string(location.data_path)}")
    if location.metadata_schema:
        options.append(f"METADATA_SCHEMA {sql_string(location.metadata_schema)}")
    if read_only:
        options.append("READ_ONLY")
    clause = f" ({', '.join(options)})" if options else ""
    sql = f"ATTACH {sql_string('ducklake:' + location.catalog)} AS {ALIAS}{clause}"
    try:
        retrying(
            lambda: con.execute(sql),
            deadline_s=30,
            what="attach",
            transient=_created_meanwhile if create and location.is_postgres else is_transient,
        )
    except duckdb.Error as exc:
        if location.is_postgres and not location.data_path:
            raise LakeError(
                f"cannot attach lake {location.describe()}: {exc}. A new PostgreSQL-catalog "
                "lake needs a data path: add ?data_path=DIR_OR_URL to the connection string "
                "or set SPANSCORE_DATA_PATH"
            ) from exc
        raise LakeError(f"cannot attach lake {location.describe()}: {exc}") from exc


def current_snapshot(con: duckdb.DuckDBPyConnection) -> int:
    """The id of the lake's latest snapshot (to pin readers to with `connect(snapshot=...)`)."""
    row = con.execute(f"SELECT id FROM ducklake_current_snapshot({sql_string(ALIAS)})").fetchone()
    assert row is not None
    return int(row[0])


def commits_since(con: duckdb.DuckDBPyConnection, after: int, *, not_by: str) -> list[int] | None:
    """The ids of the lake's snapshots after `after`, in order, but those whose commit message
    names `not_by` as its author (`CALL lake.set_commit_message(author, message)` in the
    transaction): what other processes committed since. None when some of them were expired
    meanwhile (what they inserted can no longer be told from the rest).

    One catalog query, its id filter pushed down to the catalog's own table: it runs at every
    commit of a shared-lake writer. Snapshot ids go up by one per commit and expiry removes the
    oldest, so a gap shows as a first id past `after + 1`; and the current snapshot is never
    expired, so no row at all means nothing was committed since."""
    rows = con.execute(
        "SELECT snapshot_id, author IS NOT DISTINCT FROM ? "
        f"FROM {metadata_catalog(con)}.ducklake_snapshot_changes "
        "WHERE snapshot_id > ? AND (snapshot_id = ? OR author IS DISTINCT FROM ?) "
        "ORDER BY snapshot_id",
        [not_by, after, after + 1, not_by],
    ).fetchall()
    if rows and int(rows[0][0]) != after + 1:
        return None
    return [int(snapshot) for snapshot, own in rows if not own]


# Where each connection finds the lake's catalog tables (`metadata_catalog`), looked up once.
_metadata_catalogs: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def metadata_catalog(con: duckdb.DuckDBPyConnection) -> str:
    """Where DuckDB finds the lake's own catalog tables (DuckLake's specification) on `con`:
    `__ducklake_metadata_lake`, qualified on a PostgreSQL catalog by the schema that holds
    them (`lake_schema` keeps several lakes in one database, and the database's default
    schema is then another lake's, or none)."""
    found = _metadata_catalogs.get(con)
    if found is None:
        schema = postgres_metadata_schema(con)
        found = METADATA if schema is None else f"{METADATA}.{schema}"
        _metadata_catalogs[con] = found
    return found


def postgres_metadata_schema(con: duckdb.DuckDBPyConnection) -> str | None:
    """The PostgreSQL schema holding the lake's catalog tables, quoted; None on a SQLite
    catalog, or when no schema's data path is this lake's. DuckDB lists neither the catalog's
    database nor its tables, so PostgreSQL is asked: of the schemas holding a DuckLake
    catalog, the one whose data path is this lake's."""
    row = con.execute(
        f"SELECT catalog_type, data_path FROM ducklake_settings({sql_string(ALIAS)})"
    ).fetchone()
    if row is None or row[0] != "postgres":
        return None
    data_path = str(row[1])
    tables = (
        "SELECT table_schema FROM information_schema.tables "
        "WHERE table_name = 'ducklake_metadata' ORDER BY table_schema"
    )
    schemas = con.execute("SELECT * FROM postgres_query(?, ?)", [METADATA, tables]).fetchall()
    for (schema,) in schemas:
        quoted = quote_identifier(str(schema))
        query = f"SELECT value FROM {quoted}.ducklake_metadata WHERE key = 'data_path'"
        path = con.execute("SELECT * FROM postgres_query(?, ?)", [METADATA, query]).fetchone()
        if len(schemas) == 1 or (path is not None and path[0] == data_path):
            return quoted
    return None  # its queries then fail with DuckDB's own error, naming the table


def side_cursor(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A cursor of `con` for statements that read registered Arrow tables: its default catalog
    is DuckDB's own, not the lake's, so registering a table and looking a name up do not read
    the lake's catalog (on `con`, a `register` costs about 12 ms of CPU and every statement
    that names anything about 4 ms; here 0.3 ms). Statements on it name lake tables in full
    (`lake.<table>`, `ALIAS`). Its write transactions take the lake's commit turn, as `con`'s
    do (`locks.commit_turn`): use it, not `con.cursor()`, for a cursor that writes."""
    cur = con.cursor()
    turn = turn_of(con)
    if turn is not None:
        register_turn(cur, turn)
    return cur


def append_rows(con: duckdb.DuckDBPyConnection, table_name: str, table: pa.Table) -> None:
    """Append an Arrow table to a lake table in one transaction (retried while the catalog is
    busy). Columns are named, so a migration may have added columns anywhere."""
    cur = side_cursor(con)

    def write() -> None:
        cur.register("spanscore_rows", table)
        try:
            cur.execute("BEGIN TRANSACTION")
            try:
                columns = ", ".join(quote_identifier(n) for n in table.column_names)
                cur.execute(
                    f"INSERT INTO {ALIAS}.{quote_identifier(table_name)} ({columns}) "
                    f"SELECT {columns} FROM spanscore_rows"
                )
                cur.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    cur.execute("ROLLBACK")
                raise
        finally:
            cur.unregister("spanscore_rows")

    try:
        retrying(write, con=cur, what=f"write {table_name}")
    finally:
        cur.close()


def memory_in_use(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Bytes DuckDB's buffer manager holds for this database (what `memory_limit` bounds), by
    what holds them (`BASE_TABLE`, `EXTERNAL_FILE_CACHE`, ...; only those holding some)."""
    rows = con.execute(
        "SELECT tag, memory_usage_bytes FROM duckdb_memory() WHERE memory_usage_bytes > 0"
    ).fetchall()
    return {str(tag): int(size) for tag, size in rows}


def query(
    con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | dict[str, object] | None = None
) -> Iterator[dict[str, Any]]:
    """Run one statement with bound parameters and yield each row as a dict."""
    cursor = con.execute(sql, params) if params is not None else con.execute(sql)
    if cursor.description is None:
        return
    names = [d[0] for d in cursor.description]
    while True:
        rows = cursor.fetchmany(1024)
        if not rows:
            return
        for row in rows:
            yield dict(zip(names, row, strict=True))
