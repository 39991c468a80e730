"""The report document: what `spanscore report --format json` writes and the HTML page embeds.

The TypedDicts below are both the types the builder fills in and the source of the published
JSON Schema (`report_json_schema()`, also in `docs/report.schema.json`). Times are ISO 8601 UTC
strings; offsets inside a conversation are milliseconds from its first span.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any, Literal, NotRequired

from pydantic import TypeAdapter
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

FORMAT: Literal["spanscore-report"] = "spanscore-report"
VERSION: Literal[1] = 1


class GateDoc(TypedDict):
    scope: str  # "scenario/metric", a scenario, a metric, or "all scores"
    kind: Literal["pass_rate", "mean"]
    # What the gate measured, in the words `evaluate` prints: "conversation pass rate", "score
    # pass rate", "mean" or "pass^K" (K trials of a simulation's scenario, all passing; its kind
    # is pass_rate). Absent from reports written before it was added.
    measure: NotRequired[str]
    target: float | None
    measured: float | None
    passed: bool


class JudgeDoc(TypedDict):
    cost_usd: float | None
    calls: int | None
    figures: dict[str, Any]  # every judge figure the run recorded, flattened (`judge.calls`)


class RunDoc(TypedDict):
    run_id: str
    suite_name: str
    suite_version: str | None  # the suite's content hash
    status: str | None
    window_start: str | None
    window_end: str | None
    started_at: str | None
    finished_at: str | None
    duration_s: float | None
    conversations: int
    scores: int
    errors: int
    candidates: int | None
    sampled: int | None
    skipped: int | None
    sample: dict[str, Any]
    judge: JudgeDoc | None
    gates: list[GateDoc]
    strict: bool | None  # its warnings fail the run (null: recorded before this was kept)
    warnings: list[str]  # what the run measured nothing with, each with its reason
    failures: list[str]  # what failed the run besides its gates (strict mode, too few...)
    status_reasons: list[str]  # why it has its status: failed gates, then failures
    spanscore_version: str | None
    host: str | None
    simulation_id: str | None  # the simulation the run scored (null: production traffic)


class HistogramDoc(TypedDict):
    low: float
    high: float
    counts: list[int]


class ScaleDoc(TypedDict):
    """The range a metric's values are drawn on: the scale its scores declare (a judged
    rubric's), else 0-1 when its values lie in it, else 0 to the highest value."""

    low: float
    high: float


class SummaryDoc(TypedDict):
    scenario_id: str | None
    metric: str
    conversations: int
    judged: int
    passed: int
    pass_rate: float | None
    mean: float | None
    errors: int
    scale: ScaleDoc | None  # of the values (null: no value)


class DistributionDoc(TypedDict):
    metric: str
    values: int
    histogram: HistogramDoc


class TrendDoc(TypedDict):
    run_id: str
    started_at: str | None
    label: str  # the run on the x axis: distinct from every other run's label
    status: str | None
    conversations: int
    pass_rate: float | None  # share of the run's judged scores that passed
    current: bool


class TrendSeriesDoc(TypedDict):
    """One scenario's or one metric's course over the runs of `trend` (lists aligned with it)."""

    scenario_id: str | None  # null: the suite-wide metrics
    metric: str | None  # null: the scenario as a whole
    # A metric: the share of its judged scores that passed. A scenario: the share of its
    # conversations whose judged scores in it all passed.
    pass_rate: list[float | None]
    mean: list[float | None]  # a metric's mean value, on `scale`; null for a scenario
    scale: ScaleDoc | None


class ToolFailureDoc(TypedDict):
    """One tool in one failed assertion: the failing scores of `scenario_id/metric` that marked
    a call of this tool (not expected, not allowed, breaking a rule...) or found it missing."""

    tool: str
    scenario_id: str | None
    metric: str
    conversations: int
    marks: dict[str, int]  # by kind (extra, violation, missing): how many
    conversation_ids: list[str]  # the first few


class ToolFailuresDoc(TypedDict):
    cells: list[ToolFailureDoc]
    failed_scores: int  # scores that failed in the run
    unmarked: int  # of them, those that marked no tool (responses, judged rubrics, goals...)


class ToolDoc(TypedDict):
    name: str
    calls: int
    errors: int
    error_rate: float
    mean_ms: float | None
    p50_ms: float | None
    p95_ms: float | None


class MetricChangeDoc(TypedDict):
    scenario_id: str | None
    metric: str
    paired: int
    mean_a: float | None
    mean_b: float | None
    pass_rate_a: float | None
    pass_rate_b: float | None
    delta: float | None
    low: float | None  # 95 % bootstrap interval of the change of the mean
    high: float | None
    significant: bool
    direction: Literal["regressed", "improved", "unchanged"]


class ConversationChangeDoc(TypedDict):
    conversation_id: str
    scenario_id: str | None
    metric: str
    value_a: float | None
    value_b: float | None
    passed_a: bool | None
    passed_b: bool | None
    kind: Literal["regressed", "fixed", "changed"]


class BaselineDoc(TypedDict):
    run_id: str
    started_at: str | None
    suite_version: str | None
    paired_conversations: int
    metrics: list[MetricChangeDoc]
    conversations: list[ConversationChangeDoc]


class ConversationsDoc(TypedDict):
    """One entry per scored conversation in every list (columnar: compact and fast to filter)."""

    id: list[str]
    scenario: list[str | None]
    result: list[Literal["passed", "failed", "error", "scored"]]
    failing: list[list[int]]  # indexes into `keys`: the scores that failed or errored
    agent: list[str | None]
    service: list[str | None]
    start: list[str | None]
    first_message: list[str | None]
    trace_id: list[str | None]
    change: list[Literal["regressed", "fixed", "changed"] | None]
    keys: list[str]  # "scenario/metric" (or "metric" for suite-wide metrics)
    metrics: list[str]  # metric names, one column each in `values` and `passed`
    values: dict[str, list[float | None]]  # the lowest value of that metric in the conversation
    # For the metrics scored with labels and no value: the label (a failing one first).
    labels: dict[str, list[str | None]]
    passed: dict[str, list[bool | None]]  # False when any of its scores failed


class ScoreDoc(TypedDict):
    scenario_id: str | None
    metric: str
    value: float | None
    label: str | None
    passed: bool | None
    threshold: float | None
    explanation: str | None
    error: str | None
    details: Any


class MarkDoc(TypedDict):
    call: int  # index of the tool call in the conversation (over all turns)
    score: int  # index into the conversation's `scores`
    kind: Literal["matched", "extra", "violation"]
    note: str


class MissingDoc(TypedDict):
    score: int
    name: str
    note: str


class ModelStepDoc(TypedDict):
    kind: Literal["model_call"]
    name: str
    offset_ms: float | None
    latency_ms: float | None
    requested: list[str]
    response: str | None
    error: str | None
    input_tokens: int | None
    output_tokens: int | None
    trace_id: str | None
    span_id: str | None


class ToolStepDoc(TypedDict):
    kind: Literal["tool_call"]
    index: int
    name: str
    arguments: Any
    result: Any
    error: str | None
    call_id: str | None
    offset_ms: float | None
    latency_ms: float | None
    parallel_group: int | None
    source: str
    trace_id: str | None
    span_id: str | None


class HandoffStepDoc(TypedDict):
    kind: Literal["handoff"]
    from_agent: str | None
    to_agent: str | None
    offset_ms: float | None


class TurnDoc(TypedDict):
    index: int
    user_message: str | None
    final_response: str | None
    steps: list[ModelStepDoc | ToolStepDoc | HandoffStepDoc]


class ConversationDetailDoc(TypedDict):
    conversation_id: str
    agent: str | None
    service: str | None
    start: str | None
    duration_ms: float | None
    attributes: dict[str, Any]
    warnings: list[str]
    turns: list[TurnDoc]
    scores: list[ScoreDoc]
    marks: list[MarkDoc]
    missing: list[MissingDoc]


class TrialCellDoc(TypedDict):
    trial: int
    conversation_id: str
    passed: bool
    stop_reason: str


class NotCountedDoc(TypedDict):
    """A trial that ended short of counting in pass^k: the user model failed, its budget was
    spent, the simulation was stopped (`stop_reason`), or it never ran (`not_run`)."""

    trial: int
    conversation_id: str
    stop_reason: str


class ScenarioTrialsDoc(TypedDict):
    scenario: str
    trials: int  # counted in pass^k
    passed: int
    pass_hat_k: dict[str, float]  # k -> pass^k
    cells: list[TrialCellDoc]
    not_counted: list[NotCountedDoc]


class TrialsDoc(TypedDict):
    simulation_id: str
    scenarios: list[ScenarioTrialsDoc]
    mean_pass_hat_k: dict[str, float | None]  # over the scenarios with at least k trials


class ReportDoc(TypedDict):
    format: Literal["spanscore-report"]
    version: Literal[1]
    generated_at: str
    trace_url: str | None  # with {trace_id}, {span_id}, {conversation_id} placeholders
    notes: list[str]
    run: RunDoc
    baseline: BaselineDoc | None
    summary: list[SummaryDoc]
    distributions: list[DistributionDoc]
    trend: list[TrendDoc]
    trend_series: list[TrendSeriesDoc]
    tools: list[ToolDoc]
    tool_failures: ToolFailuresDoc
    conversations: ConversationsDoc
    # A simulation's run: each scenario's trials and pass^k (null for production traffic).
    trials: TrialsDoc | None
    # Aligned with `conversations.id`; null when the trajectory was not embedded.
    details: list[ConversationDetailDoc | None]


@cache
def _adapter() -> TypeAdapter[ReportDoc]:
    return TypeAdapter(ReportDoc)


def report_json_schema() -> dict[str, Any]:
    """The JSON Schema of the report document (`--format json`)."""
    schema = _adapter().json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "spanscore report"
    return schema


def validate_report(document: Any) -> ReportDoc:
    """The document, checked against the schema (pydantic's ValidationError if it does not fit)."""
    return _adapter().validate_python(document, strict=False)


def schema_text() -> str:
    """The published schema file's content (`docs/report.schema.json`)."""
    return json.dumps(report_json_schema(), indent=2, sort_keys=True) + "\n"
