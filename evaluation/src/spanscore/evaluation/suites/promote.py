"""Failures become tests: a conversation of the lake becomes a scenario of a suite file
(`spanscore promote`, and the review app's button).

The scenario selects the conversation it came from by its id, expects the tool calls it made
(in order, parallel calls as parallel steps; arguments exact or partial), optionally checks
the final answer's similarity, and has a `user:` block (the goal and the opening from the
first user message, the later user messages as what the user knows) so that `spanscore
simulate` can replay it. It passes on its conversation by construction, and is checked to:
a scenario that would not is refused. Edit its expectations to what the agent should have
done, and it fails until the agent does.

The file is appended to as text (`append`): its comments and order stay byte for byte. The
result is loaded as a suite before it replaces the file, atomically; on any error the file is
unchanged.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import tempfile
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import duckdb
import yaml

from spanscore.evaluation.suites import importers
from spanscore.evaluation.suites.append import AppendError, append_scenario
from spanscore.evaluation.suites.load import Problem, SuiteError, load_suite
from spanscore.evaluation.suites.loaded import LoadedSuite
from spanscore.evaluation.trajectory.load import load_trajectory
from spanscore.evaluation.trajectory.model import ToolCall, Trajectory

ArgumentsMode = Literal["exact", "partial"]

_LONGEST_ID = 80


class PromoteError(ValueError):
    """The conversation cannot be promoted into this suite (unknown conversation, scenario id
    taken, a file that is not a spanscore suite): nothing was written."""


@dataclass(frozen=True)
class Promoted:
    """A promoted scenario: its id and document, the text appended to the suite file, and
    where it starts in the file."""

    scenario_id: str
    scenario: dict[str, Any]
    text: str  # exactly what is (or, in a preview, would be) appended
    path: Path
    line: int | None  # the scenario's first line in the file once written
    written: bool
    conversation_end: dt.datetime | None  # when its last span ended (to evaluate it again)
    notes: list[str] = field(default_factory=list)  # what the scenario could not carry over


# One promotion at a time per process (the review app serves requests on threads): the file is
# read, appended to and replaced as one step.
_WRITING = threading.Lock()


def preview_promotion(
    con: duckdb.DuckDBPyConnection,
    conversation_id: str,
    suite_path: str | Path,
    *,
    scenario_id: str | None = None,
    arguments: ArgumentsMode = "exact",
    response: bool = True,
    allow_outside_metrics: bool = False,
) -> Promoted:
    """What `promote` would append, checked as `promote` checks it, without writing."""
    options = _Options(scenario_id, arguments, response, allow_outside_metrics)
    promoted, _, _ = _prepare(con, conversation_id, Path(suite_path), options)
    return promoted


def promote(
    con: duckdb.DuckDBPyConnection,
    conversation_id: str,
    suite_path: str | Path,
    *,
    scenario_id: str | None = None,
    arguments: ArgumentsMode = "exact",
    response: bool = True,
    allow_outside_metrics: bool = False,
) -> Promoted:
    """Append a scenario made from the conversation to the suite file (see the module doc):
    `scenario_id` (default: made of the conversation id), the tool calls' arguments expected
    `exact` or `partial` (extra keys allowed), a check of the final answer unless `response`
    is false. The suite's custom metric files load as `load_suite` loads them
    (`allow_outside_metrics`).

    Raises `PromoteError` (unknown conversation, scenario id taken, not a spanscore suite
    file, a file whose text cannot be appended to) or `SuiteError` (the suite does not load,
    before or after); the file is then unchanged."""
    path = Path(suite_path)
    options = _Options(scenario_id, arguments, response, allow_outside_metrics)
    with _WRITING:
        promoted, original, new_text = _prepare(con, conversation_id, path, options)
        _replace(path, original, new_text)
    return replace(promoted, written=True)


def scenario_from(
    trajectory: Trajectory,
    scenario_id: str,
    *,
    arguments: ArgumentsMode = "exact",
    response: bool = True,
) -> tuple[dict[str, Any], list[str]]:
    """The scenario document for a conversation, and notes on what it could not carry over."""
    if arguments not in ("exact", "partial"):
        raise PromoteError(f"arguments must be 'exact' or 'partial', not {arguments!r}")
    notes: list[str] = []
    tool_calls: dict[str, Any] = {
        "type": "tool_calls",
        "mode": "strict",
        "expected": _expected_steps(trajectory, notes),
    }
    if arguments == "partial":
        tool_calls["arguments"] = "partial"
    assertions: list[dict[str, Any]] = [tool_calls]
    answer = trajectory.final_response
    if response:
        if answer is not None and answer.strip():
            assertions.append({"type": "response", "expected": answer})
        else:
            notes.append("the conversation has no final answer: no response check")
    scenario: dict[str, Any] = {
        "id": scenario_id,
        "description": f"promoted from conversation {trajectory.conversation_id}",
        "select": {"conversation_id": trajectory.conversation_id},
    }
    said = [t.user_message for t in trajectory.turns if t.user_message]
    if said:
        user: dict[str, Any] = {"goal": said[0], "opening": said[0]}
        if said[1:]:
            user["knowledge"] = said[1:]
        scenario["user"] = user
    else:
        notes.append(
            "the conversation has no user message: no user: block, `spanscore simulate` "
            "cannot replay it"
        )
    scenario["assertions"] = assertions
    return scenario, notes


def default_scenario_id(conversation_id: str, taken: set[str]) -> str:
    """An id made of the conversation id (letters, digits, `-`, `_`, `.`; at most 80
    characters), with `-2`, `-3`... when the suite already has it."""
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", conversation_id).strip("-.")[:_LONGEST_ID]
    base = base or "promoted"
    candidate, n = base, 1
    while candidate in taken:
        n += 1
        candidate = f"{base}-{n}"
    return candidate


# --- the scenario ----------------------------------------------------------------------------


def _expected_steps(trajectory: Trajectory, notes: list[str]) -> list[Any]:
    """The calls made, as expected steps: calls one model response requested together as a
    parallel step (a list), the others one by one."""
    steps: list[Any] = []
    for turn in trajectory.turns:
        calls = turn.tool_calls
        sizes: dict[int, int] = {}
        for call in calls:
            if call.parallel_group is not None:
                sizes[call.parallel_group] = sizes.get(call.parallel_group, 0) + 1
        group: int | None = None
        for call in calls:
            expected = _expected_call(call, notes)
            parallel = call.parallel_group if sizes.get(call.parallel_group or -1, 0) > 1 else None
            if parallel is not None and parallel == group:
                steps[-1].append(expected)
            elif parallel is not None:
                steps.append([expected])
            else:
                steps.append(expected)
            group = parallel
    return steps


def _expected_call(call: ToolCall, notes: list[str]) -> Any:
    if not isinstance(call.arguments, dict):
        if call.arguments is not None:
            notes.append(
                f"the arguments of {call.name!r} are not an object: its name only is expected"
            )
        return call.name
    try:  # plain JSON values only, as a suite file holds
        arguments = json.loads(json.dumps(call.arguments, allow_nan=False))
    except (TypeError, ValueError):
        notes.append(
            f"the arguments of {call.name!r} are not plain JSON: its name only is expected"
        )
        return call.name
    return {"name": call.name, "arguments": arguments}


# --- the file --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Options:
    scenario_id: str | None
    arguments: ArgumentsMode
    response: bool
    allow_outside_metrics: bool


def _prepare(
    con: duckdb.DuckDBPyConnection, conversation_id: str, path: Path, options: _Options
) -> tuple[Promoted, bytes, str]:
    """The promoted scenario, the file's bytes as read, and the file's new text."""
    label = str(path)
    if path.is_dir():
        raise PromoteError(f"{label} is a directory, not a suite file")
    # SuiteError: the file as it is does not load
    loaded = load_suite(path, allow_outside_metrics=options.allow_outside_metrics)
    original = path.read_bytes()
    text = original.decode("utf-8")
    is_json = path.suffix.lower() == ".json"
    fmt = importers.detect(json.loads(text) if is_json else yaml.safe_load(text))
    if fmt is not None:
        raise PromoteError(
            f"{label} is another tool's file ({fmt}), not a spanscore suite: convert it first "
            f"(`spanscore import {fmt} {label} -o suite.yaml`) and promote into that"
        )
    taken = {g.id for g in loaded.suite.groups()}
    scenario_id = options.scenario_id
    if scenario_id is not None:
        scenario_id = scenario_id.strip()
        if not scenario_id or "\n" in scenario_id or "\r" in scenario_id:
            raise PromoteError("the scenario id must be one non-empty line")
        if scenario_id in taken:
            raise PromoteError(f"{label} already has a scenario or policy {scenario_id!r}")
    trajectory = load_trajectory(con, conversation_id)
    if trajectory is None:
        raise PromoteError(f"no conversation {conversation_id!r} in the lake")
    chosen = scenario_id or default_scenario_id(conversation_id, taken)
    scenario, notes = scenario_from(
        trajectory, chosen, arguments=options.arguments, response=options.response
    )
    try:
        insertion = append_scenario(text, scenario, json_file=is_json)
    except AppendError as exc:
        raise PromoteError(f"{label}: {exc}") from None
    new_text = insertion.apply(text)
    checked = _load_text(path, new_text, options.allow_outside_metrics)
    _check_passes(checked, trajectory)
    promoted = Promoted(
        scenario_id=chosen,
        scenario=scenario,
        text=insertion.text,
        path=path,
        line=checked.scenario_lines.get(chosen),
        written=False,
        conversation_end=trajectory.end_time,
        notes=notes,
    )
    return promoted, original, new_text


def _load_text(path: Path, text: str, allow_outside_metrics: bool) -> LoadedSuite:
    """`text` loaded as the suite file at `path` would be (custom metric files relative to the
    same folder), its problems named after `path`."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    temporary = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(text.encode("utf-8"))
        return load_suite(temporary, allow_outside_metrics=allow_outside_metrics)
    except SuiteError as exc:
        label = f"{path} (with the promoted scenario)"
        raise SuiteError(
            [Problem(label, p.line, p.path, p.message) for p in exc.problems]
        ) from None
    finally:
        temporary.unlink(missing_ok=True)


def _check_passes(loaded: LoadedSuite, trajectory: Trajectory) -> None:
    """The promoted scenario (the suite's last) passes on its conversation, or nothing is
    written: a test that fails where it came from tests nothing."""
    scenario = loaded.suite.scenarios[-1]
    failed = []
    for assertion in scenario.assertions:
        score = assertion.evaluate(trajectory, loaded.context)
        if not score.passed:
            failed.append(f"{assertion.metric_name}: {score.explanation or score.error}")
    if failed:
        raise PromoteError(
            f"the scenario made of {trajectory.conversation_id!r} does not pass on it ("
            + "; ".join(failed)
            + "): nothing written"
        )


def _replace(path: Path, original: bytes, text: str) -> None:
    """Write `text` over the file atomically (a temporary file beside it, renamed), unless the
    file changed since it was read."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    temporary = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(text.encode("utf-8"))
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, path.stat().st_mode & 0o7777)
        if path.read_bytes() != original:
            raise PromoteError(f"{path} changed while the scenario was prepared: try again")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
