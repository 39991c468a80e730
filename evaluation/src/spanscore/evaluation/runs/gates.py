"""A run's summary per scenario and metric, the warnings that say what measured nothing, and the
gates that fail the run."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Any

import duckdb
import pyarrow as pa

from spanscore.evaluation.runs.result import GateResult, SummaryRow, plural
from spanscore.evaluation.suites.loaded import LoadedSuite
from spanscore.evaluation.suites.model import Gate, Policy
from spanscore.lake import query

# --- summary and gates ------------------------------------------------------------------------

# The latest score of each conversation, scenario and metric by this suite version, over the
# sample (registered as `spanscore_sample`): what the summary and the gates count.
_LATEST = """
    WITH latest AS (
        SELECT s.* FROM scores s JOIN eval_runs r USING (run_id)
        WHERE r.suite_name = ? AND r.suite_hash = ?
          AND s.conversation_id IN (SELECT conversation_id FROM spanscore_sample)
        QUALIFY row_number() OVER (
            PARTITION BY s.conversation_id, s.scenario_id, s.metric
            ORDER BY s.created_at DESC, s.run_id DESC) = 1
    )
"""

# (scenario id, metric) -> {conversation id: whether its score passed}, for the scores with a
# verdict (pass/fail) or an error (which is no pass).
Verdicts = dict[tuple[str | None, str], dict[str, bool]]


def summarize(
    con: duckdb.DuckDBPyConnection, suite: LoadedSuite, sample: Sequence[str]
) -> list[SummaryRow]:
    """Per scenario and metric, over the sample: the latest score of each conversation by
    this suite version (so a resumed run summarises the whole sample)."""
    if not sample:
        return []
    con.register("spanscore_sample", pa.table({"conversation_id": list(sample)}))
    try:
        rows = list(
            query(
                con,
                _LATEST
                + """
            SELECT scenario_id, metric, count(*) AS conversations, count(passed) AS judged,
                   avg(passed::INTEGER) AS pass_rate, avg(value) AS mean,
                   count(error) AS errors,
                   coalesce(list(conversation_id ORDER BY error IS NULL,
                        coalesce(passed::INTEGER, 1), value NULLS LAST, conversation_id)
                        FILTER (WHERE passed IS NOT TRUE OR error IS NOT NULL), [])[1:3]
                        AS worst,
                   min(error) AS first_error
            FROM latest GROUP BY ALL
            ORDER BY scenario_id NULLS FIRST, metric
            """,
                [suite.name, suite.content_hash],
            )
        )
    finally:
        con.unregister("spanscore_sample")
    return [SummaryRow(**{**r, "worst": list(r["worst"])}) for r in rows]


# A judged metric whose scores are errors on more than this share of its conversations fails
# the run (exit 1) instead of warning: the judge was down or refused, and the night measured
# nothing with it (docs/judge.md, "When the judge fails").
JUDGE_ERROR_SHARE = 0.5


def _judge_failed(suite: LoadedSuite, row: SummaryRow) -> bool:
    return (
        row.metric in suite.judged_metrics
        and row.conversations > 0
        and row.errors > JUDGE_ERROR_SHARE * row.conversations
    )


def judge_failures(
    suite: LoadedSuite,
    summary: Sequence[SummaryRow],
    endpoint: str,
    last_error: str | None,
) -> list[str]:
    """The judged metrics that errored on more than JUDGE_ERROR_SHARE of their conversations,
    each naming the judge's endpoint and its last error: each fails the run."""
    failures = []
    for r in summary:
        if _judge_failed(suite, r):
            scope = f"{r.scenario_id}/" if r.scenario_id else ""
            failures.append(
                f"{scope}{r.metric} gave an error on {r.errors} of {r.conversations} "
                f"conversations (the judge at {endpoint}); last error: "
                f"{last_error or r.first_error}"
            )
    return failures


def conversation_verdicts(
    con: duckdb.DuckDBPyConnection, suite: LoadedSuite, sample: Sequence[str]
) -> Verdicts:
    """Each conversation's verdict per scenario and metric, for conversation-level gates."""
    verdicts: Verdicts = {}
    if not sample:
        return verdicts
    con.register("spanscore_sample", pa.table({"conversation_id": list(sample)}))
    try:
        found = con.execute(
            _LATEST
            + """
            SELECT scenario_id, metric, conversation_id, coalesce(passed, false) AND error IS NULL
            FROM latest WHERE passed IS NOT NULL OR error IS NOT NULL
            """,
            [suite.name, suite.content_hash],
        ).fetchall()
    finally:
        con.unregister("spanscore_sample")
    for scenario_id, metric, conversation_id, passed in found:
        verdicts.setdefault((scenario_id, metric), {})[conversation_id] = passed
    return verdicts


def run_warnings(
    suite: LoadedSuite,
    summary: Sequence[SummaryRow],
    conversations: int,
    simulated: Collection[str] | None = None,
) -> list[str]:
    """What a run measured nothing with: scenarios and policies that selected no conversation,
    metrics that gave an error on every conversation (judged ones fail the run instead, see
    `judge_failures`), and what the import of a native file left out. Each is a warning;
    strict mode (`--strict`, the suite's `strict`) fails the run. `simulated`: the scenarios a
    simulation run's simulation played (the others are not expected to select anything)."""
    warnings: list[str] = []
    groups = [
        g
        for g in suite.suite.groups()
        if simulated is None or isinstance(g, Policy) or g.id in simulated
    ]
    selected = {r.scenario_id for r in summary}
    if not conversations:
        if groups:
            warnings.append(
                f"no conversation in the run: none of the {len(groups)} scenarios and policies "
                "selected any"
            )
    else:
        for group in groups:
            if group.id not in selected:
                kind = "policy" if isinstance(group, Policy) else "scenario"
                among = plural(conversations, "conversation")
                warnings.append(f"{kind} {group.id!r} selected none of the {among}")
    for r in summary:
        if r.conversations and r.errors == r.conversations and not _judge_failed(suite, r):
            scope = f"{r.scenario_id}/" if r.scenario_id else ""
            warnings.append(
                f"{scope}{r.metric} gave an error on every conversation ({r.conversations}): "
                f"{r.first_error}"
            )
    warnings += [f"not imported from {suite.path}: {text}" for text in suite.dropped]
    return warnings


def check_gate(gate: Gate, summary: Sequence[SummaryRow], verdicts: Verdicts) -> GateResult:
    """A gate over the scores it covers: the share of conversations that passed every one of
    them (`min_pass_rate`), the share of scores that passed (`min_score_pass_rate`), or their
    mean (`min_mean`), both weighted by conversations."""

    def covered(scenario_id: str | None, metric: str) -> bool:
        return (gate.metric is None or metric == gate.metric) and (
            gate.scenario is None or scenario_id == gate.scenario
        )

    rows = [r for r in summary if covered(r.scenario_id, r.metric)]
    measured: float | None
    if gate.min_pass_rate is not None:
        passing: dict[str, bool] = {}
        for (scenario_id, metric), by_conversation in verdicts.items():
            if covered(scenario_id, metric):
                for conversation_id, passed in by_conversation.items():
                    passing[conversation_id] = passing.get(conversation_id, True) and passed
        measured = sum(passing.values()) / len(passing) if passing else None
        target = gate.min_pass_rate
    elif gate.min_score_pass_rate is not None:
        judged = sum(r.judged for r in rows)
        passed_scores = sum((r.pass_rate or 0.0) * r.judged for r in rows)
        measured = passed_scores / judged if judged else None
        target = gate.min_score_pass_rate
    else:
        valued = [(r.mean, r.conversations - r.errors) for r in rows if r.mean is not None]
        weight = sum(n for _, n in valued)
        measured = sum(m * n for m, n in valued) / weight if weight else None
        target = gate.min_mean if gate.min_mean is not None else 0.0
    # Nothing to measure fails, unless the gate allows it: a gate that measured nothing
    # (a quiet night, a scenario that selected nothing) must not look like a passed one.
    if measured is None:
        return GateResult(gate, None, gate.allow_empty)
    return GateResult(gate, measured, measured >= target)


def parse_gate(text: str) -> Gate:
    """`--fail-under` syntax: `[SCENARIO/][METRIC.]pass_rate=0.9` (conversations),
    `...score_pass_rate=0.9` (scores) or `...mean=0.8`, and `[SCENARIO/]pass^K=0.8` over a
    simulation's trials."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"{text!r}: expected KEY=VALUE, e.g. pass_rate=0.9")
    try:
        threshold = float(value)
    except ValueError:
        raise ValueError(f"{text!r}: {value!r} is not a number") from None
    trials = re.fullmatch(r"(?:(?P<scenario>[^/]+)/)?pass\^(?P<k>[0-9]+)", key.strip())
    if trials is not None:
        return Gate(
            scenario=trials.group("scenario") or None,
            pass_k=int(trials.group("k")),
            min_pass_rate=threshold,
        )
    found = re.fullmatch(
        r"(?:(?P<scenario>[^/]+)/)?(?:(?P<metric>.+)\.)?(?P<what>[a-z_]+)", key.strip()
    )
    what = found.group("what") if found else ""
    if found is None or what not in ("pass_rate", "score_pass_rate", "mean"):
        raise ValueError(
            f"{text!r}: expected pass_rate, score_pass_rate, mean or pass^K before '='"
        )
    scenario, metric = found.group("scenario"), found.group("metric")
    fields: dict[str, Any] = {"scenario": scenario or None, "metric": metric or None}
    fields[f"min_{what}"] = threshold
    return Gate(**fields)
