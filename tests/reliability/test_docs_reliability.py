"""docs/reliability.md cannot drift: every test it cites exists, and its table of limits is
the code's (every limit setting listed, with its real default)."""

from __future__ import annotations

import re
from pathlib import Path

from spanscore.collector import CollectorConfig

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "reliability.md").read_text()
HERE = Path(__file__).resolve().parent


def _cited_tests() -> set[tuple[str, str | None]]:
    cited = set()
    for path, name in re.findall(r"`((?:tests/)?[\w/]+\.py)(?:::(\w+))?`", DOC):
        if path.endswith("fuzz_atheris.py"):
            continue
        cited.add((path, name or None))
    return cited


def test_every_cited_test_exists() -> None:
    cited = _cited_tests()
    assert len(cited) > 30
    missing = []
    for path, name in sorted(cited, key=str):
        file = ROOT / path if path.startswith("tests/") else HERE / path
        if not file.is_file():
            missing.append(path)
        elif name is not None and f"def {name}(" not in file.read_text():
            missing.append(f"{path}::{name}")
    assert not missing, f"docs/reliability.md cites tests that do not exist: {missing}"


def _limits_table() -> dict[str, str]:
    table = DOC.split("<!-- limits -->", 1)[1].split("<!-- /limits -->", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", table, flags=re.MULTILINE)
    return {name: default.strip() for name, default in rows}


def _is_limit(name: str) -> bool:
    return name.startswith(("max_", "queue_")) or name.endswith(("_timeout_s", "_deadline_s"))


def test_the_limits_table_is_the_code() -> None:
    table = _limits_table()
    fields = CollectorConfig.model_fields
    limits = {name for name in fields if _is_limit(name)} | {"dedup_keys", "memory_limit"}
    assert set(table) == limits, "docs/reliability.md: limits missing or unknown"
    for name, documented in table.items():
        assert documented == str(fields[name].default), f"{name}: the documented default"
