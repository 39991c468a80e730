"""A run's figures as OTLP metrics (`evaluate --export-otlp`): sent by the OpenTelemetry SDK's
real OTLP metric exporters (HTTP and gRPC) into a receiver on loopback, they are the figures of
the node-exporter textfile, point for point (one definition), and an endpoint that is down is a
warning, never a failed run."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from spanscore.cli import main
from spanscore.collector import Collector, metrics_refused
from spanscore.examples.synthetic import build_lake

from ..support.evaluation_runs import LATER, write_suite
from ..support.otlp_metrics_receiver import Received, grpc_receiver, http_receiver
from ..support.ports import free_port

# The synthetic conversations refund nothing: the gate on this suite fails (a gate_passed 0).
NEVER_REFUNDED = {
    "name": "synthetic",
    "metrics": [{"type": "tool_calls", "mode": "contains", "expected": ["refund_payment"]}],
}
_SAMPLE = re.compile(r"^(\w+)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _textfile_as_otlp(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], tuple[float, str]]:
    """The textfile's samples, named as their OTLP gauges: `spanscore_run_X_seconds` is
    `spanscore.run.X` in seconds; an empty label is no attribute."""
    points = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        found = _SAMPLE.match(line)
        assert found, line
        name, labels, value = found.groups()
        base = name.removeprefix("spanscore_run_")
        unit = "s" if base.endswith("_seconds") else ""
        attrs = frozenset((k, v) for k, v in _LABEL.findall(labels or "") if v)
        points[("spanscore.run." + base.removesuffix("_seconds"), attrs)] = (float(value), unit)
    return points


def _evaluate(lake: Path, suite: Path, *extra: str, env: dict[str, str]) -> Any:
    return CliRunner().invoke(
        main,
        ["evaluate", "--lake", str(lake), "--suite", str(suite), "--settle", "0s",
         "--since", "2023-01-01", "--until", LATER.isoformat(), "--workers", "1",
         "--fail-under", "pass_rate=0.9", *extra],
        env=env,
    )  # fmt: skip


RECEIVERS = [
    # --export-otlp URL over HTTP/protobuf (/v1/metrics added to the base URL)
    pytest.param(http_receiver, False, id="http-from-the-option"),
    # --export-otlp alone: the standard variables, gRPC
    pytest.param(grpc_receiver, True, id="grpc-from-the-variables"),
]


@pytest.mark.parametrize(("receiver", "from_variables"), RECEIVERS)
def test_the_runs_figures_arrive_as_otlp_gauges_equal_to_the_textfiles(
    tmp_path: Path,
    receiver: Callable[[], AbstractContextManager[tuple[int, Received]]],
    from_variables: bool,
) -> None:
    lake = tmp_path / "lake"
    build_lake(lake, 4)
    suite = write_suite(tmp_path, NEVER_REFUNDED)
    textfile = tmp_path / "spanscore.prom"
    with receiver() as (port, received):
        url = f"http://127.0.0.1:{port}"
        if from_variables:
            env = {"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
            export = ["--export-otlp"]
        else:
            env, export = {}, ["--export-otlp", url]
        result = _evaluate(lake, suite, "--metrics-file", str(textfile), *export, env=env)
    assert result.exit_code == 1, result.output  # the gate failed; the export changes nothing
    assert "exported the run's metrics" in result.output
    expected = _textfile_as_otlp(textfile.read_text())
    assert received.gauges() == expected
    names = {name for name, _ in expected}
    assert {"spanscore.run.pass_rate", "spanscore.run.gate_passed", "spanscore.run.passed",
            "spanscore.run.conversations_scored", "spanscore.run.judge_calls",
            "spanscore.run.judge_cost_usd", "spanscore.run.duration"} <= names  # fmt: skip
    assert expected[("spanscore.run.passed", frozenset({("suite", "synthetic")}))] == (0.0, "")
    assert (
        expected[("spanscore.run.conversations_scored", frozenset({("suite", "synthetic")}))][0]
        == 4
    )
    (request,) = received.metrics
    resource = {
        a.key: a.value.string_value for a in request.resource_metrics[0].resource.attributes
    }
    assert resource["service.name"] == "spanscore"
    assert request.resource_metrics[0].scope_metrics[0].scope.name == "spanscore.evaluation"
    assert received.logs  # the evaluation events went to the same endpoint


def test_a_metrics_endpoint_that_is_down_is_a_warning_and_the_run_stands(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    build_lake(lake, 2)
    suite = write_suite(tmp_path, NEVER_REFUNDED)
    down = f"http://127.0.0.1:{free_port()}"
    timeouts = {f"OTEL_EXPORTER_OTLP_{s}_TIMEOUT": "1" for s in ("LOGS", "METRICS")}
    result = _evaluate(lake, suite, "--format", "json", "--export-otlp", down, env=timeouts)
    assert result.exit_code == 1, result.output  # the gate's verdict, not the export's
    document = json.loads(result.stdout)
    assert document["metrics_export"]["points"] == 0
    assert document["metrics_export"]["endpoint"] == down + "/v1/metrics"
    assert document["metrics_export"]["error"]


def test_otel_metrics_exporter_none_sends_the_events_alone(tmp_path: Path) -> None:
    # The SDK's own switch, for an endpoint that takes no metrics (a spanscore collector).
    lake = tmp_path / "lake"
    build_lake(lake, 2)
    suite = write_suite(tmp_path, NEVER_REFUNDED)
    with http_receiver() as (port, received):
        result = _evaluate(
            lake, suite, "--format", "json", "--export-otlp", f"http://127.0.0.1:{port}",
            env={"OTEL_METRICS_EXPORTER": "none"},
        )  # fmt: skip
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert document["metrics_export"] is None
    assert received.logs
    assert not received.metrics


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_spanscore_collector_keeps_no_metrics_and_the_run_says_so_once(
    tmp_path: Path, make_collector: Callable[..., Collector], protocol: str
) -> None:
    """Events and figures sent to a spanscore collector: it stores the events and answers the
    metrics with a partial success ("metrics are not stored", every point rejected), which a
    run reports as a note, once in a process, not as an endpoint that failed."""
    lake = tmp_path / "lake"
    build_lake(lake, 2)
    suite = write_suite(tmp_path, NEVER_REFUNDED)
    collector = make_collector(lake=tmp_path / "sink")
    port = collector.grpc_port if protocol == "grpc" else collector.http_port
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": protocol}
    url = f"http://127.0.0.1:{port}"
    first = _evaluate(lake, suite, "--export-otlp", url, env=env)
    assert first.exit_code == 1, first.output  # the gate's verdict
    assert "warning" not in first.output, first.output
    assert "keeps none of them" in first.output, first.output
    assert metrics_refused.NOT_STORED in first.output, first.output
    again = _evaluate(lake, suite, "--rescore", "--format", "json", "--export-otlp", url, env=env)
    document = json.loads(again.stdout)["metrics_export"]
    assert (document["error"], document["noted"]) == (None, True), document
    assert document["rejected"] == document["points"] > 0, document
    assert document["rejected_because"] == metrics_refused.NOT_STORED
    assert collector.stats.get("metrics_exports_not_stored") == 2
