"""The review app in-process, on a real evaluated lake (tests/support/report_lake.py): every
page answers from the same read functions as its JSON twin, filters and keyset pages agree with
SQL over the lake, labels and queues are the only writes, and the guard holds (token, same
origin, Content-Security-Policy)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from spanscore import lake as lake_module
from spanscore.evaluation.calibration.agreement import agreement

from ..support.report_lake import PLANTED, PLANTED_MESSAGE, EvaluatedLake

ORIGIN = "http://127.0.0.1:8765"


def sql(review_lake: EvaluatedLake, statement: str, params: list[Any] | None = None) -> list[Any]:
    con = lake_module.connect(str(review_lake.lake), read_only=True)
    try:
        return con.execute(statement, params or []).fetchall()
    finally:
        con.close()


def all_pages(client: Any, **query: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    after = None
    counts = set()
    while True:
        params = {**query, **({"after": after} if after else {})}
        page = client.get("/api/conversations", params=params).json()
        counts.add(page["count"])
        rows += page["rows"]
        after = page["next"]
        if after is None:
            break
    assert len(counts) == 1, counts  # the count is the same on every page
    assert counts.pop() == len(rows)
    return rows


@pytest.mark.parametrize(
    "path",
    ["/", "/conversations", "/queues", "/judge", "/conversations/cs-planted-1"],
)
def test_every_page_answers_and_sends_its_security_headers(client: Any, path: str) -> None:
    page = client.get(path)
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "unsafe-inline" not in csp.split("script-src")[1]
    assert page.headers["x-frame-options"] == "DENY"


def test_the_run_pages_and_compare_show_what_the_api_gives(
    client: Any, review_lake: EvaluatedLake
) -> None:
    history = client.get("/api/runs").json()["suites"]
    runs = [r["run_id"] for s in history for r in s["runs"]]
    assert set(runs) == {review_lake.baseline_run, review_lake.run}
    for run in runs:
        page = client.get(f"/runs/{run}")
        assert page.status_code == 200
        assert run in page.text
        assert client.get(f"/api/runs/{run[:8]}").json()["run"]["run_id"] == run
    compared = client.get(f"/api/compare/{review_lake.baseline_run}/{review_lake.run}").json()
    regressed = [c for c in compared["conversations"] if c["kind"] == "regressed"]
    assert regressed
    assert compared["regressed"] is True
    page = client.get(f"/compare/{review_lake.baseline_run}/{review_lake.run}").text
    for c in regressed:
        assert f'href="/conversations/{quote(c["conversation_id"], safe="/")}' in page
    assert client.get(f"/compare/{review_lake.run}/{review_lake.run}").status_code == 400
    assert client.get("/runs/no-such-run").status_code == 404


def test_keyset_pages_walk_every_conversation_once_newest_first(
    client: Any, review_lake: EvaluatedLake
) -> None:
    rows = all_pages(client, limit=3)
    ids = [r["conversation_id"] for r in rows]
    expected = sql(
        review_lake,
        "SELECT conversation_id FROM spans WHERE conversation_id IS NOT NULL "
        "GROUP BY ALL ORDER BY min(start_time) DESC, conversation_id DESC",
    )
    assert ids == [r[0] for r in expected]
    assert client.get("/api/conversations", params={"after": "not-a-key"}).status_code == 400
    assert client.get("/api/conversations", params={"limit": 100_000}).status_code == 422


@pytest.mark.parametrize(
    ("query", "where"),
    [
        (
            {"text": "laptop STAND"},
            "conversation_id = 'cs-planted-1' OR conversation_id IN "
            "(SELECT conversation_id FROM spans WHERE tool_result ILIKE '%laptop stand%' "
            "OR user_message ILIKE '%laptop stand%' OR response_text ILIKE '%laptop stand%' "
            "OR tool_arguments::VARCHAR ILIKE '%laptop stand%')",
        ),
        ({"text": "100%_"}, "false"),  # LIKE's wildcards are searched as text
        ({"service": "customer-service"}, "true"),
        ({"service": "nobody"}, "false"),
        (
            {"scenario": "auth_cancel_order"},
            "conversation_id IN (SELECT conversation_id FROM "
            "scores WHERE scenario_id = 'auth_cancel_order')",
        ),
        ({"simulated": "true"}, "false"),
        ({"labelled": "false"}, "true"),
    ],
    ids=["text", "wildcards", "service", "no-service", "scenario", "simulated", "unlabelled"],
)
def test_a_filter_selects_what_sql_selects(
    client: Any, review_lake: EvaluatedLake, query: dict[str, str], where: str
) -> None:
    got = {r["conversation_id"] for r in all_pages(client, limit=4, **query)}
    expected = {
        r[0]
        for r in sql(
            review_lake,
            f"SELECT DISTINCT conversation_id FROM spans WHERE conversation_id IS NOT NULL "
            f"AND ({where})",
        )
    }
    assert got == expected
    page = client.get("/conversations", params=query).text
    assert f'<b id="match-count">{len(expected)}</b>' in page


def test_a_failed_metric_of_a_run_selects_its_failing_conversations(
    client: Any, review_lake: EvaluatedLake
) -> None:
    failing = sql(
        review_lake,
        "SELECT metric, list(DISTINCT conversation_id) FROM scores WHERE run_id = ? "
        "AND (passed = false OR error IS NOT NULL) GROUP BY metric",
        [review_lake.run],
    )
    assert failing
    for metric, ids in failing:
        rows = all_pages(client, run=review_lake.run, failed=metric)
        assert {r["conversation_id"] for r in rows} == set(ids), metric
        assert all(metric in r["failing"] for r in rows)


def test_the_conversation_page_holds_its_scores_in_every_run_and_its_raw_spans(
    client: Any, review_lake: EvaluatedLake
) -> None:
    view = client.get("/api/conversations/cs-planted-1").json()
    assert set(view["runs"]) == {review_lake.run, review_lake.baseline_run}
    assert view["shown_run"] == review_lake.run  # the newest run's marks on the calls
    assert view["detail"]["turns"][0]["user_message"] == PLANTED_MESSAGE
    counted = sql(review_lake, "SELECT count(*) FROM scores WHERE conversation_id = 'cs-planted-1'")
    assert len(view["scores"]) == counted[0][0]
    spans = client.get("/api/spans/cs-planted-1", params={"limit": 2}).json()
    assert spans["total"] == view["span_count"]
    assert len(spans["spans"]) == 2
    older = client.get(
        "/api/conversations/cs-planted-1", params={"run": review_lake.baseline_run}
    ).json()
    assert older["shown_run"] == review_lake.baseline_run
    assert client.get("/api/conversations/no-such-conversation").status_code == 404
    assert client.get("/conversations/no-such-conversation").status_code == 404


def test_the_lakes_strings_are_escaped_in_every_page(client: Any) -> None:
    pages = [client.get("/conversations").text, client.get("/conversations/cs-planted-1").text]
    for page in pages:
        assert "<script>window.__pwned" not in page
        assert "<img src=x" not in page
        assert 'href="javascript:' not in page
        assert "</textarea><a" not in page
    # In the conversation's data block, the markup is JSON text that cannot end the block.
    assert "\\u003cscript\\u003ewindow.__pwned" in pages[1]
    assert PLANTED not in pages[1]


def _label(client: Any, **body: Any) -> Any:
    return client.post("/api/labels", json=body)


def test_labels_keep_their_history_and_the_newest_per_reviewer_counts(
    client: Any, review_lake: EvaluatedLake
) -> None:
    cid = "cs-order-status-1"
    assert (
        _label(client, conversation_id=cid, passed=False, comment="wrong order").status_code == 201
    )
    assert (
        _label(client, conversation_id=cid, passed=True, comment="fine after all").status_code
        == 201
    )
    current = client.get("/api/labels", params={"conversation_id": cid}).json()["labels"]
    assert [(x["passed"], x["comment"], x["reviewer"]) for x in current] == [
        (True, "fine after all", "ann")
    ]
    history = client.get("/api/labels", params={"conversation_id": cid, "history": "1"}).json()
    assert len(history["labels"]) == 2
    rows = sql(review_lake, "SELECT count(*) FROM labels WHERE conversation_id = ?", [cid])
    assert rows[0][0] == 2  # labels are data: SQL sees every one


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"conversation_id": "cs-order-status-1"}, 422, "says something"),
        ({"conversation_id": "nope", "passed": True}, 404, "no conversation"),
        ({"conversation_id": "cs-order-status-1", "passed": True, "extra": 1}, 422, "extra"),
        ({"conversation_id": "cs-order-status-1", "judge_agreed": True}, 422, "run_id"),
        (
            {"conversation_id": "cs-order-status-1", "metric": "m", "run_id": "r", "passed": True},
            404,
            "no score",
        ),
    ],
    ids=["empty", "unknown", "extra-field", "agree-without-score", "unknown-score"],
)
def test_a_label_that_cannot_be_stored_says_why(
    client: Any, body: dict[str, Any], status: int, says: str
) -> None:
    answer = _label(client, **body)
    assert answer.status_code == status, answer.text
    assert says in answer.text


def test_agreement_is_computed_live_from_the_labels(
    client: Any, review_lake: EvaluatedLake
) -> None:
    judged = sql(
        review_lake,
        "SELECT conversation_id, passed FROM scores WHERE run_id = ? "
        "AND metric = 'verification_compliance' AND passed IS NOT NULL ORDER BY 1 LIMIT 4",
        [review_lake.run],
    )
    assert len(judged) == 4
    agree = {"metric": "verification_compliance", "run_id": review_lake.run}
    for k, (cid, _passed) in enumerate(judged):
        _label(client, conversation_id=cid, judge_agreed=k != 0, **agree).raise_for_status()
    metrics = client.get("/api/judge", params={"metric": "verification_compliance"}).json()
    (m,) = metrics["metrics"]
    human = [
        ("pass" if p else "fail") if k else ("fail" if p else "pass")
        for k, (_, p) in enumerate(judged)
    ]
    judge = ["pass" if p else "fail" for _, p in judged]
    expected = agreement(list(zip(human, judge, strict=True)))
    assert m["agreement"] == expected.to_dict()
    assert m["agreement"]["accuracy"] == pytest.approx(0.75)
    assert [d["conversation_id"] for d in m["disagreements"]] == [judged[0][0]]
    page = client.get("/judge").text
    assert f'href="/conversations/{judged[0][0]}' in page
    assert "75%" in page


def test_a_queue_from_a_runs_failures_is_sampled_by_its_seed_and_tracks_progress(
    client: Any, review_lake: EvaluatedLake
) -> None:
    failing = sql(
        review_lake,
        "SELECT count(DISTINCT conversation_id) FROM scores WHERE run_id = ? "
        "AND (passed = false OR error IS NOT NULL)",
        [review_lake.run],
    )[0][0]
    assert failing >= 2
    size = failing  # all of them, in the order the seed draws
    first = client.post(
        "/api/queues", json={"name": "night-1", "run": review_lake.run, "size": size, "seed": 7}
    )
    second = client.post(
        "/api/queues", json={"name": "night-2", "run": review_lake.run, "size": size, "seed": 7}
    )
    assert first.status_code == second.status_code == 201, first.text
    items = [i["conversation_id"] for i in first.json()["items"]]
    assert items == [i["conversation_id"] for i in second.json()["items"]]
    assert len(items) == size
    again = client.post("/api/queues", json={"name": "night-1", "run": review_lake.run})
    assert again.status_code == 400
    assert "exists" in again.text
    dave = {"spanscore_reviewer": "dave"}
    client.post(
        "/api/labels",
        json={"conversation_id": items[0], "passed": False, "queue": "night-1"},
        cookies=dave,
    ).raise_for_status()
    view = client.get("/api/queues/night-1", cookies=dave).json()
    assert view["reviewer"] == "dave"
    assert view["done"] == 1
    assert view["items"][0]["done"]
    assert view["next"] == 1
    # Another reviewer's progress is their own.
    other = client.get("/api/queues/night-1", cookies={"spanscore_reviewer": "bob"}).json()
    assert other["done"] == 0
    assert other["next"] == 0
    listed = {q["queue"]: q for q in client.get("/api/queues").json()["queues"]}
    assert listed["night-1"]["labelled"] >= 1
    assert listed["night-1"]["items"] == size
    assert client.get("/queues/night-1").status_code == 200
    assert client.post("/api/queues", json={"name": "x", "run": "nope"}).status_code == 404
    assert (
        client.post("/api/queues", json={"name": "bad name!", "run": review_lake.run}).status_code
        == 422
    )


def test_a_queue_from_a_filter_holds_the_filtered_conversations(client: Any) -> None:
    made = client.post(
        "/api/queues",
        json={"name": "stands", "filter": {"text": "laptop stand"}, "sample": "newest"},
    )
    assert made.status_code == 201, made.text
    assert "cs-planted-1" in [i["conversation_id"] for i in made.json()["items"]]


def test_writes_need_the_apps_own_origin_and_json(client: Any) -> None:
    body = {"conversation_id": "cs-order-status-1", "passed": True}
    no_origin = client.post("/api/labels", json=body, headers={"origin": ""})
    assert no_origin.status_code == 403
    elsewhere = client.post("/api/labels", json=body, headers={"origin": "http://evil.example"})
    assert elsewhere.status_code == 403
    assert "origin" in elsewhere.text
    form = client.post("/api/labels", data=body)
    assert form.status_code == 403
    assert "JSON" in form.text


def test_the_app_writes_nothing_but_labels_and_queues(
    client: Any, review_lake: EvaluatedLake
) -> None:
    tables = ["spans", "logs", "scores", "eval_runs", "judge_cache", "trajectory_steps"]
    counts = "SELECT " + ", ".join(f"(SELECT count(*) FROM {t})" for t in tables)
    before = sql(review_lake, counts)
    for path in [
        "/",
        "/conversations",
        "/judge",
        "/queues",
        "/conversations/cs-planted-1",
        f"/runs/{review_lake.run}",
        f"/compare/{review_lake.baseline_run}/{review_lake.run}",
    ]:
        assert client.get(path).status_code == 200
    _label(client, conversation_id="cs-planted-1", comment="looked at it").raise_for_status()
    assert sql(review_lake, counts) == before


def test_the_openapi_description_names_every_api_route(client: Any) -> None:
    spec = client.get("/api/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    from starlette.routing import Route

    routes = {
        (r.path.replace(":path}", "}"), m.lower())
        for r in client.app.routes
        if isinstance(r, Route) and r.path.startswith("/api/")
        for m in (r.methods or ())
        if m != "HEAD"
    }
    described = {(p, m) for p, ops in spec["paths"].items() for m in ops}
    assert routes == described
    body = spec["paths"]["/api/labels"]["post"]["requestBody"]["content"]["application/json"]
    schema = spec["components"]["schemas"][body["schema"]["$ref"].rsplit("/", 1)[1]]
    assert {"conversation_id", "metric", "run_id", "passed", "value", "label", "comment"} <= set(
        schema["properties"]
    )


def test_with_a_token_every_request_needs_it_and_the_sign_in_url_sets_a_cookie(
    review_lake: EvaluatedLake,
) -> None:
    from starlette.testclient import TestClient

    from spanscore.ui import create_app

    app = create_app(str(review_lake.lake), tokens=["carol:s3cret"])
    with TestClient(app, base_url=ORIGIN, follow_redirects=False) as c:
        assert c.get("/").status_code == 401
        assert c.get("/api/runs").status_code == 401
        assert c.get("/api/runs", headers={"authorization": "Bearer wrong"}).status_code == 401
        ok = c.get("/api/me", headers={"authorization": "Bearer s3cret"})
        assert ok.json() == {"reviewer": "carol"}  # the token names the reviewer
        signed = c.get("/conversations?token=s3cret&text=x")
        assert signed.status_code == 303
        assert signed.headers["location"] == "/conversations?text=x"
        cookie = signed.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie.replace("Strict", "strict")
        assert c.get("/conversations?text=x").status_code == 200  # the cookie now
        post = c.post(
            "/api/labels",
            json={"conversation_id": "cs-planted-1", "comment": "ok"},
            headers={"origin": ORIGIN},
        )
        assert post.status_code == 201
        assert post.json()["reviewer"] == "carol"


def test_the_judges_prompt_is_rebuilt_from_the_runs_suite(
    client: Any, review_lake: EvaluatedLake
) -> None:
    exchange = client.get(
        "/api/judge/exchange",
        params={
            "run": review_lake.run,
            "conversation_id": "cs-cancel-2",
            "metric": "verification_compliance",
        },
    ).json()
    assert exchange["note"] is None
    assert exchange["answer"]["score"] is not None
    prompt = "\n".join(m["content"] for m in exchange["messages"])
    assert "ORD-1003" in prompt  # the conversation, as the judge read it
    missing = client.get("/api/judge/exchange", params={"run": review_lake.run})
    assert missing.status_code == 400
    assert "conversation_id" in missing.text


def test_ui_refuses_a_public_address_without_a_token(review_lake: EvaluatedLake) -> None:
    import subprocess
    import sys

    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "spanscore.cli",
            "ui",
            "--lake",
            str(review_lake.lake),
            "--host",
            "0.0.0.0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2
    assert "--token" in refused.stderr


SUITE = (
    "# suites the team promotes production failures into\n"
    "name: promoted\nmetrics:\n  - {type: efficiency}  # every conversation\n"
)


def test_promote_writes_only_into_the_suites_the_app_was_given(
    review_lake: EvaluatedLake, tmp_path: Any
) -> None:
    from starlette.testclient import TestClient

    from spanscore.ui import create_app

    allowed, other = tmp_path / "promoted.yaml", tmp_path / "other.yaml"
    allowed.write_text(SUITE)
    other.write_text(SUITE)
    app = create_app(str(review_lake.lake), promote_into=[str(allowed)])
    with TestClient(app, base_url=ORIGIN) as c:
        c.headers["origin"] = ORIGIN
        body = {"conversation_id": "cs-cancel-2", "suite": str(allowed), "dry_run": True}
        preview = c.post("/api/promote", json=body)
        assert preview.status_code == 200, preview.text
        assert "cs-cancel-2" in preview.json()["text"]
        assert allowed.read_text() == SUITE  # a preview writes nothing
        refused = c.post("/api/promote", json={**body, "suite": str(other), "dry_run": False})
        assert refused.status_code == 400
        assert "--promote-into" in refused.text
        assert other.read_text() == SUITE
        written = c.post("/api/promote", json={**body, "dry_run": False})
        assert written.status_code == 201, written.text
        assert allowed.read_text() == SUITE + written.json()["text"]  # comments and order kept
        clash = c.post(
            "/api/promote",
            json={**body, "dry_run": False, "scenario_id": written.json()["scenario_id"]},
        )
        assert clash.status_code == 400
    from spanscore.evaluation import load_suite

    assert written.json()["scenario_id"] in [s.id for s in load_suite(allowed).suite.scenarios]


def test_a_long_conversation_opens_with_its_first_steps(client: Any) -> None:
    full = client.get("/api/conversations/cs-cancel-2").json()
    assert full["steps_shown"] == full["step_count"] > 2
    cut = client.get("/api/conversations/cs-cancel-2", params={"max_steps": 2}).json()
    assert (cut["steps_shown"], cut["step_count"]) == (2, full["step_count"])
    assert [s["kind"] for t in cut["detail"]["turns"] for s in t["steps"]] == [
        s["kind"] for t in full["detail"]["turns"] for s in t["steps"]
    ][:2]
    page = client.get("/conversations/cs-cancel-2", params={"max_steps": 2}).text
    assert 'id="steps-cut"' in page
    assert 'id="steps-cut"' not in client.get("/conversations/cs-cancel-2").text
