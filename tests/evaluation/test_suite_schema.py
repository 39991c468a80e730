"""The published suite schema (`spanscore schema suite`) accepts exactly what the loader
accepts: every suite in the repository and in the docs, every imported native example, and the
shorthands the docs use (a bare tool name as a call, `tool:` for `name:`, a strategy name as a
rule); and it refuses what the loader refuses."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from spanscore.cli import main
from spanscore.evaluation import load_suite, suite_json_schema
from spanscore.evaluation.suites.importers import import_file
from spanscore.evaluation.suites.load import SuiteError
from spanscore.evaluation.suites.model import Suite

ROOT = Path(__file__).resolve().parents[2]
MARKDOWN = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SUITE_FILES = sorted(
    p for pattern in ("*.yaml", "*.yml", "*suite*.json") for p in (ROOT / "examples").rglob(pattern)
)
NATIVE_EXAMPLES = [
    ROOT / "examples" / "customer_service" / "arksim_scenarios.json",
    ROOT / "examples" / "hr" / "timeoff_schedule.json",
]
FENCE = re.compile(r"```(yaml|json)\n(.*?)```", re.S)


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = suite_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def as_suite(block: Any) -> dict[str, Any] | None:
    """A documented block as a whole suite: a suite, a suite without its name, or a list of
    assertions (shown as they appear under `metrics:` or `assertions:`); None: not a suite."""
    if isinstance(block, list) and all(isinstance(a, dict) and "type" in a for a in block):
        return {"name": "documented", "metrics": block}
    if isinstance(block, dict) and block and set(block) <= set(Suite.model_fields):
        return {"name": "documented", **block}
    return None


def documented_suites() -> list[tuple[str, dict[str, Any]]]:
    """Every suite the docs show, but the plugin guide's: it names a plugin that is installed
    only in the environment of its own test (tests/evaluation/test_plugins.py)."""
    found = []
    for md in MARKDOWN:
        if md.name == "plugins.md":
            continue
        text = md.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            suite = as_suite(yaml.safe_load(match.group(2)))
            if suite is not None:
                found.append((f"{md.relative_to(ROOT)}:{line}", suite))
    return found


def repository_suites() -> list[tuple[str, dict[str, Any]]]:
    found = [(str(p.relative_to(ROOT)), yaml.safe_load(p.read_text())) for p in SUITE_FILES]
    for native in NATIVE_EXAMPLES:
        found.append((f"{native.relative_to(ROOT)} (imported)", import_file(None, native).suite))
    return found + documented_suites()


def test_the_documents_are_found():
    names = [name for name, _ in repository_suites()]
    assert "examples/customer_service/suite.yaml" in names
    assert any(n.startswith("README.md:") for n in names)
    assert sum(n.startswith("docs/") for n in names) >= 4


@pytest.mark.parametrize(("name", "suite"), repository_suites(), ids=lambda v: str(v)[:60])
def test_every_suite_of_the_repository_and_docs_fits_the_schema_and_loads(
    validator: jsonschema.Draft202012Validator, name: str, suite: dict[str, Any]
):
    problems = [f"{list(e.absolute_path)}: {e.message[:200]}" for e in validator.iter_errors(suite)]
    assert problems == [], name
    load_suite(suite, name=name, base_dir=ROOT / "examples" / "customer_service")


ACCEPTED: list[Any] = [
    # the shorthands the docs use, and every spelling of a key that has several
    {"type": "tool_calls", "expected": ["get_order", {"tool": "refund", "arguments": {"a": 1}}]},
    {"type": "tool_calls", "expected": [["a", {"name": "b"}], "c"]},
    {"type": "forbidden", "calls": ["delete_account", {"tool": "refund"}]},
    {"type": "tool_calls", "expected": [{"name": "f", "rules": {"id": "ignore"}}]},
    {"type": "tool_calls", "expected": [{"name": "f", "rules": {"id": {"regex": "A-\\d+"}}}]},
    {"type": "tool_calls", "expected": [{"name": "f", "rules": {"n": {"tolerance": 0.5}}}]},
    {
        "type": "tool_call_rubric",
        "expected": ["ping", {"tool_name": "add", "args": {"a": 1}}],
        "critics": [{"type": "binary", "critic_field": "a"}],
    },
]

REFUSED: list[Any] = [
    {"type": "tool_calls", "expected": [{"name": "a", "tool": "b"}]},  # two spellings
    {"type": "tool_calls", "expected": [{"arguments": {}}]},  # no name at all
    {"type": "tool_calls", "expected": [3]},
    {"type": "tool_calls", "expected": ["a"], "mode": "sometimes"},
    {"type": "tool_calls", "expected": [{"name": "f", "rules": {"id": "fuzzy"}}]},
    {
        "type": "tool_calls",
        "expected": [{"name": "f", "rules": {"id": {"pattern": "a", "regex": "b"}}}],
    },
    {"type": "tool_calls", "expected": [{"name": "f", "argumnets": {}}]},
    {"type": "no_such_metric"},
    {"type": "forbidden", "calls": [{"name": "a", "tool": "a"}]},
]


@pytest.mark.parametrize("assertion", ACCEPTED, ids=lambda a: json.dumps(a)[:50])
def test_the_schema_takes_the_shorthands_the_loader_takes(
    validator: jsonschema.Draft202012Validator, assertion: Any
):
    suite = {"name": "s", "metrics": [assertion]}
    load_suite(suite)
    assert list(validator.iter_errors(suite)) == []


@pytest.mark.parametrize("assertion", REFUSED, ids=lambda a: json.dumps(a)[:50])
def test_the_schema_refuses_what_the_loader_refuses(
    validator: jsonschema.Draft202012Validator, assertion: Any
):
    suite = {"name": "s", "metrics": [assertion]}
    with pytest.raises(SuiteError):
        load_suite(suite)
    assert list(validator.iter_errors(suite)) != []


def test_a_suite_without_a_name_is_refused_by_both(validator: jsonschema.Draft202012Validator):
    with pytest.raises(SuiteError, match="name"):
        load_suite({"scenarios": []})
    assert list(validator.iter_errors({"scenarios": []})) != []


def test_the_command_prints_the_schema():
    result = CliRunner().invoke(main, ["schema", "suite"])
    assert result.exit_code == 0
    assert json.loads(result.output) == suite_json_schema()
