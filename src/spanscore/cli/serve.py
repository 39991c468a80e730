"""`spanscore serve`: run the collector until SIGTERM or Ctrl-C."""

from __future__ import annotations

import errno
import os
import signal
import socket
import threading
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import click

from .options import MISSING_LAKE, InputError, LakeUnavailable

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo


class _SettingOption(click.Option):
    """An option for a collector setting. Its variable is named for `--help`, but read by
    `load_config`, which ranks it under the command line and over the config file, parses a
    list as comma-separated, and names the variable when its value is wrong."""

    def resolve_envvar_value(self, ctx: click.Context) -> str | None:
        return None


def _option_for(name: str, info: FieldInfo) -> click.Option:
    """One click option per config field, so the command line and the config never drift."""
    from spanscore.collector.config import env_name

    decls = ["--" + name.replace("_", "-"), name]
    annotation = info.annotation
    args = [a for a in get_args(annotation) if a is not type(None)] or [annotation]
    kind = args[0]
    help_text = info.description or ""
    common: dict[str, Any] = {"envvar": env_name(name), "show_envvar": True}
    if kind is bool:
        return _SettingOption(decls, is_flag=True, default=None, help=help_text, **common)
    if name == "redact":
        return _SettingOption(
            decls,
            multiple=True,
            default=None,
            help=help_text + " (repeatable; in the variable, comma-separated)",
            **common,
        )
    if name == "lake":
        return _SettingOption(decls, metavar="DIR|POSTGRES_URL", help=help_text, **common)
    choices = get_args(kind)
    click_type: Any
    if choices and all(isinstance(c, str) for c in choices):
        click_type = click.Choice(list(choices))
    elif kind in (int, float, str):
        click_type = kind
    elif kind is Path:
        click_type = click.Path(path_type=Path)
    else:
        click_type = str
    return _SettingOption(decls, type=click_type, default=None, help=help_text, **common)


class _ServeCommand(click.Command):
    """`serve`, whose options after `--config` are the collector's settings. They are made
    when first asked for (parsing `serve`, its help), so that the collector (gRPC, the lake)
    is imported by `serve` alone, not by `spanscore --help` or the other commands."""

    _settings_added = False

    @property
    def params(self) -> list[click.Parameter]:
        if not self._settings_added:
            from spanscore.collector.config import CollectorConfig

            self._settings_added = True
            fields = CollectorConfig.model_fields.items()
            self._params.extend(_option_for(name, info) for name, info in fields)
        return self._params

    @params.setter
    def params(self, value: list[click.Parameter]) -> None:
        self._params = value


@click.command("serve", cls=_ServeCommand)
@click.option(
    "--config",
    "config_file",
    envvar="SPANSCORE_CONFIG",
    show_envvar=True,
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="Settings file (.toml, .json or .yaml).",
)
def serve_command(config_file: Path | None, **settings: Any) -> None:
    """Receive OTLP spans and logs (gRPC and HTTP) and commit them to the lake.

    Defaults: gRPC on 127.0.0.1:4317, HTTP on 127.0.0.1:4318. Precedence: option, then
    environment variable, then config file, then default. SIGTERM or Ctrl-C shuts down
    gracefully: every export already received is committed and answered first.

    \b
    $ spanscore serve --lake ./lake
    $ SPANSCORE_TOKEN_FILE=/run/secrets/otlp spanscore serve --lake ./lake --host 0.0.0.0
    """
    from spanscore.collector import Collector, ConfigError, load_config
    from spanscore.collector.logsetup import configure_logging

    if settings.get("redact") == ():
        settings["redact"] = None
    try:
        config = load_config(config_file, settings)
    except ConfigError as exc:
        if "lake: Field required" in str(exc):
            raise click.UsageError(MISSING_LAKE) from exc
        raise click.ClickException(str(exc)) from exc
    from spanscore.lake import LakeLocation

    location = LakeLocation.parse(config.lake, config.data_path)  # a LakeError exits 3
    for what, port, option in (
        ("OTLP/gRPC", config.grpc_port, "--grpc-port"),
        ("OTLP/HTTP", config.http_port, "--http-port"),
    ):
        _check_port(config.host, port, what, option, config.http_port)
    lock = _lock_embedded_lake(location.directory) if location.directory else None
    # Installed before the collector answers /health: a SIGTERM that follows readiness at once
    # (a supervisor, a test) must still shut down gracefully, not kill the process.
    stop = threading.Event()

    def on_signal(signum: int, frame: types.FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        configure_logging(config.log_format, config.log_level)
        collector = Collector(config)
        collector.start()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:
        raise click.ClickException(f"cannot listen: {exc}") from exc
    except Exception as exc:
        from spanscore.lake import LakeError

        if isinstance(exc, LakeError):
            raise LakeUnavailable(str(exc)) from exc
        raise
    while not stop.wait(1.0):
        pass
    drained = collector.stop(timeout=config.commit_deadline_s)
    if lock is not None:
        lock.close()
    if not drained:
        raise LakeUnavailable("stopped before every export received could be committed")


def _check_port(host: str, port: int, what: str, option: str, http_port: int) -> None:
    """Refuse a port another process listens on before anything (the lake) is created. The
    hint names the HTTP port, where a collector answers `status`, whichever port is taken."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            reason = "in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise InputError(
                f"cannot listen for {what} on {host}:{port}: the port is {reason} (another "
                f"collector? `spanscore status --endpoint http://{host}:{http_port or 4318}` "
                "tells). Stop "
                f"it, or choose another port with {option} (0: any free port)"
            ) from None


def _lock_embedded_lake(directory: Path) -> Any:
    """One collector per embedded lake: a second one would fight the first for the catalog.
    The lock lives as long as this process (the kernel drops it if the process dies)."""
    import fcntl

    directory.mkdir(parents=True, exist_ok=True)
    handle = (directory / ".collector.lock").open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise LakeUnavailable(
            f"another collector ({holder}) is serving the lake {directory}: one collector per "
            "embedded lake. Send to that one, or stop it first (several collectors can share "
            "a lake with a PostgreSQL catalog)"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}")
    handle.flush()
    return handle
