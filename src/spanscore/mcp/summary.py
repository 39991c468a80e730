"""One conversation summarised for a model's context: per turn the user's message, the tool calls
(name, short arguments, short result, error), the model calls counted (their errors shown), the
final answer; then its scores, labels and what else there is. Every value is cut at the
summary's limit and every cut is stated; `conversation_full` and `conversation_spans` give the
rest."""

from __future__ import annotations

from typing import Any

from .fit import Clipper

# A tool call's arguments and result are context for its name and error: shorter than a message.
CALL_SHARE = 0.5


def summarise(
    view: dict[str, Any], clip: Clipper, turn_offset: int, max_turns: int, max_steps: int
) -> dict[str, Any]:
    """The summary of `review.conversation_view`'s document (read with no value cut)."""
    detail = view.get("detail") or {}
    turns = detail.get("turns") or []
    shown = turns[turn_offset : turn_offset + max_turns]
    call_chars = max(40, int(clip.max_chars * CALL_SHARE))
    out_turns = []
    for position, turn in enumerate(shown):
        at = f"data.turns[{position}]"
        steps: list[dict[str, Any]] = []
        model_calls = 0
        for step in turn["steps"]:
            where = f"{at}.steps[{len(steps)}]"
            if step["kind"] == "tool_call":
                call: dict[str, Any] = {
                    "tool": step["name"],
                    "arguments": clip.json_text(
                        step["arguments"], f"{where}.arguments", call_chars
                    ),
                    "result": clip.json_text(step["result"], f"{where}.result", call_chars),
                }
                if step["error"] is not None:
                    call["error"] = clip.text(str(step["error"]), f"{where}.error")
                steps.append(call)
            elif step["kind"] == "model_call":
                model_calls += 1
                if step["error"] is not None:
                    steps.append(
                        {
                            "model_error": clip.text(str(step["error"]), f"{where}.error"),
                            "model": step["name"],
                        }
                    )
            else:
                steps.append({"handoff": {"from": step["from_agent"], "to": step["to_agent"]}})
        out_turns.append(
            {
                "turn": turn["index"],
                "user_message": clip.json_text(turn["user_message"], f"{at}.user_message"),
                "steps": clip.items(steps, f"{at}.steps", max_steps),
                "model_calls": model_calls,
                "final_answer": clip.json_text(turn["final_response"], f"{at}.final_answer"),
            }
        )
    scores = [
        {
            "run_id": s["run_id"],
            "suite": s["suite_name"],
            "scenario_id": s["scenario_id"],
            "metric": s["metric"],
            "value": s["value"],
            "label": s["label"],
            "passed": s["passed"],
            "threshold": s["threshold"],
            "explanation": s["explanation"],
            "error": s["error"],
        }
        for s in view["scores"]
    ]
    labels = [
        {
            k: label.get(k)
            for k in (
                "reviewer",
                "metric",
                "run_id",
                "passed",
                "value",
                "label",
                "judge_agreed",
                "comment",
                "created_at",
            )
        }
        for label in view["labels"]
    ]
    simulation = view.get("simulation")
    return {
        "conversation_id": view["conversation_id"],
        "agent": detail.get("agent"),
        "service": detail.get("service"),
        "start": detail.get("start"),
        "duration_ms": detail.get("duration_ms"),
        "span_count": view["span_count"],
        "warnings": clip.fit(detail.get("warnings") or [], "data.warnings"),
        "turns_total": len(turns),
        "turns_shown": [turn_offset, turn_offset + len(shown)],
        "turns": out_turns,
        "runs": view["runs"],
        "scores": clip.fit(scores, "data.scores"),
        "labels": clip.fit(labels, "data.labels"),
        "label_history": len(view["label_history"]),
        "simulated": simulation is not None,
    }
