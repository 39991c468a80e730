"""watsonx Orchestrate ground-truth datasets: one scenario per dataset file.

A dataset (`agent`, `goals`, `goal_details`, `story`, `starting_sentence`) becomes a scenario
whose id is the file name without `.json`, with a `goals` assertion named `journey_success`
(the goal dependency graph: every tool-call goal made with its arguments, every text goal met,
in an order the graph allows: watsonx's Journey Success) and, when text goals list keywords, a
`response` assertion named `summary_keywords`.

What is kept, and what differs (the adk's agentops `evaluation_package.py`):
- `arg_matching` strict/fuzzy/ignore/optional is passed through; strict is the default.
- watsonx checks the expected arguments and accepts extra actual ones, at every nesting
  level: goals are imported with `match: partial` (expected keys present, extra keys
  allowed, in nested objects too).
- watsonx's code compares strict values as lower-cased text (`str(v).lower()`, lists sorted);
  its documentation says "exact match": spanscore keeps the documented exact comparison.
- fuzzy: watsonx first compares values that read as numbers (within 0.001) or dates (equal);
  a fuzzy argument whose expected value is a number or a date is imported as a `tolerance`
  (0.001) or `datetime` (0 s) rule. Other values become `strategy: judged` rules with
  `threshold` = the dataset's `similarity_threshold` (default 0.8), in watsonx's documented
  order: an LLM semantic match, then embedding cosine, then a fuzzy string ratio, each step
  only when the one before fails. Deliberate differences (noted in the generated suite): the
  embeddings come from the judge's endpoint (`/v1/embeddings`), not all-minilm-l6-v2; the last
  step is spanscore's token similarity against the threshold on a 0-1 scale, where watsonx
  compares fuzzywuzzy's 0-100 WRatio with 0.8 (so any score >= 1 matches there); watsonx
  1.4.9's `_check_args` goes straight to the embeddings for fuzzy arguments, spanscore follows
  the documentation (LLM first).
- `{"IGNORE": null}` as a goal's args ignores every argument; a `<IGNORE>` value ignores one.
- a call is labelled with the first goal of its tool whose arguments match, and the order check
  uses each goal's most recent call; spanscore pairs goals with calls optimally (the most
  goals met, each after the goals it depends on, each call meeting one goal).
- text goals need the keywords and an LLM semantic match in any assistant message; spanscore
  needs the keywords in an answer given after the goals they depend on (no semantic match).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from spanscore.evaluation.suites.importers._common import (
    ImporterError,
    ImportResult,
    fail,
    listing,
    mapping,
    read_json,
    scenario,
    text,
    user_block,
)

FORMAT = "watsonx"
STRATEGIES = ("strict", "fuzzy", "ignore", "optional")
IGNORE_VALUE = "<IGNORE>"
SIMILARITY = 0.8  # watsonx's default similarity_threshold
FUZZY_NOTE = (
    "Fuzzy text arguments are `strategy: judged` rules, in watsonx's documented order: the LLM "
    "judge decides whether the values mean the same; if it fails, the cosine of the values' "
    "embeddings against the threshold; if that fails too, token similarity against the "
    "threshold. Differences: the embeddings come from the judge's endpoint (/v1/embeddings, "
    "the suite's `judge:` block or $OPENAI_BASE_URL), not all-minilm-l6-v2; watsonx's last "
    "step compares fuzzywuzzy's 0-100 WRatio with the 0-1 threshold, so any score >= 1 "
    "matches there, while token similarity here is on a 0-1 scale; watsonx 1.4.9's "
    "`_check_args` goes straight to the embeddings for fuzzy arguments (its docs say LLM "
    "first): spanscore follows the docs. Numbers and dates still compare by value."
)


def detect(data: Any) -> bool:
    return isinstance(data, dict) and "goals" in data and "goal_details" in data


def convert(data: Any, path: Path) -> ImportResult:
    result = ImportResult(suite={})
    result.suite = _suite(path.stem, [(path, data)], result)
    return result


def read_directory(directory: Path) -> ImportResult:
    files = sorted(directory.glob("*.json"))
    if not files:
        raise ImporterError(f"{directory}: no .json datasets in this directory")
    result = ImportResult(suite={})
    result.suite = _suite(directory.name, [(f, read_json(f)) for f in files], result)
    return result


def _suite(name: str, datasets: list[tuple[Path, Any]], result: ImportResult) -> dict[str, Any]:
    scenarios = [_scenario(path, data, result) for path, data in datasets]
    result.notes.append(
        "watsonx reports Journey Success per dataset with tool-call precision and recall; "
        "here `journey_success` is the goals assertion (passed = Journey Success, its details "
        "carry the precision, the recall and the failing goal)."
    )
    if any(_has_judged_arguments(s) for s in scenarios):
        result.notes.append(FUZZY_NOTE)
    return {
        "name": f"watsonx-{name}",
        "description": "watsonx Orchestrate ground-truth datasets imported from "
        + ", ".join(p.name for p, _ in datasets),
        "scenarios": scenarios,
    }


def _scenario(path: Path, data: Any, result: ImportResult) -> dict[str, Any]:
    document = mapping(data, path, "")
    if not detect(document):
        raise fail(path, "", "not a watsonx ground-truth dataset (needs goals and goal_details)")
    sid = path.stem
    goals = mapping(document["goals"], path, "goals")
    graph: dict[str, list[str]] = {}
    nodes: set[str] = set()
    for key, value in goals.items():
        children = listing(value, path, f"goals.{key}")
        if not all(isinstance(c, str) for c in children):
            raise fail(path, f"goals.{key}", "expected a list of goal names")
        graph[key] = list(children)
        nodes.add(key)
        nodes.update(children)
    threshold = _threshold(document.get("similarity_threshold", SIMILARITY), path)
    details: list[dict[str, Any]] = []
    keywords: list[str] = []
    named: set[str] = set()
    for i, raw in enumerate(listing(document["goal_details"], path, "goal_details")):
        where = f"goal_details[{i}]"
        detail = mapping(raw, path, where)
        name = text(detail.get("name"), path, f"{where}.name")
        if name not in nodes:
            raise fail(path, f"{where}.name", f"goal {name!r} is not in goals")
        named.add(name)
        kind = detail.get("type")
        if kind == "tool_call":
            details.append(_tool_goal(detail, name, path, where, sid, threshold, result))
        elif kind == "text":
            goal: dict[str, Any] = {"type": "text", "name": name}
            if isinstance(detail.get("response"), str) and detail["response"]:
                goal["response"] = detail["response"]
            words = detail.get("keywords") or []
            if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
                raise fail(path, f"{where}.keywords", "expected a list of strings")
            if words:
                goal["keywords"] = list(words)
                keywords.extend(w for w in words if w not in keywords)
            details.append(goal)
        else:
            raise fail(path, f"{where}.type", f"expected tool_call or text, got {kind!r}")
    missing = sorted(nodes - named)
    if missing:
        raise fail(path, "goal_details", f"no details for goals {', '.join(missing)}")
    assertions: list[dict[str, Any]] = [
        {
            "type": "goals",
            "name": "journey_success",
            "goals": graph,
            "goal_details": details,
            "similarity_threshold": threshold,
        }
    ]
    result.note(
        sid,
        "repeated calls: watsonx labels each call with the first goal of its tool whose "
        "arguments match and checks the order on each goal's latest call; spanscore places "
        "each goal at the earliest matching call after its dependencies.",
    )
    tool_goals = [d for d in details if d.get("type") == "tool_call"]
    independent = _independent_pairs(graph, [d["name"] for d in tool_goals])
    if independent:
        first, second = independent[0]
        result.note(
            sid,
            f"parallel calls (deliberate difference): goals such as {first} and {second} do not "
            "depend on each other, so the agent may call their tools in one model response; "
            "watsonx reads only the first tool call of a message and fails such a journey, "
            "spanscore counts every call.",
        )
    by_tool: dict[str, list[str]] = {}
    for d in tool_goals:
        by_tool.setdefault(d["tool_name"], []).append(d["name"])
    shared = {
        tool: names
        for tool, names in by_tool.items()
        if any(set(pair) <= set(names) for pair in independent)
    }
    for tool, names in sorted(shared.items()):
        result.note(
            sid,
            f"goals on one tool (deliberate difference): {', '.join(names)} all call {tool}; "
            "watsonx credits each call to the first goal in goal_details order whose arguments "
            "it satisfies (consume-once, greedy), so a call can take the goal another call "
            "needed; spanscore pairs calls with goals optimally and passes such a journey.",
        )
    if keywords:
        assertions.append({"type": "response", "name": "summary_keywords", "keywords": keywords})
        result.note(
            sid,
            "summary_keywords checks the final response; watsonx accepts the keywords in any "
            "assistant message (they are also part of journey_success's text goal).",
        )
    if any(g.get("type") == "text" for g in details):
        result.note(
            sid,
            "text goals: watsonx needs the keywords and an LLM's semantic match with "
            "`response` in any assistant message; spanscore needs the keywords in an answer "
            "given after the goals the text goal depends on, and does not compare `response`.",
        )
    parts = [document.get("story"), document.get("starting_sentence")]
    description = " First message: ".join(p for p in parts if isinstance(p, str) and p)
    agent = document.get("agent")
    if isinstance(agent, str) and agent:
        description = f"[agent {agent}] {description}"
    # watsonx's user agent follows the story and opens with the starting sentence.
    story, opening = (p if isinstance(p, str) else None for p in parts)
    user = user_block(goal=story, opening=opening)
    return scenario(sid, description or None, assertions, user)


def _independent_pairs(graph: dict[str, list[str]], names: list[str]) -> list[tuple[str, str]]:
    """Pairs of goals neither of which depends (directly or not) on the other."""
    below: dict[str, set[str]] = {}

    def reach(goal: str) -> set[str]:
        if goal not in below:
            below[goal] = set()
            for child in graph.get(goal, []):
                below[goal] |= {child} | reach(child)
        return below[goal]

    return [
        (a, b)
        for i, a in enumerate(names)
        for b in names[i + 1 :]
        if b not in reach(a) and a not in reach(b)
    ]


def _threshold(value: Any, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise fail(path, "similarity_threshold", f"expected a number from 0 to 1, got {value!r}")
    return float(value)


def _has_judged_arguments(scenario: dict[str, Any]) -> bool:
    return any(
        isinstance(rule, dict) and rule.get("strategy") == "judged"
        for assertion in scenario["assertions"]
        for goal in assertion.get("goal_details", [])
        for rule in (goal.get("arg_matching") or {}).values()
    )


def _tool_goal(
    detail: dict[str, Any],
    name: str,
    path: Path,
    where: str,
    sid: str,
    threshold: float,
    result: ImportResult,
) -> dict[str, Any]:
    tool = text(detail.get("tool_name"), path, f"{where}.tool_name")
    goal: dict[str, Any] = {"type": "tool_call", "name": name, "tool_name": tool}
    args = detail.get("args")
    if args is None:
        args = {}
    args = mapping(args, path, f"{where}.args")
    matching = dict(mapping(detail.get("arg_matching") or {}, path, f"{where}.arg_matching"))
    for key, strategy in matching.items():
        if strategy not in STRATEGIES:
            raise fail(
                path,
                f"{where}.arg_matching.{key}",
                f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}",
            )
    if args == {"IGNORE": None}:
        result.note(sid, f"{name}: args {{IGNORE: null}} (any arguments) imported as no args.")
        return goal
    matching = _leaf_strategies(args, matching, name, sid, result)
    judged: list[str] = []
    leaves = _flatten(args)
    for key, strategy in list(matching.items()):
        if strategy == "fuzzy":
            rule = _fuzzy_value_rule(leaves[key]) if key in leaves else None
            if rule is None:
                rule = {"strategy": "judged", "threshold": threshold}
                judged.append(key)
            matching[key] = rule
    goal["args"] = args
    goal["match"] = "partial"  # watsonx accepts extra actual arguments, at every level
    if matching:
        goal["arg_matching"] = matching
    if judged:
        result.note(
            sid,
            f"{name}: fuzzy {', '.join(judged)} judged (the LLM judge, then embeddings, then "
            f"token similarity, against {threshold:g}; see the note at the top).",
        )
    if any(isinstance(v, str) and v != v.lower() for v in args.values()):
        result.note(
            sid,
            f"{name}: strict is compared exactly, as documented; watsonx's code lower-cases "
            "both sides, so a case-only difference it accepts fails here.",
        )
    return goal


def _flatten(args: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """watsonx's view of arguments: nested objects as dot paths to their leaves (lists and
    scalars are leaves; an empty object has none, so nothing in it is checked)."""
    leaves: dict[str, Any] = {}
    for key, value in args.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            leaves.update(_flatten(value, path + "."))
        else:
            leaves[path] = value
    return leaves


def _resolve(path: str, matching: dict[str, Any]) -> Any:
    """watsonx's `resolve_strategy`: the path's own strategy, else its nearest ancestor's, else
    strict."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in matching:
            return matching[prefix]
    return "strict"


def _leaf_strategies(
    args: dict[str, Any], matching: dict[str, Any], name: str, sid: str, result: ImportResult
) -> dict[str, Any]:
    """watsonx compares the expected arguments leaf by leaf, each leaf under the strategy of
    its path or of its nearest ancestor in `arg_matching`, and accepts extra keys at every
    level. A strategy given to a nested object therefore becomes one rule per leaf (so an
    `optional` or `fuzzy` object accepts extra keys inside it, as watsonx does); strategies
    for paths that are not expected arguments check nothing there and are dropped."""
    leaves = _flatten(args)
    out: dict[str, Any] = {}
    for path, value in leaves.items():
        strategy = _resolve(path, matching)
        if value == IGNORE_VALUE:
            strategy = "ignore"
            result.note(sid, f"{name}.{path}: the {IGNORE_VALUE} value becomes `ignore`.")
        if strategy != "strict" or path in matching:
            out[path] = strategy
    empty = [path for path, value in _objects(args).items() if value == {}]
    if empty:
        for path in empty:
            out[path] = "ignore"
        result.note(
            sid,
            f"{name}: {', '.join(empty)}: an empty expected object has no leaves, so watsonx "
            "checks nothing there; imported as `ignore`.",
        )
    unused = sorted(key for key in matching if key not in leaves and key not in _objects(args))
    if unused:
        result.note(
            sid,
            f"{name}: arg_matching for {', '.join(unused)}, which are not expected arguments: "
            "watsonx checks only expected arguments, so these check nothing and are dropped.",
        )
    return out


def _objects(args: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The nested objects among the arguments, by dot path."""
    found: dict[str, Any] = {}
    for key, value in args.items():
        if isinstance(value, dict):
            found[f"{prefix}{key}"] = value
            found.update(_objects(value, f"{prefix}{key}."))
    return found


def _fuzzy_value_rule(value: Any) -> dict[str, Any] | None:
    """watsonx's fuzzy matching compares numbers and dates by value before any similarity."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return {"strategy": "tolerance", "tolerance": 0.001, "cast": True}
    if not isinstance(value, str):
        return None
    try:
        float(value)
    except ValueError:
        pass
    else:
        return {"strategy": "tolerance", "tolerance": 0.001, "cast": True}
    try:
        dt.date.fromisoformat(value.strip()[:10])
    except ValueError:
        return None
    return {"strategy": "datetime", "window_seconds": 0}
