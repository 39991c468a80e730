"""The reference of the tables and views, in Markdown, made from their definitions: the tables'
section of docs/reference.md and the MCP server's `spanscore://tables` resource are this text."""

from __future__ import annotations

import duckdb

from spanscore.lake.schema.rules import VIEWS
from spanscore.lake.schema.tables import TABLES, create_table_sql, quote_identifier


def _view_columns() -> dict[str, list[tuple[str, str]]]:
    """Each view's columns and types, as DuckDB derives them from the tables."""
    con = duckdb.connect()
    try:
        for name, columns in TABLES.items():
            con.execute(create_table_sql(name, columns))
        out = {}
        for name, body in VIEWS.items():
            con.execute(f"CREATE VIEW {quote_identifier(name)} AS {body}")
            described = con.execute(f"DESCRIBE {quote_identifier(name)}").fetchall()
            out[name] = [(str(r[0]), str(r[1])) for r in described]
        return out
    finally:
        con.close()


def tables_markdown() -> str:
    """Each table's columns (type, meaning), then each view's columns (type)."""
    parts = []
    for name, columns in TABLES.items():
        parts.append(f"#### `{name}`\n")
        parts.append("| column | type | meaning |\n|---|---|---|")
        parts.extend(f"| `{c.name}` | {c.sql_type} | {c.doc} |" for c in columns)
        parts.append("")
    for view, described in _view_columns().items():
        parts.append(f"#### view `{view}`\n")
        parts.append("| column | type |\n|---|---|")
        parts.extend(f"| `{c}` | {t} |" for c, t in described)
        parts.append("")
    return "\n".join(parts).rstrip()
