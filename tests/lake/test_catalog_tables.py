"""The DuckLake catalog tables that erasure edits directly (`spanscore.lake.lifecycle.catalog`)
are the DuckLake in use's: a DuckLake upgrade that renames or drops one of them, or one of their
columns, fails here by name, not silently in an erasure that leaves a deleted value behind."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from spanscore import lake
from spanscore.lake.lifecycle.catalog import CATALOG_COLUMNS


def test_the_catalog_tables_erasure_edits_have_the_columns_it_names(tmp_path: Path) -> None:
    lake.connect(str(tmp_path / "lake"), create=True).close()
    catalog = sqlite3.connect(tmp_path / "lake" / "catalog.sqlite")
    try:
        found = {
            table: {row[1] for row in catalog.execute(f"PRAGMA table_info({table})")}
            for table in CATALOG_COLUMNS
        }
    finally:
        catalog.close()
    missing = {
        table: sorted(set(columns) - found[table])
        for table, columns in CATALOG_COLUMNS.items()
        if set(columns) - found[table]
    }
    assert not missing, (
        f"DuckLake's catalog changed: {missing} (tables or columns that "
        "spanscore.lake.lifecycle.catalog edits after an erasure are gone; update it)"
    )
