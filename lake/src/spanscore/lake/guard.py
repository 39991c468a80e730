"""SQL that must change nothing: what a person types into `spanscore sql` (without `--write`)
and what a model sends through `spanscore mcp`.

The guard is the lake attached read-only (`connect(read_only=True)`): any statement that would
write the lake fails, with `refusal`'s words. A model's SQL gets two more locks, since the text
that steers a model may come from a conversation (prompt injection):

- `seal`: the connection reaches no file outside the lake's data directory (no `COPY ... TO`
  elsewhere, no `read_csv` of a local file, no `ATTACH` of another database) and its settings
  are frozen. An embedded lake
  only: a shared lake's catalog and data are reached over the network, which the seal would cut.
- `one_read_statement`: exactly one statement, and a query (SELECT, its shorthands FROM, SHOW,
  DESCRIBE, SUMMARIZE, PRAGMA that reads) or EXPLAIN: no DETACH, SET, CALL or transaction
  control on a connection the other requests share.
"""

from __future__ import annotations

import duckdb

from spanscore.lake.location import ALIAS, REMOTE_SCHEMES

_READ_ONLY_ERROR = "read-only mode"
_READ_TYPES = (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN)


class GuardError(ValueError):
    """SQL the guard does not run (why, in words for whoever sent it)."""


def refusal(exc: Exception, how_to_write: str | None) -> str:
    """DuckDB's error, with what to do when it refused a write on the read-only lake
    (`how_to_write`: how to open it read-write, if the caller may; None: it may not)."""
    text = str(exc)
    if _READ_ONLY_ERROR not in text:
        return text
    if how_to_write:
        return f"{text}\nThe lake is opened read-only: {how_to_write}."
    return f"{text}\nThe lake is opened read-only here: this SQL can only read."


def seal(con: duckdb.DuckDBPyConnection) -> bool:
    """Close `con`'s way to files outside the lake and freeze its settings, when the lake's
    catalog and data are local files (see the module doc). Returns whether it did."""
    row = con.execute(
        "SELECT catalog_type, data_path FROM ducklake_settings(?)", [ALIAS]
    ).fetchone()
    if row is None or row[0] != "sqlite" or str(row[1]).lower().startswith(REMOTE_SCHEMES):
        return False
    # The lake's own data files stay readable; nothing else is.
    con.execute("SET allowed_directories = [?]", [str(row[1])])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return True


def one_read_statement(con: duckdb.DuckDBPyConnection, sql: str) -> str:
    """`sql` when it is exactly one query or EXPLAIN (see the module doc); GuardError if not,
    or if it does not parse."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise GuardError(str(exc)) from None
    if len(statements) != 1:
        raise GuardError(f"give exactly one SQL statement, not {len(statements)}")
    kind = statements[0].type
    if kind not in _READ_TYPES:
        raise GuardError(
            f"only a query (SELECT, FROM, WITH, SHOW, DESCRIBE, SUMMARIZE) or EXPLAIN runs "
            f"here, and the lake is read-only: this statement is {kind.name}"
        )
    return sql
