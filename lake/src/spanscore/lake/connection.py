"""Opening the lake: where it is, loading DuckDB's extensions, attaching, migrating, retrying."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import importlib.util
import logging
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import duckdb

from . import schema

log = logging.getLogger("spanscore.lake")

ALIAS = "lake"
# Where DuckLake attaches the lake's catalog database (its own tables, in its specification).
_METADATA = f"__ducklake_metadata_{ALIAS}"
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
    A PostgreSQL URI may carry parameters of ours: `data_path` (where new data files go;
    required when the lake is created), `lake_schema` (the PostgreSQL schema holding the
    catalog, so that one database can hold several lakes) and the object-store settings
    `s3_endpoint`, `s3_region`, `s3_url_style`, `s3_use_ssl` (see `S3Settings`).
    """

    catalog: str  # the part after "ducklake:"
    data_path: str | None
    metadata_schema: str | None = None
    directory: Path | None = None
    s3: S3Settings | None = None

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
            ours = {k: v for k, v in params if k in _OUR_PARAMETERS}
            rest = [(k, v) for k, v in params if k not in ours]
            dsn = urlunsplit(parts._replace(query=urlencode(rest)))
            return cls(
                catalog="postgres:" + dsn,
                data_path=data_path
                or ours.get("data_path")
                or os.environ.get("SPANSCORE_DATA_PATH"),
                metadata_schema=ours.get("lake_schema"),
                s3=S3Settings.from_environment(ours),
            )
        if text.startswith("postgres:"):
            return cls(
                catalog=text,
                data_path=data_path or os.environ.get("SPANSCORE_DATA_PATH"),
                s3=S3Settings.from_environment({}),
            )
        directory = Path(text).expanduser().resolve()
        if directory.is_file():
            hint = (
                f"use --lake {directory.parent}"
                if directory.name == "catalog.sqlite"
                else "give the lake's directory (it holds catalog.sqlite and data/)"
            )
            raise LakeError(f"--lake {text} is a file, not a lake directory: {hint}")
        return cls(
            catalog=f"sqlite:{directory / 'catalog.sqlite'}",
            data_path=data_path or str(directory / "data") + os.sep,
            directory=directory,
            s3=S3Settings.from_environment({}),  # for data given to object storage
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


_OUR_PARAMETERS = (
    "data_path",
    "lake_schema",
    "s3_endpoint",
    "s3_region",
    "s3_url_style",
    "s3_use_ssl",
)

# Where object-store data paths start; a lake whose data is there needs httpfs.
REMOTE_SCHEMES = ("s3://", "s3a://", "s3n://", "r2://", "gcs://", "gs://", "https://", "http://")


@dataclass(frozen=True)
class S3Settings:
    """How DuckDB reaches S3-compatible object storage for a lake's data files.

    Each setting comes from the lake URI's parameter (`s3_endpoint=...`), else the environment
    variable `SPANSCORE_S3_<NAME>`, else the usual AWS variable:

    - `endpoint`: `host:port` or a URL of an S3-compatible server (`AWS_ENDPOINT_URL_S3`,
      `AWS_ENDPOINT_URL`); a URL's scheme sets `use_ssl`. Unset: AWS S3.
    - `region`: `AWS_REGION`, `AWS_DEFAULT_REGION`.
    - `url_style`: `vhost` (AWS's default) or `path` (most self-hosted servers).
    - `use_ssl`: `true` unless the endpoint URL is `http://` or this says `false`.

    Credentials come only from the environment, never from the URI: `AWS_ACCESS_KEY_ID`,
    `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`). Without them spanscore creates no secret
    of its own, and DuckDB uses a persistent secret of yours (`CREATE PERSISTENT SECRET ...
    (TYPE s3, ...)`) or, with settings given, the AWS credential chain (profiles, instance
    roles).
    """

    endpoint: str | None = None
    region: str | None = None
    url_style: str | None = None
    use_ssl: bool | None = None
    key_id: str | None = field(default=None, repr=False)
    secret: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @classmethod
    def from_environment(
        cls, parameters: dict[str, str], environ: dict[str, str] | None = None
    ) -> S3Settings:
        env = os.environ if environ is None else environ

        def pick(name: str, *aws: str) -> str | None:
            for value in (
                parameters.get(f"s3_{name}"),
                env.get(f"SPANSCORE_S3_{name.upper()}"),
                *(env.get(a) for a in aws),
            ):
                if value:
                    return value.strip()
            return None

        endpoint = pick("endpoint", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
        use_ssl_text = pick("use_ssl")
        use_ssl: bool | None = None
        if endpoint and "://" in endpoint:
            scheme, _, rest = endpoint.partition("://")
            use_ssl = scheme.lower() == "https"
            endpoint = rest.rstrip("/")
        if use_ssl_text is not None:
            use_ssl = use_ssl_text.lower() in ("1", "true", "yes", "on")
        url_style = pick("url_style")
        if url_style is not None and url_style not in ("path", "vhost"):
            raise LakeError(f"s3_url_style must be 'path' or 'vhost', not {url_style!r}")
        return cls(
            endpoint=endpoint,
            region=pick("region", "AWS_REGION", "AWS_DEFAULT_REGION"),
            url_style=url_style,
            use_ssl=use_ssl,
            key_id=env.get("AWS_ACCESS_KEY_ID") or None,
            secret=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
        )

    @property
    def configured(self) -> bool:
        return any(
            v is not None for v in (self.endpoint, self.region, self.url_style, self.use_ssl)
        ) or bool(self.key_id)

    def secret_sql(self) -> str | None:
        """The `CREATE SECRET` statement for these settings (holds credentials: never log it)."""
        if not self.configured:
            return None
        options = ["TYPE s3"]
        if self.key_id:
            options += ["PROVIDER config", f"KEY_ID {_sql_string(self.key_id)}"]
            options.append(f"SECRET {_sql_string(self.secret or '')}")
            if self.session_token:
                options.append(f"SESSION_TOKEN {_sql_string(self.session_token)}")
        else:
            options.append("PROVIDER credential_chain")
        if self.endpoint:
            options.append(f"ENDPOINT {_sql_string(self.endpoint)}")
        if self.region:
            options.append(f"REGION {_sql_string(self.region)}")
        if self.url_style:
            options.append(f"URL_STYLE {_sql_string(self.url_style)}")
        if self.use_ssl is not None:
            options.append(f"USE_SSL {'true' if self.use_ssl else 'false'}")
        return f"CREATE OR REPLACE SECRET spanscore_s3 ({', '.join(options)})"


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


def is_interrupt(exc: BaseException) -> bool:
    """Ctrl-C, also when it arrived during a DuckDB query: DuckDB then raises its own error
    ("Query interrupted"), caused by the KeyboardInterrupt."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt | duckdb.InterruptException):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def retrying(
    fn: Callable[[], T],
    *,
    con: duckdb.DuckDBPyConnection | None = None,
    deadline_s: float = 60.0,
    what: str = "lake transaction",
    transient: Callable[[BaseException], bool] = is_transient,
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
            if not transient(exc) or time.monotonic() - start > deadline_s:
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
        load_extension(con, "postgres_scanner" if location.is_postgres else "sqlite_scanner")
        load_extension(con, "ducklake")
        if location.is_postgres or _is_remote(location.data_path):
            _configure_object_store(con, location)
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


def _created_meanwhile(exc: BaseException) -> bool:
    """Transient, or lost the race to create a new PostgreSQL catalog: processes started
    together on a fresh shared lake all create its tables, and PostgreSQL refuses all but one
    (a duplicate type or table). Attaching again opens the catalog the winner created."""
    text = str(exc)
    return is_transient(exc) or (
        "duplicate key value violates unique constraint" in text or "already exists" in text
    )


def _is_remote(path: str | None) -> bool:
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
        options.append(f"DATA_PATH {_sql_string(location.data_path)}")
    if location.metadata_schema:
        options.append(f"METADATA_SCHEMA {_sql_string(location.metadata_schema)}")
    if read_only:
        options.append("READ_ONLY")
    clause = f" ({', '.join(options)})" if options else ""
    sql = f"ATTACH {_sql_string('ducklake:' + location.catalog)} AS {ALIAS}{clause}"
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
    row = con.execute(f"SELECT id FROM ducklake_current_snapshot({_sql_string(ALIAS)})").fetchone()
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
        f"FROM {_METADATA}.ducklake_snapshot_changes "
        "WHERE snapshot_id > ? AND (snapshot_id = ? OR author IS DISTINCT FROM ?) "
        "ORDER BY snapshot_id",
        [not_by, after, after + 1, not_by],
    ).fetchall()
    if rows and int(rows[0][0]) != after + 1:
        return None
    return [int(snapshot) for snapshot, own in rows if not own]


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


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
            con.execute(f"COMMENT ON VIEW {quoted} IS {_sql_string(_view_mark(body))}")


def _view_marks(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    return dict(
        con.execute(
            "SELECT view_name, comment FROM duckdb_views() "
            "WHERE database_name = ? AND schema_name = 'main'",
            [ALIAS],
        ).fetchall()
    )


def _has_views(marks: dict[str, str], views: dict[str, str]) -> bool:
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
    if _has_views(_view_marks(con), schema.VIEWS):
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
        marks = _view_marks(con)
        if _has_views(marks, schema.VIEWS) or _has_views(marks, schema.VIEWS_WITHOUT_LOG_RECORDS):
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


# Compaction leaves alone files of this size or more: the collector's commits write small
# files, and a merged file past this size is done (a run then rewrites at most this much of
# older data, whatever the lake's size).
MERGE_BELOW_BYTES = 4 << 20
# Compaction writes files of about this size (the lake's `target_file_size`), one at a time:
# each merge step, and so each pause of the collector's writer, rewrites at most this much.
# Past MERGE_BELOW_BYTES, so that a merged file is not merged again. At 32 MiB a file holds one
# row group of about 100,000 spans, where a conversation usually has several spans: DuckDB then
# writes `conversation_id` with a dictionary, and so with a bloom filter, and a query for one
# conversation skips the files without it (bench/query.py; at 16 MiB, half the files had none,
# at 8 MiB none did).
MERGED_FILE_BYTES = 32 << 20
# Files in the data path that no snapshot knows are deleted once this old, whatever the
# retention: a transaction in flight (another collector's commit, an evaluation writing its
# scores) has written its files and not yet their rows, so until it commits they look
# orphaned too. No transaction lasts this long; a crashed one's files cost a day's space.
ORPHANS_KEPT_S = 24 * 3600.0


def side_cursor(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A cursor of `con` for statements that read registered Arrow tables: its default catalog
    is DuckDB's own, not the lake's, so registering a table and looking a name up do not read
    the lake's catalog (on `con`, a `register` costs about 12 ms of CPU and every statement
    that names anything about 4 ms; here 0.3 ms). Statements on it name lake tables in full
    (`lake.<table>`, `ALIAS`)."""
    return con.cursor()


def maintain(
    con: duckdb.DuckDBPyConnection,
    *,
    expire_older_than_s: float = 3600.0,
    delete_older_than_s: float = 3600.0,
    exclusive: Callable[[], contextlib.AbstractContextManager[object]] | None = None,
    step_deadline_s: float = 60.0,
    merge_below_bytes: int = MERGE_BELOW_BYTES,
    merged_file_bytes: int = MERGED_FILE_BYTES,
    store_settled_after_s: float | None = None,
    store_deadline_s: float | None = None,
    sort_spans: bool | None = None,
    compact_only: bool = False,
    orphans_kept_s: float = ORPHANS_KEPT_S,
) -> dict[str, int]:
    """Compact small data files, expire old snapshots and delete files nobody can read any more;
    given `store_settled_after_s`, first store the trajectories of the conversations without a
    new span for that long (`stored.store_trajectories`, for at most `store_deadline_s`).

    `sort_spans` (by default, on an embedded lake) compacts `spans` and `logs` by rewriting
    their small files in order of conversation and time (`_sort_small_files`), in row groups
    of `SORTED_ROW_GROUP_SPANS`, so that one conversation is read from a row group or two
    instead of every row group its rows are strewn over (`span_files_sorted`,
    `log_files_sorted`, `sort_steps`). The rewrite deletes and inserts, which conflicts with
    any insert committed meanwhile: on an embedded lake the one collector is held off
    (`exclusive`), on a shared lake other collectors could not be, and DuckLake's merge (which
    conflicts with no insert, and keeps rows as they are) compacts them like the other tables.

    `compact_only`: compaction alone, which a busy collector runs between two whole runs
    (its `compact_after_commits`), so that queries never open more small files than that.

    Compaction merges only files smaller than `merge_below_bytes`: without that bound, the
    file the last run made was merged again with the new ones every time, so each run
    rewrote everything written so far and held the writer longer and longer (the soak: 2 s
    after 2 minutes, 10 s after 9). And it writes one file of about `merged_file_bytes` per
    step: merging a run's worth of small files in one step held the writer for seconds (the
    soak: 1.5 to 4 s each minute at 2,000 spans/s, 470 files into one), a step per merged
    file holds it a fraction of that each time, and lets it commit in between.

    Safe while others write: each step is its own DuckLake transaction and is retried on
    conflict. Each step conflicts with commits made while it runs, though, and a writer that
    commits every few milliseconds made them fail again and again (compaction included: run
    beside such a writer, files and snapshots still grew): `exclusive`, when given, is entered
    around each step to hold such a writer off (the collector passes its writer's `paused`),
    so that the step completes and the writer resumes between steps. A step still
    failing after `step_deadline_s` (another process holds the catalog) raises: the caller
    tries again later rather than hold its writer any longer.

    Snapshots a running evaluation pinned (and newer ones) are not expired, however old: the
    run reads its window at that snapshot, in every worker, for as long as it runs; and no
    file is deleted while it runs (`deletion_deferred`: its queries may be reading files
    compaction just replaced).

    Returns what each step did: `spans_resolved` (spans given the conversation of their
    trace, `schema.RESOLVE_CONVERSATIONS`), `records_resolved` (log records given their
    span's, `schema.RESOLVE_RECORDS`), `rows_flushed` (inlined rows written to files),
    `files_merged` and `files_created` (compaction), `snapshots_expired`, `files_deleted`
    (of expired snapshots) and `orphans_deleted` (files of transactions that never committed,
    once older than `orphans_kept_s`: younger ones may be a commit in flight's);
    what storing trajectories did (`conversations_stored`, ..., `store_failed`);
    and how long each kind of step took in all, in milliseconds (`merge_files_ms`, ...), with
    `merge_steps` and `longest_step_ms`: the longest the writer was held off at once; and
    `look_for_unresolved_ms`, what looking for spans and records to resolve took, without
    holding the writer.
    """
    done: dict[str, int] = {"longest_step_ms": 0}

    def step(sql: str | Callable[[], list[tuple[Any, ...]]], what: str) -> list[tuple[Any, ...]]:
        started = time.monotonic()
        run = sql if callable(sql) else lambda: con.execute(sql).fetchall()
        with exclusive() if exclusive is not None else contextlib.nullcontext():
            rows: list[tuple[Any, ...]] = retrying(
                run, con=con, deadline_s=step_deadline_s, what=what
            )
        # How long the step held the writer off: the pause it adds to ingest.
        took = round((time.monotonic() - started) * 1000)
        key = what.replace(" ", "_") + "_ms"
        done[key] = done.get(key, 0) + took
        done["longest_step_ms"] = max(done["longest_step_ms"], took)
        return rows

    def total(rows: list[tuple[Any, ...]], column: int) -> int:
        return sum(int(r[column] or 0) for r in rows)

    # Spans whose conversation no collector knew when it stored them (a trace split between
    # collectors, a root exported long after its children): looked for without holding the
    # writer, resolved with it held.
    spans = f"{ALIAS}.spans"  # a cursor does not inherit the connection's USE
    looking = time.monotonic()
    unresolved = (
        None
        if compact_only
        else con.execute(schema.UNRESOLVED_SPANS.format(spans=spans)).fetchone()
    )
    done["look_for_unresolved_ms"] = round((time.monotonic() - looking) * 1000)
    done["spans_resolved"] = 0
    if unresolved and unresolved[0]:
        resolve = schema.RESOLVE_ALL_CONVERSATIONS.format(spans=spans)
        done["spans_resolved"] = total(step(resolve, "resolve conversations"), 0)
    # Then log records stored before their span, or before their trace's conversation was
    # known, by a collector that did not see both: only in a lake whose views read records.
    done["records_resolved"] = 0
    if not compact_only and _has_views(_view_marks(con), schema.VIEWS):
        tables = {"logs": f"{ALIAS}.logs", "spans": spans}
        looking = time.monotonic()
        unresolved = con.execute(schema.UNRESOLVED_RECORDS.format(**tables)).fetchone()
        done["look_for_unresolved_ms"] += round((time.monotonic() - looking) * 1000)
        if unresolved and unresolved[0]:
            resolve = schema.RESOLVE_RECORDS.format(**tables)
            done["records_resolved"] = total(step(resolve, "resolve records"), 0)
    # Before compaction, which then merges the files this writes. Not under `exclusive`: it
    # writes only `trajectory_steps`, so it does not conflict with the writer's commits. Its
    # failure costs readers time, never correctness, so compaction goes on without it.
    if store_settled_after_s is not None and not compact_only:
        from .stored import store_trajectories

        try:
            done |= store_trajectories(
                con,
                settled_after_s=store_settled_after_s,
                step_deadline_s=step_deadline_s,
                deadline_s=store_deadline_s,
            )
        except duckdb.Error as exc:
            if is_interrupt(exc):
                raise
            done["store_failed"] = 1
            log.warning("storing trajectories failed (maintenance goes on): %s", exc)
    # flush: (schema, table, rows_flushed); merge: (schema, table, files_processed,
    # files_created); expire: one row per snapshot; cleanup and orphans: one row per file.
    flushed = step(f"CALL ducklake_flush_inlined_data('{ALIAS}')", "flush inlined data")
    done["rows_flushed"] = total(flushed, 2)
    sorting = sort_spans if sort_spans is not None else _lake_settings(con)[0] == "sqlite"

    def set_options() -> list[tuple[Any, ...]]:
        # what one compaction step writes
        _set_option(con, "target_file_size", merged_file_bytes, unit="B")
        if sorting:
            for table in SORTED_TABLES:
                _set_option(con, "parquet_row_group_size", SORTED_ROW_GROUP_SPANS, table=table)
        return []

    # A step like the others: setting an option is a commit, which a writer committing every
    # few milliseconds keeps from the SQLite catalog ("database is locked").
    step(set_options, "set options")
    done["span_files_sorted"] = done["log_files_sorted"] = done["sort_steps"] = 0
    for table in SORTED_TABLES if sorting else ():
        while True:  # one step per merged file, until fewer than two small files are left
            [(files,)] = step(
                partial(_sort_small_files, con, table, merge_below_bytes, merged_file_bytes),
                f"sort {table}",
            )
            done["sort_steps"] += 1
            done[{"spans": "span_files_sorted", "logs": "log_files_sorted"}[table]] += files
            if not files:
                break
    done["files_merged"] = done["files_created"] = done["merge_steps"] = 0
    while True:  # one merged file per table and step; ends when a step finds nothing to merge
        merged = step(
            f"CALL ducklake_merge_adjacent_files('{ALIAS}', "
            f"max_file_size => {int(merge_below_bytes)}, max_compacted_files => 1)",
            "merge files",
        )
        done["merge_steps"] += 1
        done["files_merged"] += total(merged, 2)
        done["files_created"] += total(merged, 3)
        if total(merged, 2) == 0:
            break
    if compact_only:
        return done
    expirable = _expirable_snapshots(con, expire_older_than_s)
    done["snapshots_expired"] = (
        len(
            step(
                f"CALL ducklake_expire_snapshots('{ALIAS}', versions => {expirable})",
                "expire snapshots",
            )
        )
        if expirable
        else 0
    )
    # While an evaluation runs, no file is deleted: compaction points every snapshot at the
    # merged file at once, but a query that listed the old files before goes on reading them,
    # and a run's query may last longer than any retention (the soak: 72 s against a minute).
    done["deletion_deferred"] = int(_evaluation_running(con))
    done["files_deleted"] = (
        0
        if done["deletion_deferred"]
        else len(
            _delete_old_files(con, delete_older_than_s, lambda sql: step(sql, "delete old files"))
        )
    )
    done["orphans_deleted"] = len(
        step(
            f"CALL ducklake_delete_orphaned_files('{ALIAS}', "
            f"older_than => now() - INTERVAL {int(orphans_kept_s)} SECOND)",
            "delete orphaned files",
        )
    )
    return done


def _delete_old_files(
    con: duckdb.DuckDBPyConnection,
    older_than_s: float,
    run: Callable[[str], list[tuple[Any, ...]]],
) -> list[str]:
    """Delete the data files compaction and expiry replaced more than `older_than_s` ago (a
    reader that listed them before may still be reading them); returns their paths.

    DuckLake's `ducklake_cleanup_old_files` does this right on a PostgreSQL catalog. On the
    embedded lake's SQLite catalog it compares `older_than` with each file's `schedule_start`
    as text (`2026-11-24 10:15...` against `2026-11-24T09:15...`), so every file scheduled on
    the same day as `older_than`, even hours after it, is deleted at once. There, the times
    are compared here, and the files deleted here: DuckLake's table of files scheduled for
    deletion is part of its specification, and deleting a file and then its row, as DuckLake
    does, is safe to repeat after a crash. Data files on object storage (a SQLite catalog with
    an S3 data path), which only DuckLake can delete, are given to it with a cutoff its text
    comparison cannot get wrong: the end of the day two days before `older_than`, so they
    are deleted up to two days later than the retention asks."""
    catalog_type, data_path = _lake_settings(con)
    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=older_than_s)
    if catalog_type != "sqlite":
        return [
            str(r[0])
            for r in run(
                f"CALL ducklake_cleanup_old_files('{ALIAS}', "
                f"older_than => now() - INTERVAL {int(older_than_s)} SECOND)"
            )
        ]
    if _is_remote(data_path):
        # Two days back: `schedule_start` may be written in a local time zone.
        day = cutoff.replace(hour=0, minute=0, second=0, microsecond=0) - dt.timedelta(days=1)
        return [
            str(r[0])
            for r in run(
                f"CALL ducklake_cleanup_old_files('{ALIAS}', "
                f"older_than => '{(day - dt.timedelta(microseconds=1)).isoformat()}'::TIMESTAMPTZ)"
            )
        ]
    scheduled = f"{_METADATA}.ducklake_files_scheduled_for_deletion"
    # Read whole and compared here: a filter on `schedule_start` reaches SQLite as text.
    due = [
        (int(file_id), str(path) if not relative else data_path + str(path))
        for file_id, path, relative, scheduled_at in con.execute(
            f"SELECT data_file_id, path, path_is_relative, schedule_start FROM {scheduled}"
        ).fetchall()
        if _catalog_time(scheduled_at) < cutoff
    ]
    if not due:
        return []
    for _, path in due:
        with contextlib.suppress(FileNotFoundError):  # deleted before a crash, not its row
            os.remove(path)
    ids = ", ".join(str(file_id) for file_id, _ in due)
    run(f"DELETE FROM {scheduled} WHERE data_file_id IN ({ids})")
    return [path for _, path in due]


def _lake_settings(con: duckdb.DuckDBPyConnection) -> tuple[str, str]:
    """The lake's catalog type (`sqlite`, `postgres`, ...) and data path."""
    row = con.execute(
        f"SELECT catalog_type, data_path FROM ducklake_settings({_sql_string(ALIAS)})"
    ).fetchone()
    assert row is not None
    return str(row[0]), str(row[1])


def _catalog_time(value: object) -> dt.datetime:
    """A time as the SQLite catalog holds it (`2026-11-24 10:15:00.123+00`), in UTC."""
    moment = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    if moment.tzinfo is None:  # DuckDB writes an offset; without one, take it for UTC
        moment = moment.replace(tzinfo=dt.UTC)
    return moment


def memory_in_use(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Bytes DuckDB's buffer manager holds for this database (what `memory_limit` bounds), by
    what holds them (`BASE_TABLE`, `EXTERNAL_FILE_CACHE`, ...; only those holding some)."""
    rows = con.execute(
        "SELECT tag, memory_usage_bytes FROM duckdb_memory() WHERE memory_usage_bytes > 0"
    ).fetchall()
    return {str(tag): int(size) for tag, size in rows}


# Spans per row group of the files compaction sorts: one conversation then reads about this
# many spans of each wide column (bench/query.py). Log records too.
SORTED_ROW_GROUP_SPANS = 16_384

# The tables compaction sorts on an embedded lake, and their order: by conversation first, so
# that a filter on one prunes row groups (log records carry their span's, `RESOLVE_RECORDS`).
SORTED_TABLES = {
    "spans": "conversation_id, start_time_unix_nano, span_id",
    "logs": "conversation_id, time_unix_nano, span_id",
}


def _sort_small_files(
    con: duckdb.DuckDBPyConnection, table: str, below_bytes: int, up_to_bytes: int
) -> list[tuple[Any, ...]]:
    """One transaction: the oldest small files of `table` (under `below_bytes`, at least two,
    together about `up_to_bytes`) rewritten as one, their rows in `SORTED_TABLES` order.
    Returns [(files rewritten,)], 0 when fewer than two were small.

    A rewrite, not DuckLake's sorted merge: that renumbered the rows it moved (row ids are
    what DuckLake's deletes name rows by), and readers missed conversations while it ran. Here
    the rows are deleted from the old files and inserted into the new one in one snapshot:
    a reader sees either, and a new row gets a new row id."""
    con.execute("BEGIN")
    # Oldest first: DuckLake names files by UUIDv7, which begins with the time it was made.
    small = con.execute(
        f"SELECT data_file, data_file_size_bytes FROM ducklake_list_files({_sql_string(ALIAS)}, "
        f"{_sql_string(table)}) WHERE data_file_size_bytes < ? ORDER BY data_file",
        [below_bytes],
    ).fetchall()
    chosen: list[str] = []
    size = 0
    for path, file_bytes in small:
        chosen.append(str(path))
        size += int(file_bytes)
        if size >= up_to_bytes:
            break
    if len(chosen) < 2:
        con.execute("COMMIT")
        return [(0,)]
    files = ", ".join(_sql_string(path) for path in chosen)
    rows = f"{ALIAS}.{table}"
    con.execute(
        f"INSERT INTO {rows} BY NAME SELECT * FROM {rows} WHERE filename IN ({files}) "
        f"ORDER BY {SORTED_TABLES[table]}"
    )
    con.execute(f"DELETE FROM {rows} WHERE filename IN ({files})")
    con.execute("COMMIT")
    return [(len(chosen),)]


def _set_option(
    con: duckdb.DuckDBPyConnection, option: str, value: int, *, table: str = "", unit: str = ""
) -> None:
    """A DuckLake option of the lake, or of one `table`, given in `unit` and read back as a
    plain number (set only when it differs: options are kept in the catalog, and setting one
    is a commit)."""
    scope = f"scope_entry = 'main.{table}'" if table else "scope = 'GLOBAL'"
    row = con.execute(
        f"SELECT value FROM ducklake_options({_sql_string(ALIAS)}) "
        f"WHERE option_name = ? AND {scope}",
        [option],
    ).fetchone()
    if row is None or str(row[0]) != str(value):
        on_table = f", table_name => {_sql_string(table)}" if table else ""
        con.execute(
            f"CALL {ALIAS}.set_option({_sql_string(option)}, '{int(value)}{unit}'{on_table})"
        )


# A run still `running` after this long is taken for dead (killed before it could say so)
# and no longer holds snapshots back.
PINNED_SNAPSHOT_HOURS = 24
# The evaluations running now, as maintenance sees them.
_RUNNING_EVALUATIONS = f"""{ALIAS}.eval_runs
    WHERE status = 'running' AND started_at > now() - INTERVAL {PINNED_SNAPSHOT_HOURS} HOUR"""


def _expirable_snapshots(con: duckdb.DuckDBPyConnection, older_than_s: float) -> list[int]:
    """The snapshots to expire: older than `older_than_s`, never the latest, and older than
    any a running evaluation pinned (`details.snapshot` of its `eval_runs` row), which it reads
    in every worker for as long as it runs. (Ids, not `older_than =>`: DuckLake 1.5 expired
    snapshots newer than the time it was given.)"""
    snapshots = f"ducklake_snapshots({_sql_string(ALIAS)})"
    row = con.execute(
        f"""WITH pinned AS (
            SELECT min(TRY_CAST(json_extract_string(details, '$.snapshot') AS BIGINT)) AS id
            FROM {_RUNNING_EVALUATIONS}
        )
        SELECT list(snapshot_id ORDER BY snapshot_id) FROM {snapshots}
        WHERE snapshot_time < now() - INTERVAL {int(older_than_s)} SECOND
            AND snapshot_id < (SELECT max(snapshot_id) FROM {snapshots})
            AND snapshot_id < coalesce((SELECT id FROM pinned), 9223372036854775807)"""
    ).fetchone()
    return list(row[0]) if row and row[0] else []


def _evaluation_running(con: duckdb.DuckDBPyConnection) -> bool:
    row = con.execute(f"SELECT count(*) FROM {_RUNNING_EVALUATIONS}").fetchone()
    return bool(row and row[0])


@contextlib.contextmanager
def single_writer(location: LakeLocation, what: str = "collector") -> Iterator[None]:
    """Hold an embedded lake for one writing service (a collector), or refuse at once.

    An embedded lake's SQLite catalog is single-host, and one collector per lake is what its
    group commit is sized for: a second one is refused with a message that says what to do. The
    lock is an OS file lock, so it goes with the process however that ends. A lake with a
    PostgreSQL catalog takes any number of collectors, and this does nothing.
    """
    if location.directory is None:
        yield
        return
    import fcntl

    location.directory.mkdir(parents=True, exist_ok=True)
    path = location.directory / f"{what}.lock"
    handle = path.open("a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise LakeError(
                f"another {what} is already running on the embedded lake {location.directory} "
                "(its SQLite catalog serves one host and one collector): stop it, or put the "
                "catalog on PostgreSQL (--lake postgresql://...) to run several collectors"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        handle.close()


def _lock_key(location: LakeLocation, name: str) -> int:
    import hashlib

    digest = hashlib.sha256(f"spanscore:{name}:{location.metadata_schema or ''}".encode())
    return int.from_bytes(digest.digest()[:8], "big", signed=True)


@contextlib.contextmanager
def elected(location: LakeLocation, name: str = "maintenance") -> Iterator[bool]:
    """Whether this process is the one to do `name` now (yields True), or another one is.

    On a PostgreSQL catalog the election is a session advisory lock in the catalog's database,
    taken without waiting and held until the block ends (or the process dies: PostgreSQL
    releases it with the connection). An embedded lake has one collector: always elected.
    """
    if not location.is_postgres:
        yield True
        return
    import psycopg

    dsn = location.catalog.removeprefix("postgres:")
    key = _lock_key(location, name)
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as pg:
        row = pg.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()
        won = bool(row and row[0])
        try:
            yield won
        finally:
            if won:
                with contextlib.suppress(psycopg.Error):
                    pg.execute("SELECT pg_advisory_unlock(%s)", [key])


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
