"""Collector settings: command-line argument, then environment variable, then config file,
then default. Every setting `name` has the variable `SPANSCORE_<NAME>` (upper case) and the key
`name` in the config file (TOML, JSON or YAML)."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from spanscore.lake.stored import SETTLED_AFTER_S

# Commits of fewer spans than this, on average, are small (`compact_after_small_commits`): a
# compaction of a hundred of them rewrites a few MiB, a pause of a fraction of a second, while
# a collector near its full speed commits thousands of spans at a time.
SMALL_COMMIT_SPANS = 1_000

MEMORY_SIZE = re.compile(r"(?i)^\s*\d+(\.\d+)?\s*(kb|mb|gb|tb|kib|mib|gib|tib)\s*$")  # DuckDB's


class ConfigError(Exception):
    """A setting is missing or wrong; the message names it and where it came from."""


class CollectorConfig(BaseModel):
    """Everything `spanscore serve` can be told. Field docs become docs/reference.md."""

    model_config = ConfigDict(extra="forbid")

    lake: str = Field(description="lake directory or PostgreSQL connection string")
    data_path: str | None = Field(None, description="data files of a new PostgreSQL-catalog lake")
    host: str = Field("127.0.0.1", description="address both servers bind")
    grpc_port: int = Field(4317, ge=0, le=65535, description="OTLP/gRPC port (0: any free)")
    http_port: int = Field(4318, ge=0, le=65535, description="OTLP/HTTP port (0: any free)")
    grpc_listener: Literal["collector", "grpcio"] = Field(
        "collector",
        description="who listens on the gRPC port: `collector` reads each connection's first "
        "bytes, answers HTTP sent there with the HTTP port and relays gRPC to grpcio; `grpcio` "
        "listens itself (no relay; HTTP sent there goes unnamed)",
    )
    token: str | None = Field(
        None,
        description="bearer token clients must send (on the command line other users see it "
        "in ps: prefer token_file or the environment variable)",
    )
    token_file: Path | None = Field(None, description="file holding the bearer token")
    tls_cert: Path | None = Field(None, description="TLS certificate chain (PEM)")
    tls_key: Path | None = Field(None, description="TLS private key (PEM)")
    insecure: bool = Field(False, description="allow a non-loopback bind without token or TLS")
    max_request_bytes: int = Field(
        8 * 1024 * 1024, gt=0, description="largest request body, after decompression"
    )
    max_items_per_request: int = Field(
        100_000,
        gt=0,
        description="spans or log records in one request (more: refused whole, before they "
        "are built: a small body can hold millions of empty spans)",
    )
    max_attributes: int = Field(512, gt=0, description="attributes kept per span/record")
    max_attribute_length: int = Field(
        256 * 1024, gt=0, description="longest string value kept (longer: truncated)"
    )
    max_attribute_key_length: int = Field(
        1024, gt=0, description="longest attribute key kept (longer: the attribute is dropped)"
    )
    redact: list[str] = Field(
        default_factory=list,
        description="attribute keys whose values are replaced by [REDACTED] (`*` wildcard)",
    )
    conversation_attribute: str | None = Field(
        None, description="attribute holding the conversation id when no convention's does"
    )
    queue_rows: int = Field(100_000, gt=0, description="rows queued before exports are refused")
    queue_bytes: int = Field(
        256 * 1024 * 1024,
        gt=0,
        description="bytes of rows queued or committing before exports are refused",
    )
    max_receiving_bytes: int = Field(
        128 * 1024 * 1024,
        gt=0,
        description="bytes of HTTP bodies held while they arrive and wait to be decoded "
        "(beyond: 503, retry)",
    )
    batch_rows: int = Field(20_000, gt=0, description="most rows in one commit")
    batch_delay_ms: int = Field(
        20, ge=0, description="how long the oldest queued export waits for its commit to grow"
    )
    commit_deadline_s: float = Field(30.0, gt=0, description="how long a commit is retried")
    workers: int = Field(
        default_factory=lambda: os.cpu_count() or 1,
        ge=0,
        description="processes decoding requests (default: one per CPU; 0: in the server)",
    )
    client_timeout_s: float = Field(
        30.0,
        gt=0,
        description="longest a client may take for its TLS handshake or to send a request "
        "body (slower: the connection is closed)",
    )
    max_concurrent_requests: int = Field(
        32, gt=0, description="requests decoded at once (bounds memory)"
    )
    maintenance_interval_s: float = Field(
        300.0,
        ge=0,
        description="seconds between maintenance runs: compaction, snapshot expiry, file "
        "cleanup (0: none, nor compaction after commits)",
    )
    compact_after_commits: int = Field(
        1000,
        ge=0,
        description="compact as soon as this many commits were made since the last "
        "compaction, between maintenance runs (0: not for so many commits, only every "
        "maintenance_interval_s or for compact_after_small_commits); a point query opens every "
        "small file a commit wrote",
    )
    compact_after_small_commits: int = Field(
        16,
        ge=0,
        description="run compaction's first stage as soon as this many commits were made since "
        f"the last compaction if they stored fewer than {SMALL_COMMIT_SPANS:,} spans each on "
        "average (0: never); exporters' batches of a few hundred spans make several commits a "
        "second, each a file a point query opens: the first stage rewrites such files into "
        "sorted files of a few MiB, which the regular compaction merges again",
    )
    store_trajectories: bool = Field(
        True,
        description="have maintenance store each settled conversation's rebuilt trajectory, "
        "which evaluations read instead of rebuilding it (more storage, faster evaluations)",
    )
    store_settled_after_s: float = Field(
        SETTLED_AFTER_S,
        ge=0,
        description="a conversation is settled, and its trajectory stored, once it has had "
        "no new span for this long (a span arriving later only makes evaluations rebuild "
        "it until the next store)",
    )
    snapshot_retention_s: float = Field(
        3600.0,
        ge=0,
        description="how long old snapshots stay readable (time travel), and files "
        "compaction replaced stay on disk for readers that listed them (files in no snapshot, "
        "a commit's in flight or a crashed one's, are kept a day whatever this is)",
    )
    snapshot_interval_s: float = Field(
        600.0,
        ge=0,
        description="on an embedded lake, snapshots older than this are kept one per this "
        "many seconds, and those older than ten times it one per ten times it: the catalog, "
        "which every query reads, then keeps only the files those snapshots see; time travel "
        "finds the lake as it was up to an interval earlier (ten, past ten), and a query (not "
        "an evaluation) running longer than this may miss rows committed before it started "
        "(0: every snapshot is kept until snapshot_retention_s; a shared lake keeps them all)",
    )
    retention_days: float | None = Field(
        None,
        gt=0,
        description="spans and log records older than this many days are deleted by "
        "maintenance, with the trajectories stored and the judge answers made from them, "
        "and judge answers, simulated turns and scores' explanations and details older than "
        "that (unset: kept for ever); they leave the disk "
        "once the snapshots before them expire (snapshot_retention_s, twice)",
    )
    score_retention_days: float | None = Field(
        None,
        gt=0,
        description="scores and finished evaluation runs older than this many days are "
        "deleted by maintenance (unset: kept for ever, so that trends outlive raw traces)",
    )
    dedup_keys: int = Field(
        1_000_000,
        ge=0,
        description="identities of recent spans, and of recent log records, remembered so "
        "that a retried export is not stored twice (0: off); on a shared lake, as many of "
        "the spans other collectors committed",
    )
    memory_limit: str = Field(
        "1GiB",
        description="memory DuckDB may keep for the lake (its buffer pool; such as 512MiB or "
        "2GB): without a bound, a long-running collector caches most of the machine's memory",
    )
    log_format: Literal["text", "json"] = Field("text", description="log line format")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info")
    _sources: dict[str, str] = PrivateAttr(default_factory=dict)  # setting -> where it came from

    @field_validator("memory_limit")
    @classmethod
    def _memory_size(cls, value: str) -> str:
        if not MEMORY_SIZE.match(value):
            raise ValueError(f"expected a size with its unit, such as 512MiB or 2GB, not {value!r}")
        return value.strip()

    @model_validator(mode="after")
    def _check(self) -> CollectorConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both or neither")
        if self.token and self.token_file:
            raise ValueError("give token or token_file, not both")
        if self.batch_rows > self.queue_rows:
            raise ValueError("batch_rows must not exceed queue_rows")
        if self.max_receiving_bytes < self.max_request_bytes:
            raise ValueError("max_receiving_bytes must be at least max_request_bytes")
        if (
            not self.insecure
            and not is_loopback(self.host)
            and not (self.token or self.token_file or self.tls_cert)
        ):
            raise ValueError(
                f"refusing to listen on non-loopback address {self.host!r} with neither a token "
                "nor TLS: set token/token_file or tls_cert/tls_key, or pass --insecure"
            )
        return self

    def warnings(self) -> list[str]:
        """Settings that work but put the collector or its secrets at risk (logged at start)."""
        out = []
        if self._sources.get("token") == "command line":
            out.append(
                "the bearer token is on the command line, where any user of this machine can "
                f"read it (ps): use token_file or {env_name('token')} instead"
            )
        if self._sources.get("lake") == "command line" and _has_password(self.lake):
            out.append(
                "the lake's password is on the command line, where any user of this machine "
                f"can read it (ps): use {env_name('lake')}, PGPASSWORD or a .pgpass file instead"
            )
        if (
            self.tls_cert is not None
            and not (self.token or self.token_file)
            and not is_loopback(self.host)
        ):
            out.append(
                f"TLS without a token on {self.host}: TLS encrypts, it does not authenticate; "
                "anyone who can reach this address can write to the lake (set token_file)"
            )
        return out

    def bearer_token(self) -> str | None:
        if self.token_file is not None:
            try:
                token = self.token_file.read_text().strip()
            except OSError as exc:
                raise ConfigError(f"cannot read token_file {self.token_file}: {exc}") from exc
            if not token:
                raise ConfigError(f"token_file {self.token_file} is empty")
            return token
        return self.token or None


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _has_password(spec: str) -> bool:
    if "://" in spec:
        return bool(urlsplit(spec.removeprefix("postgres:")).password) or "password=" in spec
    return "password=" in spec


def env_name(field: str) -> str:
    return "SPANSCORE_" + field.upper()


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    try:
        if path.suffix == ".toml":
            data: Any = tomllib.loads(text)
        elif path.suffix == ".json":
            data = json.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            raise ConfigError(f"config file {path}: use .toml, .json or .yaml")
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"config file {path}: {exc}") from exc
    except Exception as exc:  # yaml.YAMLError without importing yaml eagerly
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"config file {path}: {exc}") from exc
    if isinstance(data, dict) and isinstance(data.get("collector"), dict):
        data = data["collector"]  # a shared spanscore.toml may hold a [collector] table
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a table of settings")
    return data


def load_config(
    config_file: Path | None = None,
    overrides: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> CollectorConfig:
    """Merge the sources (argument > environment > file > default) and validate once."""
    env = os.environ if environ is None else environ
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if config_file is not None:
        for key, value in _read_file(config_file).items():
            merged[key] = value
            sources[key] = f"config file {config_file}"
    for name, info in CollectorConfig.model_fields.items():
        raw = env.get(env_name(name))
        if raw is None or raw == "":
            continue
        annotation = str(info.annotation)
        if name == "redact":
            merged[name] = [p.strip() for p in raw.split(",") if p.strip()]
        elif "bool" in annotation:
            merged[name] = raw.strip().lower() in ("1", "true", "yes", "on")
        else:
            merged[name] = raw
        sources[name] = f"environment variable {env_name(name)}"
    for key, value in (overrides or {}).items():
        if value is not None:
            merged[key] = value
            sources[key] = "command line"
    try:
        config = CollectorConfig.model_validate(merged)
        config._sources = sources
        return config
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"]) or "settings"
            origin = sources.get(str(err["loc"][0]) if err["loc"] else "", "")
            where = f" (from {origin})" if origin else ""
            lines.append(f"{key}{where}: {err['msg']}")
        raise ConfigError("invalid collector settings:\n  " + "\n  ".join(lines)) from None
