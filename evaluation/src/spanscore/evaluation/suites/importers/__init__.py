"""Importers: other evaluation tools' test files, read as spanscore suites.

Usage::

    from spanscore.evaluation.suites.importers import import_file, to_yaml
    result = import_file("arksim", "scenarios.json")
    print(to_yaml(result))                 # a commented suite file
    load_suite("scenarios.json")           # or use the native file directly as a suite

Formats (`FORMATS`): `arksim` (ArkSim scenarios.json), `watsonx` (watsonx Orchestrate
ground-truth datasets: one file or a directory), `tool_selection` (tool-selection tester
datasets and result files), `adk` (Google ADK eval sets and `.test.json` files), `agentevals`
(LangChain agentevals reference trajectories: OpenAI message lists with match modes),
`tau_bench` (tau-bench tasks: gold `actions` and `outputs`) and `tau2` (tau2-bench `tasks.json`:
`evaluation_criteria` by `reward_basis`). The tau formats take `options` (`read_only_tools`,
`write_tools`) for tools outside the benchmarks' published domains, and fill
`ImportResult.users` with each task's simulated user.

Every imported scenario keeps its source id and selects the conversations whose span attribute
`scenario.id` equals it. Where the source system's semantics differ from spanscore's, the import
keeps the source's documented behaviour and says what differs in `notes` (suite-wide) and
`scenario_notes` (per scenario); `to_yaml` writes both as comments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from spanscore.evaluation.suites.importers._common import ImporterError, ImportResult, read_json

__all__ = [
    "FORMATS",
    "NO_EXPECTATION",
    "ImportResult",
    "ImporterError",
    "convert",
    "detect",
    "detect_path",
    "import_file",
    "to_yaml",
]


Converter = Callable[..., ImportResult]


def _converters() -> dict[str, tuple[Callable[[Any], bool], Converter]]:
    from spanscore.evaluation.suites.importers import (
        adk,
        agentevals,
        arksim,
        tau2,
        tau_bench,
        tool_selection,
        watsonx,
    )

    return {
        module.FORMAT: (module.detect, module.convert)
        for module in (arksim, watsonx, tool_selection, adk, agentevals, tau_bench, tau2)
    }


FORMATS: tuple[str, ...] = (
    "arksim",
    "watsonx",
    "tool_selection",
    "adk",
    "agentevals",
    "tau_bench",
    "tau2",
)
TAKES_OPTIONS = ("tau_bench", "tau2")


def detect(data: Any) -> str | None:
    """The format a parsed document is in, or None (for example a spanscore suite)."""
    if isinstance(data, dict) and "name" in data and "scenarios" in data:
        scenarios = data.get("scenarios")
        if isinstance(scenarios, list) and all(
            isinstance(s, dict) and "id" in s for s in scenarios
        ):
            return None  # a spanscore suite
    for name, (is_format, _) in _converters().items():
        if is_format(data):
            return name
    return None


def detect_path(path: str | Path) -> str | None:
    """The format of a file (parsed as JSON or YAML) or of a directory of watsonx datasets."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if files and all(detect(read_json(f)) == "watsonx" for f in files):
            return "watsonx"
        return None
    return detect(read_json(path))


def convert(
    fmt: str, data: Any, path: str | Path, options: Mapping[str, Any] | None = None
) -> ImportResult:
    """Convert an already parsed document of format `fmt` (read from `path`: ids and
    categories may come from the file name). `options` are the format's import options."""
    converters = _converters()
    if fmt not in converters:
        raise ImporterError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if options and fmt not in TAKES_OPTIONS:
        raise ImporterError(f"{path}: the {fmt} format takes no import options")
    if fmt in TAKES_OPTIONS:
        result = converters[fmt][1](data, Path(path), options)
    else:
        result = converters[fmt][1](data, Path(path))
    result.format = fmt
    result.source = Path(path).name
    return _no_scenario_without_a_row(result)


def import_file(
    fmt: str | None, path: str | Path, options: Mapping[str, Any] | None = None
) -> ImportResult:
    """Read a native file (or, for watsonx, a directory of datasets) as a suite. A format
    `fmt` of None or "auto" is detected from the file's shape."""
    path = Path(path)
    if not path.exists():
        raise ImporterError(f"{path}: file not found")
    if fmt in (None, "auto"):
        fmt = detect_path(path)
        if fmt is None:
            raise ImporterError(
                f"{path}: not a file of any known format ({', '.join(FORMATS)}); "
                "name the format explicitly"
            )
    if path.is_dir():
        if fmt != "watsonx":
            raise ImporterError(f"{path}: a directory can only be imported as watsonx datasets")
        from spanscore.evaluation.suites.importers import watsonx

        result = watsonx.read_directory(path)
        result.format, result.source = fmt, path.name
        return _no_scenario_without_a_row(result)
    return convert(fmt, read_json(path), path, options)


# What an imported scenario with nothing to check scores: a passing row, so that in `scores` a
# scenario that ran and had nothing to check differs from one that selected no conversation.
NO_EXPECTATION: dict[str, Any] = {
    "type": "tool_calls",
    "name": "no_expectation",
    "mode": "contains",
    "expected": [],
}


def _no_scenario_without_a_row(result: ImportResult) -> ImportResult:
    for item in result.suite.get("scenarios", []):
        if not item.get("assertions"):
            item["assertions"] = [dict(NO_EXPECTATION)]
            result.note(
                str(item.get("id")),
                "the source sets no expectation for this scenario; it scores one passing "
                "`no_expectation` row per conversation it selects.",
            )
    return result


# --- writing ----------------------------------------------------------------------------------

_SOURCES = {
    "arksim": "ArkSim scenarios file",
    "watsonx": "watsonx Orchestrate ground-truth dataset(s)",
    "tool_selection": "tool-selection tester dataset",
    "adk": "Google ADK eval set",
    "agentevals": "LangChain agentevals reference trajectory",
    "tau_bench": "tau-bench task file",
    "tau2": "tau2-bench tasks file",
}


def _comment(text: str, indent: str = "") -> str:
    lines = []
    for paragraph in text.splitlines() or [""]:
        words, line = paragraph.split(), ""
        for word in words:
            if line and len(indent) + 2 + len(line) + 1 + len(word) > 98:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return "".join(f"{indent}# {line}".rstrip() + "\n" for line in lines)


def _dump(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, width=96)


def to_yaml(result: ImportResult) -> str:
    """The imported suite as a YAML suite file, commented: where it came from, and per scenario
    how its semantics differ from the source's."""
    source = _SOURCES.get(result.format, result.format or "another tool's file")
    out = [
        _comment(
            f"Imported by `spanscore import {result.format}` from the {source} "
            f"{result.source}. Each scenario selects the conversations whose span attribute "
            "scenario.id equals its id."
        )
    ]
    for note in result.notes:
        out.append(_comment(note))
    suite = dict(result.suite)
    scenarios = suite.pop("scenarios", [])
    out.append(_dump(suite))
    if scenarios:
        out.append("scenarios:\n")
        for scenario in scenarios:
            for note in result.scenario_notes.get(str(scenario.get("id")), []):
                out.append(_comment(note, "  "))
            body = _dump([scenario])
            out.append(
                "".join(f"  {line}" if line.strip() else line for line in body.splitlines(True))
            )
    return "".join(out)
