"""A killed collector leaves nothing behind (issue 16, item 8): its decode workers and
multiprocessing's resource tracker exit when it dies, whether it was stopped or `kill -9`ed.

Before, each `kill -9` orphaned three processes (two workers and the tracker) that ran on
indefinitely. The test starts the real `spanscore serve`, lists its descendants, kills it, and
waits (a generous deadline, polling) for every one of them to be gone. Whatever happens, the
test ends what it started before it returns.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import grpc
import psutil
import pytest

from ..support import otlp_factory as f
from ..support.collector import ServeProcess
from ..support.polling import wait_for

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["kill-9", "sigterm"])
def test_workers_exit_with_the_collector(tmp_path: Path, how: str) -> None:
    server = ServeProcess(tmp_path / "lake", tmp_path / "collector.log", "--workers", "2")
    children: list[psutil.Process] = []
    try:
        server.start(timeout=120)
        assert server.proc is not None
        pid = server.proc.pid
        # Two workers and the resource tracker, all started with the pool.
        children = wait_for(lambda: len(c := _descendants(pid)) >= 3 and c, timeout=60)
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            export = channel.unary_unary(EXPORT, request_serializer=lambda b: b)
            export(f.request(f.tool_spans(10)), timeout=60)  # the workers are in use
        if how == "kill-9":
            server.kill()
        else:
            assert server.terminate() == 0
        _, left = psutil.wait_procs(children, timeout=60)
        assert not left, f"still running after the collector died: {left}"
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()
        for process in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
