"""Which tools the failed assertions are about: for every score that failed, the tools whose
calls it marked (not expected, not allowed, breaking a rule) or found missing, read from the
same marks the conversation view shows (`marks.score_marks`). A failed score that marks no
tool (a response check, a judged rubric, a goal) is counted as such."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from spanscore.evaluation.report.marks import score_marks
from spanscore.evaluation.report.schema import (
    ConversationDetailDoc,
    MarkDoc,
    MissingDoc,
    ToolFailureDoc,
    ToolFailuresDoc,
)
from spanscore.evaluation.report.values import json
from spanscore.evaluation.runs.store import ScoreRecord
from spanscore.evaluation.trajectory.model import ToolCall

_EXAMPLES = 5  # conversation ids kept per cell


@dataclass
class _Cell:
    conversations: set[str] = field(default_factory=set)
    examples: list[str] = field(default_factory=list)
    marks: dict[str, int] = field(default_factory=dict)


class ToolFailures:
    def __init__(self) -> None:
        self.cells: dict[tuple[str, str | None, str], _Cell] = {}
        self.failed = 0
        self.unmarked = 0

    def add(
        self,
        conversation_id: str,
        calls: Sequence[ToolCall] | None,
        scores: Sequence[ScoreRecord],
        detail: ConversationDetailDoc | None = None,
    ) -> None:
        """The failed scores of one conversation (`calls` None: its trajectory is gone). The
        marks are read from its `detail` when it was embedded (made from the same scores),
        else placed here."""
        placed: dict[int, tuple[list[MarkDoc], list[MissingDoc]]] = {}
        if detail is not None:
            for mark in detail["marks"]:
                placed.setdefault(mark["score"], ([], []))[0].append(mark)
            for gone in detail["missing"]:
                placed.setdefault(gone["score"], ([], []))[1].append(gone)
        for k, s in enumerate(scores):
            if s.passed is not False:
                continue
            self.failed += 1
            involved: dict[str, dict[str, int]] = {}
            if calls is not None:
                marks, missing = (
                    placed.get(k, ([], []))
                    if detail is not None
                    else score_marks(calls, k, json(s.details))
                )
                for m in marks:
                    if m["kind"] != "matched":
                        kinds = involved.setdefault(calls[m["call"]].name, {})
                        kinds[m["kind"]] = kinds.get(m["kind"], 0) + 1
                for gone in missing:
                    kinds = involved.setdefault(gone["name"], {})
                    kinds["missing"] = kinds.get("missing", 0) + 1
            if not involved:
                self.unmarked += 1
            for tool, kinds in involved.items():
                cell = self.cells.setdefault((tool, s.scenario_id, s.metric), _Cell())
                if conversation_id not in cell.conversations:
                    cell.conversations.add(conversation_id)
                    if len(cell.examples) < _EXAMPLES:
                        cell.examples.append(conversation_id)
                for kind, n in kinds.items():
                    cell.marks[kind] = cell.marks.get(kind, 0) + n

    def doc(self) -> ToolFailuresDoc:
        cells: list[ToolFailureDoc] = [
            {
                "tool": tool,
                "scenario_id": scenario,
                "metric": metric,
                "conversations": len(cell.conversations),
                "marks": dict(sorted(cell.marks.items())),
                "conversation_ids": cell.examples,
            }
            for (tool, scenario, metric), cell in self.cells.items()
        ]
        cells.sort(
            key=lambda c: (-c["conversations"], c["tool"], c["scenario_id"] or "", c["metric"])
        )
        return {"cells": cells, "failed_scores": self.failed, "unmarked": self.unmarked}
