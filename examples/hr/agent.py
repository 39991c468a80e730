"""The HR agent of the watsonx time-off example: two tools over a tiny directory, and plans.

Run with `ScriptedAgent(HRStore(), tracer, agent=AGENT, tool_definitions=TOOL_DEFINITIONS)`
from the customer-service example: the same span shapes, another agent.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from spanscore.examples.customer_service.scripted import Conversation, Turn
from spanscore.examples.customer_service.store import ToolError

AGENT = "hr_agent"
SCENARIO = "timeoff_schedule"  # the dataset's file name: the imported scenario's id

TOOL_DEFINITIONS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "get_assignment_id_hr_agent",
        "description": "Get the assignment id of an employee by username",
        "parameters": {
            "type": "object",
            "properties": {"username": {"type": "string"}},
            "required": ["username"],
        },
    },
    {
        "type": "function",
        "name": "get_timeoff_schedule_hr_agent",
        "description": "List an assignment's days off between two dates (YYYY-MM-DD)",
        "parameters": {
            "type": "object",
            "properties": {
                "assignment_id": {"type": "string"},
                "start_date": {"type": "string"},
                "end_date": {"type": "string"},
            },
            "required": ["assignment_id", "start_date", "end_date"],
        },
    },
]

_ASSIGNMENTS = {"nwaters": "15778303", "jdoe": "15778999"}
_DAYS_OFF = {"15778303": ["2025-01-05", "2025-02-14"], "15778999": ["2025-01-20"]}


class HRStore:
    """The two HR tools."""

    def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        if tool == "get_assignment_id_hr_agent":
            username = arguments.get("username", "")
            if username not in _ASSIGNMENTS:
                raise ToolError(f"no employee {username}")
            return {"assignment_id": _ASSIGNMENTS[username]}
        if tool == "get_timeoff_schedule_hr_agent":
            days = _DAYS_OFF.get(str(arguments.get("assignment_id")))
            if days is None:
                raise ToolError(f"no assignment {arguments.get('assignment_id')}")
            start = dt.date.fromisoformat(arguments["start_date"])
            end = dt.date.fromisoformat(arguments["end_date"])
            return [d for d in days if start <= dt.date.fromisoformat(d) <= end]
        raise ToolError(f"unknown tool {tool!r}")

    def expected_code(self, email: str) -> str:
        return ""


_ASK = "I want to know my time off schedule"
_ID = ("get_assignment_id_hr_agent", {"username": "nwaters"})
_SCHEDULE = (
    "get_timeoff_schedule_hr_agent",
    {"assignment_id": "15778303", "start_date": "2025-01-01", "end_date": "2025-01-30"},
)
_ANSWER = "Your time off schedule is on January 5, 2025."


def _plan(
    cid: str, steps: list[list[tuple[str, dict[str, Any]]]], reply: str, note: str = ""
) -> Conversation:
    turns = [
        Turn(_ASK, [], "Sure. What is your username, and which dates?"),
        Turn("My username is nwaters, from 2025-01-01 to 2025-01-30.", steps, reply),
    ]
    return Conversation(
        cid, SCENARIO, turns, note=note, user_id="nwaters", breaks_policy=bool(note)
    )


def conversations() -> list[Conversation]:
    """The correct journey, then one wrong journey per way to fail it."""
    wrong_dates = ("get_timeoff_schedule_hr_agent", {**_SCHEDULE[1], "end_date": "2025-01-31"})
    return [
        _plan("hr-timeoff-1", [[_ID], [_SCHEDULE]], _ANSWER),
        _plan("hr-wrong-args", [[_ID], [wrong_dates]], _ANSWER, "asks for the wrong end date"),
        _plan("hr-missing-step", [[_SCHEDULE]], _ANSWER, "never looks the assignment id up"),
        _plan("hr-wrong-order", [[_SCHEDULE], [_ID]], _ANSWER, "looks the id up after using it"),
        _plan(
            "hr-wrong-summary",
            [[_ID], [_SCHEDULE]],
            "You have no time off planned in January.",
            "summarizes the schedule wrongly",
        ),
    ]
