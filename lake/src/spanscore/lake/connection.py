"""Opening the lake: where it is, loading DuckDB's extensions, attaching, migrating, retrying."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import duckdb

from . import schema

log = logging.getLogger("spanscore.lake")

ALIAS = "lake"
T = TypeVar("T")


class LakeError(Exception):
    """The lake cannot be opened or used; the message says why and what to do."""


class LakeVersionError(LakeError):
    """The lake was written by a newer spanscore, or is not a spanscore lake."""


@dataclass(frozen=True)
class LakeLocation:
    """Where a lake lives: its DuckLake catalog and its data files.

    `spec` is a directory (embedded: `<dir>/catalog.sqlite` + `<dir>/data/`) or a PostgreSQL
    connection string (`postgresql://user@host:5432/db` or `postgres:dbname=db host=...`).
    A PostgreSQL URI may carry two parameters of ours: `data_path` (where new data files go;
    required when the lake is created) and `lake_schema` (the PostgreSQL schema holding the
    catalog, so that one database can hold several lakes).
    """

    catalog: str  # the part after "ducklake:"
    data_path: str | None
    metadata_schema: str | None = None
    directory: Path | None = None

    @property
    def is_postgres(self) -> bool:
        return self.catalog.startswith("postgres:")

    @classmethod
    def parse(cls, spec: str | os.PathLike[str], data_path: str | None = None) -> LakeLocation:
        text = os.fspath(spec).strip()
        if not text:
            raise LakeError("no lake given: pass --lake DIR or set SPANSCORE_LAKE")
        if text.startswith(("postgresql://", "postgres://")):
            parts = urlsplit(text)
            params = parse_qsl(parts.query, keep_blank_values=True)
            ours = {k: v for k, v in params if k in ("data_path", "lake_schema")}
            rest = [(k, v) for k, v in params if k not in ours]
            dsn = urlunsplit(parts._replace(query=urlencode(rest)))
            return cls(
                catalog="postgres:" + dsn,
                data_path=data_path
                or ours.get("data_path")
                or os.environ.get("SPANSCORE_DATA_PATH"),
                metadata_schema=ours.get("lake_schema"),
            )
        if text.startswith("postgres:"):
            return cls(
                catalog=text,
                data_path=data_path or os.environ.get("SPANSCORE_DATA_PATH"),
            )
        directory = Path(text).expanduser().resolve()
        return cls(
            catalog=f"sqlite:{directory / 'catalog.sqlite'}",
            data_path=data_path or str(directory / "data") + os.sep,
            directory=directory,
        )

    def describe(self) -> str:
        """A printable name with no password in it."""
        if self.directory is not None:
            return str(self.directory)
        parts = urlsplit(self.catalog.removeprefix("postgres:"))
        if parts.password:
            netloc = parts.netloc.replace(":" + parts.password + "@", ":***@")
            return "postgres:" + urlunsplit(parts._replace(netloc=netloc))
        return self.catalog


# Extension name -> the PyPI wheel's import name that carries the signed binary.
_EXTENSION_WHEELS = {
    "ducklake": "duckdb_extension_ducklake",
    "sqlite_scanner": "duckdb_extension_sqlite_scanner",
    "postgres_scanner": "duckdb_extension_postgres_scanner",
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


def _prepare_sqlite_catalog(path: Path, create: bool) -> None:
    """Create the catalog file in WAL mode: readers then never block the writer (or vice versa).

    WAL is a property of the database file, so every later client (DuckDB's sqlite extension,
    the plain duckdb CLI) uses it too.
    """
    if path.exists():
        return
    if not create:
        raise LakeError(f"no lake at {path.parent} (start `spanscore serve --lake {path.parent}`)")
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA journal_mode=WAL")
    finally:
        con.close()


def is_transient(exc: BaseException) -> bool:
    """Errors that a retry can clear: catalog locks and DuckLake commit conflicts."""
    text = str(exc)
    return isinstance(exc, duckdb.Error) and any(
        marker in text
        for marker in (
            "database is locked",
            "Failed to commit DuckLake transaction",
            "Transaction conflict",
            "conflict",
            "could not serialize access",
            "deadlock detected",
            "SQLITE_BUSY",
            "Current transaction is aborted",  # a conflict inside a DuckLake maintenance call
        )
    )


def retrying(
    fn: Callable[[], T],
    *,
    con: duckdb.DuckDBPyConnection | None = None,
    deadline_s: float = 60.0,
    what: str = "lake transaction",
) -> T:
    """Run `fn` (one whole transaction) again with jittered backoff while it fails transiently.

    DuckLake retries snapshot-id conflicts itself; what reaches us is a locked SQLite catalog
    (SQLite answers SQLITE_BUSY at once, without waiting) or a conflict that outlived DuckLake's
    own retries. `fn` must be safe to re-run from the start; a failed attempt is rolled back.
    """
    start = time.monotonic()
    delay = 0.005
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except duckdb.Error as exc:
            if con is not None:
                with contextlib.suppress(duckdb.Error):
                    con.execute("ROLLBACK")
            if not is_transient(exc) or time.monotonic() - start > deadline_s:
                raise
            if attempt in (1, 10, 100):
                log.debug("%s: transient failure, retrying (attempt %d): %s", what, attempt, exc)
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.5)


def connect(
    spec: str | os.PathLike[str] | LakeLocation,
    *,
    create: bool = False,
    read_only: bool = False,
    data_path: str | None = None,
    threads: int | None = None,
    snapshot: int | None = None,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the lake attached as `lake` (and selected), schema checked.

    `snapshot` attaches the lake read-only as it was at that snapshot (`current_snapshot`):
    several connections, even in several processes, then read exactly the same data while
    writers go on committing.

    `create=True` creates a missing lake; otherwise a missing lake is an error that says what to
    run. A lake written by an older spanscore is migrated when opened read-write. The
    connection is an in-memory DuckDB: temporary tables and registered Arrow tables stay out
    of the lake.
    """
    location = spec if isinstance(spec, LakeLocation) else LakeLocation.parse(spec, data_path)
    config: dict[str, str | bool | int | float | list[str]] = {
        "allow_unsigned_extensions": False,
    }
    if threads is not None:
        config["threads"] = threads
    con = duckdb.connect(config=config)
    try:
        con.execute("SET enable_progress_bar = false")  # it would print into query output
        load_extension(con, "postgres_scanner" if location.is_postgres else "sqlite_scanner")
        load_extension(con, "ducklake")
        con.execute("SET ducklake_max_retry_count = 100")
        con.execute("SET ducklake_retry_wait_ms = 20")
        con.execute("SET ducklake_retry_backoff = 1.5")
        if location.directory is not None:
            _prepare_sqlite_catalog(location.directory / "catalog.sqlite", create)
        _attach(con, location, create=create, read_only=read_only, snapshot=snapshot)
        con.execute(f"USE {ALIAS}")
        ensure_schema(
            con, create=create, migrate=not read_only and snapshot is None, location=location
        )
    except Exception:
        con.close()
        raise
    return con


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
        options.append(f"DATA_PATH {_sql_string(location.data_path)}")
    if location.metadata_schema:
        options.append(f"METADATA_SCHEMA {_sql_string(location.metadata_schema)}")
    if read_only:
        options.append("READ_ONLY")
    clause = f" ({', '.join(options)})" if options else ""
    sql = f"ATTACH {_sql_string('ducklake:' + location.catalog)} AS {ALIAS}{clause}"
    try:
        retrying(lambda: con.execute(sql), deadline_s=30, what="attach")
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
    row = con.execute(f"SELECT id FROM ducklake_current_snapshot({_sql_string(ALIAS)})").fetchone()
    assert row is not None
    return int(row[0])


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _lake_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main'",
        [ALIAS],
    ).fetchall()
    return {r[0] for r in rows}


def schema_version(con: duckdb.DuckDBPyConnection) -> int | None:
    """The lake's schema version, or None for an empty lake."""
    if "spanscore_schema" not in _lake_tables(con):
        return None
    row = con.execute("SELECT max(version) FROM spanscore_schema").fetchone()
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
    version = schema_version(con)
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
        return version
    if version is None and not create:
        raise LakeError(f"{where} is empty: start `spanscore serve` on it first")
    if version is not None and not migrate:
        raise LakeError(
            f"{where} has schema version {version} and this spanscore needs "
            f"{schema.SCHEMA_VERSION}: open it once read-write (for example `spanscore sql "
            "--lake ... 'SELECT 1'`) to migrate it"
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
        for name, body in schema.VIEWS.items():
            con.execute(f"CREATE OR REPLACE VIEW {schema.quote_identifier(name)} AS {body}")
        con.execute(
            "INSERT INTO spanscore_schema VALUES (?, now(), ?)",
            [schema.SCHEMA_VERSION, _package_version()],
        )
        con.execute("COMMIT")
        log.info("lake schema at version %d (was %s)", schema.SCHEMA_VERSION, current or "empty")
        return schema.SCHEMA_VERSION

    return retrying(apply, con=con, what="schema migration")


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spanscore-lake")
    except PackageNotFoundError:
        return "unknown"


def maintain(
    con: duckdb.DuckDBPyConnection,
    *,
    expire_older_than_s: float = 3600.0,
    delete_older_than_s: float = 3600.0,
) -> dict[str, int]:
    """Compact small data files, expire old snapshots and delete files nobody can read any more.

    Safe while others write: each step is its own DuckLake transaction and is retried on
    conflict. Returns what each step did: `rows_flushed` (inlined rows written to files),
    `files_merged` and `files_created` (compaction), `snapshots_expired`, `files_deleted`
    (of expired snapshots) and `orphans_deleted` (files of transactions that never committed).
    """
    done: dict[str, int] = {}

    def step(sql: str, what: str) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = retrying(
            lambda: con.execute(sql).fetchall(), con=con, what=what
        )
        return rows

    def total(rows: list[tuple[Any, ...]], column: int) -> int:
        return sum(int(r[column] or 0) for r in rows)

    # flush: (schema, table, rows_flushed); merge: (schema, table, files_processed,
    # files_created); expire: one row per snapshot; cleanup and orphans: one row per file.
    flushed = step(f"CALL ducklake_flush_inlined_data('{ALIAS}')", "flush inlined data")
    done["rows_flushed"] = total(flushed, 2)
    merged = step(f"CALL ducklake_merge_adjacent_files('{ALIAS}')", "merge files")
    done["files_merged"] = total(merged, 2)
    done["files_created"] = total(merged, 3)
    done["snapshots_expired"] = len(
        step(
            f"CALL ducklake_expire_snapshots('{ALIAS}', "
            f"older_than => now() - INTERVAL {int(expire_older_than_s)} SECOND)",
            "expire snapshots",
        )
    )
    done["files_deleted"] = len(
        step(
            f"CALL ducklake_cleanup_old_files('{ALIAS}', "
            f"older_than => now() - INTERVAL {int(delete_older_than_s)} SECOND)",
            "delete old files",
        )
    )
    done["orphans_deleted"] = len(
        step(
            f"CALL ducklake_delete_orphaned_files('{ALIAS}', "
            f"older_than => now() - INTERVAL {int(delete_older_than_s)} SECOND)",
            "delete orphaned files",
        )
    )
    return done


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
