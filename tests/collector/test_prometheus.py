"""Metrics for alerting, scraped by a real Prometheus server (Debian's `prometheus`) on loopback:
the collector's `/metrics` behind its bearer token, a run's figures through node-exporter's
textfile collector (Debian's `prometheus-node-exporter`), and deploy/'s alert rule firing on a
failed gate."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from spanscore.cli import main
from spanscore.collector import Collector
from spanscore.examples.synthetic import build_lake

from ..support import otlp_factory as f
from ..support.evaluation_runs import LATER, write_suite
from ..support.polling import wait_for
from ..support.ports import free_port

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
TOKEN = "metrics-token"
# The synthetic conversations refund nothing: a gate on this suite fails.
NEVER_REFUNDED = {
    "name": "synthetic",
    "metrics": [{"type": "tool_calls", "mode": "contains", "expected": ["refund_payment"]}],
}


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (Debian package {name}; .ci/run installs it)")
    return found


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.terminate()
    for proc in started:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def _query(port: int, promql: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(promql)}"
    status, body = _get(url)
    return json.loads(body)["data"]["result"] if status == 200 else []


def _firing(port: int, name: str) -> list[dict[str, Any]]:
    status, body = _get(f"http://127.0.0.1:{port}/api/v1/alerts")
    alerts = json.loads(body)["data"]["alerts"] if status == 200 else []
    return [a for a in alerts if a["labels"]["alertname"] == name and a["state"] == "firing"]


@pytest.mark.slow
def test_prometheus_scrapes_the_collector_and_a_failed_gate_fires_the_alert(
    make_collector: Any, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    prometheus = _binary("prometheus")
    node_exporter = _binary("prometheus-node-exporter")
    collector: Collector = make_collector(token=TOKEN)
    metrics_url = f"http://127.0.0.1:{collector.http_port}/metrics"
    assert _get(metrics_url)[0] == 401  # the same auth as /status
    request = urllib.request.Request(
        f"http://127.0.0.1:{collector.http_port}/v1/traces",
        data=f.request(f.tool_spans(3, conversation="c1")),
        headers={"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {TOKEN}"},
    )
    urllib.request.urlopen(request, timeout=30).close()
    status, text = _get(metrics_url, TOKEN)
    assert status == 200
    assert 'spanscore_collector_stored_total{signal="spans"} 3' in text
    assert "# TYPE spanscore_collector_queue_rows gauge" in text
    assert "# TYPE spanscore_collector_commit_seconds histogram" in text

    # A run that misses its gate writes its figures for node-exporter.
    lake = tmp_path / "evaluated"
    build_lake(lake, 4)
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    run = CliRunner().invoke(
        main,
        ["evaluate", "--lake", str(lake), "--suite", str(write_suite(tmp_path, NEVER_REFUNDED)),
         "--settle", "0s", "--since", "2023-01-01", "--until", LATER.isoformat(),
         "--workers", "1", "--fail-under", "pass_rate=0.9",
         "--metrics-file", str(textfiles / "spanscore.prom")],
    )  # fmt: skip
    assert run.exit_code == 1, run.output
    figures = (textfiles / "spanscore.prom").read_text()
    assert 'spanscore_run_passed{suite="synthetic"} 0' in figures

    node_port, prometheus_port = free_port(), free_port()
    processes.append(
        subprocess.Popen(
            [node_exporter, f"--web.listen-address=127.0.0.1:{node_port}",
             "--collector.disable-defaults", "--collector.textfile",
             f"--collector.textfile.directory={textfiles}"],
            stdout=subprocess.DEVNULL, stderr=(tmp_path / "node.log").open("wb"),
        )
    )  # fmt: skip
    (tmp_path / "token").write_text(TOKEN)
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(DEPLOY / "alerts.yml")]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    jobs["spanscore-collector"]["static_configs"] = [
        {"targets": [f"127.0.0.1:{collector.http_port}"]}
    ]
    jobs["spanscore-collector"]["authorization"]["credentials_file"] = str(tmp_path / "token")
    jobs["node"]["static_configs"] = [{"targets": [f"127.0.0.1:{node_port}"]}]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    processes.append(
        subprocess.Popen(
            [prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prometheus_port}"],
            stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("wb"),
        )
    )  # fmt: skip

    def stored() -> list[dict[str, Any]]:
        return _query(prometheus_port, 'spanscore_collector_stored_total{signal="spans"}')

    found = wait_for(stored, timeout=120, interval=0.5)
    assert found[0]["value"][1] == "3"
    # Prometheus reads the commit-latency histogram as one (a quantile of its buckets) and
    # the lake's size per table.
    quantile = _query(
        prometheus_port, "histogram_quantile(0.99, spanscore_collector_commit_seconds_bucket)"
    )
    assert quantile
    assert 0 < float(quantile[0]["value"][1]) <= 30
    size = _query(prometheus_port, 'spanscore_collector_lake_bytes{table="spans"}')
    assert size
    assert int(size[0]["value"][1]) > 0
    firing = wait_for(
        lambda: _firing(prometheus_port, "SpanscoreGateFailed"), timeout=120, interval=0.5
    )
    assert firing[0]["labels"]["suite"] == "synthetic"
    assert not _firing(prometheus_port, "SpanscoreCollectorCommitsFailing")


def test_the_alert_rules_are_valid() -> None:
    promtool = _binary("promtool")
    checked = subprocess.run(
        [promtool, "check", "rules", str(DEPLOY / "alerts.yml")], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _samples(text: str) -> dict[str, float]:
    """The samples of a text exposition, by series (`name{labels}`)."""
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            samples[series] = float(value)
    return samples


def test_metrics_show_each_commit_in_the_latency_histogram_and_the_lake_size_on_disk(
    make_collector: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    collector: Collector = make_collector(lake=lake)
    for i in range(3):  # one commit each: an export is answered once committed
        request = urllib.request.Request(
            f"http://127.0.0.1:{collector.http_port}/v1/traces",
            data=f.request(f.tool_spans(3, conversation=f"c{i}")),
            headers={"Content-Type": "application/x-protobuf"},
        )
        urllib.request.urlopen(request, timeout=30).close()
    status, text = _get(f"http://127.0.0.1:{collector.http_port}/metrics")
    assert status == 200
    samples = _samples(text)
    commits = samples["spanscore_collector_commits_total"]
    assert commits >= 3
    histogram = "spanscore_collector_commit_seconds"
    buckets = [v for k, v in samples.items() if k.startswith(histogram + "_bucket")]
    assert buckets == sorted(buckets)  # cumulative
    assert buckets[-1] == samples[histogram + "_count"] == commits
    assert samples[histogram + '_bucket{le="+Inf"}'] == commits
    assert samples[histogram + "_sum"] > 0
    # What the catalog says the spans take is what their files take on disk.
    files = list((lake / "data" / "main" / "spans").glob("*.parquet"))
    assert samples['spanscore_collector_lake_files{table="spans"}'] == len(files) >= 3
    assert samples['spanscore_collector_lake_bytes{table="spans"}'] == sum(
        p.stat().st_size for p in files
    )
    assert samples['spanscore_collector_lake_retained_bytes{table="spans"}'] == 0
    promtool = shutil.which("promtool")
    if promtool is not None:  # Prometheus's own linter accepts the exposition
        checked = subprocess.run(
            [promtool, "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
