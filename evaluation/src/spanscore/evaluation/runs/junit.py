"""A run as JUnit XML, for CI systems: one test case per scenario and metric."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from spanscore.evaluation.runs.result import RunResult
from spanscore.evaluation.runs.store import ScoreRecord, scores_of_run
from spanscore.evaluation.suites.loaded import LoadedSuite


def _scenario(score: ScoreRecord) -> str:
    return score.scenario_id if score.scenario_id is not None else "(suite metrics)"


def junit_xml(
    con: duckdb.DuckDBPyConnection,
    suite: LoadedSuite,
    run_id: str,
    path: str | Path,
    result: RunResult | None = None,
) -> None:
    """The run's scores as JUnit XML: one testsuite per scenario, one testcase per
    conversation and metric (failure: not passed; error: no score could be given). With the
    run's result, a testsuite `(run)` holds its warnings (skipped, or failures in strict
    mode), what else failed it (too few conversations) and its gates."""
    from xml.etree import ElementTree as ET

    root = ET.Element("testsuites", name=suite.name)
    suites: dict[str, ET.Element] = {}
    counts: dict[str, list[int]] = {}
    scores = sorted(
        scores_of_run(con, run_id),
        key=lambda s: (_scenario(s), s.conversation_id, s.metric),
    )
    for s in scores:
        scenario = _scenario(s)
        if scenario not in suites:
            suites[scenario] = ET.SubElement(root, "testsuite", name=scenario)
            counts[scenario] = [0, 0, 0]
        case = ET.SubElement(
            suites[scenario],
            "testcase",
            classname=scenario,
            name=f"{s.conversation_id}: {s.metric}",
        )
        counts[scenario][0] += 1
        shown = s.label if s.label is not None else s.value
        if s.error is not None:
            ET.SubElement(case, "error", message=s.error)
            counts[scenario][2] += 1
        elif s.passed is False:
            failure = ET.SubElement(case, "failure", message=f"{s.metric} = {shown}")
            failure.text = s.explanation or ""
            counts[scenario][1] += 1
    if result is not None:
        _junit_run(root, suites, counts, result)
    for scenario, element in suites.items():
        tests, failures, errors = counts[scenario]
        element.set("tests", str(tests))
        element.set("failures", str(failures))
        element.set("errors", str(errors))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def _junit_run(
    root: Any, suites: dict[str, Any], counts: dict[str, list[int]], result: RunResult
) -> None:
    from xml.etree import ElementTree as ET

    name = "(run)"
    element = ET.SubElement(root, "testsuite", name=name)
    suites[name] = element
    counts[name] = [0, 0, 0]
    strict = result.strict

    def case(title: str, failed: bool | None, message: str) -> None:
        item = ET.SubElement(element, "testcase", classname=name, name=title)
        counts[name][0] += 1
        if failed:
            ET.SubElement(item, "failure", message=message)
            counts[name][1] += 1
        elif failed is None:
            ET.SubElement(item, "skipped", message=message)

    for warning in result.warnings:
        case(f"warning: {warning}", True if strict else None, warning)
    for failure in result.failures:
        case(f"run: {failure}", True, failure)
    if result.empty_because:
        case("window", None, f"no conversation in the window: {result.empty_because}")
    for gate in result.gates:
        case(f"gate: {gate.describe()}", not gate.passed, gate.describe())
