"""The review app beside a collector that ingests into the same embedded lake, and over a
shared lake (catalog on the machine's PostgreSQL, data in an S3-compatible server on
127.0.0.1): it reads what is committed, writes its labels, and holds nothing back."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spanscore.collector import Collector

from ..support.otlp_http import post_lookup_conversation
from ..support.polling import wait_for

ORIGIN = "http://127.0.0.1:8765"


def _client(lake: str) -> Any:
    from starlette.testclient import TestClient

    from spanscore.ui import create_app

    client = TestClient(create_app(lake, reviewer="ann"), base_url=ORIGIN)
    client.headers["origin"] = ORIGIN
    return client


@pytest.mark.slow
def test_the_app_reads_and_labels_while_the_collector_ingests(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    collector = make_collector()
    now = dt.datetime.now(dt.UTC)
    post_lookup_conversation(collector, "live-0", "live-0", now)
    sent = ["live-0"]
    stop = threading.Event()
    failures: list[BaseException] = []

    def ingest() -> None:
        try:
            k = 1
            while not stop.is_set() and k < 200:
                name = f"live-{k}"
                post_lookup_conversation(collector, name, name, now + dt.timedelta(seconds=k))
                sent.append(name)
                k += 1
        except BaseException as exc:  # reported by the test, not lost in the thread
            failures.append(exc)

    with _client(str(lake_dir)) as client:
        wait_for(lambda: client.get("/api/conversations").json()["count"] >= 1, 60)
        worker = threading.Thread(target=ingest)
        worker.start()
        try:
            seen = []
            for k in range(12):
                page = client.get("/api/conversations", params={"limit": 5})
                assert page.status_code == 200, page.text
                seen.append(page.json()["count"])
                assert client.get("/conversations").status_code == 200
                label = client.post(
                    "/api/labels", json={"conversation_id": "live-0", "comment": f"look {k}"}
                )
                assert label.status_code == 201, label.text
            # The app saw conversations arrive, never lost one it had seen.
            assert seen == sorted(seen)
            wait_for(lambda: len(sent) > seen[0] + 5, 120)
            assert client.get("/api/conversations").json()["count"] > seen[0]
        finally:
            stop.set()
            worker.join(timeout=120)
        assert not failures, failures  # every export was acknowledged (200) meanwhile
        count = len(sent)
        wait_for(lambda: client.get("/api/conversations").json()["count"] == count, 60)
        history = client.get(
            "/api/labels", params={"conversation_id": "live-0", "history": "true"}
        ).json()["labels"]
        assert len(history) == 12


def test_the_app_works_on_a_shared_lake(shared_lake: str) -> None:
    from spanscore.examples.synthetic import build_lake

    build_lake(shared_lake, 30)
    with _client(shared_lake) as client:
        page = client.get("/api/conversations", params={"limit": 10}).json()
        assert page["count"] == 30
        rest = client.get("/api/conversations", params={"limit": 50, "after": page["next"]})
        assert len(rest.json()["rows"]) == 20
        first = page["rows"][0]["conversation_id"]
        assert client.get(f"/conversations/{first}").status_code == 200
        made = client.post("/api/labels", json={"conversation_id": first, "passed": False})
        assert made.status_code == 201, made.text
        queue = client.post(
            "/api/queues", json={"name": "shared", "filter": {}, "size": 5, "seed": 3}
        )
        assert queue.status_code == 201, queue.text
        assert len(queue.json()["items"]) == 5
        labels = client.get("/api/labels", params={"conversation_id": first}).json()["labels"]
        assert [x["passed"] for x in labels] == [False]
