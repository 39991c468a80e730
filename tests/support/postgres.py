"""The PostgreSQL server the shared-lake tests keep their catalogs in, and whether it is there.

`SPANSCORE_TEST_POSTGRES` names the server (default: the local one on port 5432, user
postgres); tests that need it skip when it does not answer.
"""

from __future__ import annotations

import os
from typing import Any

import duckdb

from spanscore import lake

POSTGRES_SERVER = os.environ.get("SPANSCORE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")


def postgres_connection(dbname: str = "postgres") -> Any:
    """An autocommit psycopg connection to `dbname` on `POSTGRES_SERVER`."""
    import psycopg

    return psycopg.connect(f"{POSTGRES_SERVER}/{dbname}", autocommit=True, connect_timeout=5)


def postgres_available() -> str | None:
    """None if DuckDB reaches database 'test' on the local server, else why not (a skip
    reason)."""
    try:
        con = duckdb.connect()
        lake.load_extension(con, "postgres_scanner")
        con.execute("ATTACH 'postgresql://postgres@127.0.0.1:5432/test' AS pg (TYPE postgres)")
        con.close()
        return None
    except Exception as exc:
        return f"no PostgreSQL server on 127.0.0.1:5432 with database 'test' ({exc})"
