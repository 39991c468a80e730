"""A run's summary per scenario and metric, the warnings that say what measured nothing, and the
gates that fail the run."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Sequence
from typing import Any

import duckdb
import pyarrow as pa

from spanscore.evaluation.runs.result import GateResult, SummaryRow, plural
from spanscore.evaluation.suites.loaded import LoadedSuite
from spanscore.evaluation.suites.model import Gate, Policy
from spanscore.lake import query

# --- summary and gates ------------------------------------------------------------------------

# The latest score of each conversation, scenario and metric by this suite version, over the
# sample (registered as `spanscore_sample`): what the summary and the gates count (only the
# columns they read).
_LATEST = """
    WITH latest AS (
        SELECT s.conversation_id, s.scenario_id, s.metric, s.passed, s.value, s.error
        FROM scores s JOIN eval_runs r USING (run_id)
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


# Conversations a summary or verdict query reads at once. The latest score of each is picked by
# a window over every score of theirs by this suite version, which holds them all in memory: by
# chunks, a run's memory is set by the chunk, not by the window (issue: a 100,000-conversation
# run's summary took more than its scoring).
SAMPLE_CHUNK = 20_000

_WORST = 3  # conversations a summary row names as its worst
# What orders them, worst first: erroring, then failed, then lower values (none last). A list
# of numbers, so that the merge of the chunks' worst (in Python) orders them as SQL does.
_WORST_KEY = (
    "[(error IS NULL)::INTEGER, coalesce(passed::INTEGER, 1), (value IS NULL)::INTEGER, "
    "coalesce(value, 0)]"
)


def _sample_chunks(con: duckdb.DuckDBPyConnection, sample: Sequence[str]) -> Iterator[None]:
    """Registers each chunk of the sample as `spanscore_sample` in turn."""
    for start in range(0, len(sample), SAMPLE_CHUNK):
        chunk = list(sample[start : start + SAMPLE_CHUNK])
        con.register("spanscore_sample", pa.table({"conversation_id": chunk}))
        try:
            yield
        finally:
            con.unregister("spanscore_sample")


def summarize(
    con: duckdb.DuckDBPyConnection, suite: LoadedSuite, sample: Sequence[str]
) -> list[SummaryRow]:
    """Per scenario and metric, over the sample: the latest score of each conversation by
    this suite version (so a resumed run summarises the whole sample)."""
    parts: dict[tuple[str | None, str], list[dict[str, Any]]] = {}
    for _ in _sample_chunks(con, sample):
        for r in query(
            con,
            _LATEST
            + f"""
            SELECT scenario_id, metric, count(*) AS conversations, count(passed) AS judged,
                   sum(passed::INTEGER) AS passes, sum(value) AS value_sum,
                   count(value) AS valued, count(error) AS errors,
                   coalesce(list(struct_pack(key := {_WORST_KEY}, id := conversation_id)
                        ORDER BY {_WORST_KEY}, conversation_id)
                        FILTER (WHERE passed IS NOT TRUE OR error IS NOT NULL), [])[1:{_WORST}]
                        AS worst,
                   min(error) AS first_error
            FROM latest GROUP BY ALL
            """,
            [suite.name, suite.content_hash],
        ):
            parts.setdefault((r["scenario_id"], r["metric"]), []).append(r)
    rows = [_merged(key, found) for key, found in parts.items()]
    return sorted(rows, key=lambda r: (r.scenario_id is not None, r.scenario_id or "", r.metric))


def _merged(key: tuple[str | None, str], parts: list[dict[str, Any]]) -> SummaryRow:
    """One summary row from its chunks' rows."""
    judged = sum(p["judged"] for p in parts)
    valued = sum(p["valued"] for p in parts)
    candidates = sorted((w for p in parts for w in p["worst"]), key=lambda w: (w["key"], w["id"]))
    errors = [p["first_error"] for p in parts if p["first_error"] is not None]
    return SummaryRow(
        scenario_id=key[0],
        metric=key[1],
        conversations=sum(p["conversations"] for p in parts),
        judged=judged,
        pass_rate=sum(p["passes"] or 0 for p in parts) / judged if judged else None,
        mean=sum(p["value_sum"] or 0.0 for p in parts) / valued if valued else None,
        errors=sum(p["errors"] for p in parts),
        worst=[str(w["id"]) for w in candidates[:_WORST]],
        first_error=min(errors) if errors else None,
    )


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
    for _ in _sample_chunks(con, sample):
        found = con.execute(
            _LATEST
            + """
            SELECT scenario_id, metric, conversation_id, coalesce(passed, false) AND error IS NULL
            FROM latest WHERE passed IS NOT NULL OR error IS NOT NULL
            """,
            [suite.name, suite.content_hash],
        ).fetchall()
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
