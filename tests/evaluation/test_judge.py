"""The LLM judge through the real `openai` client against the local OpenAI-compatible server:
answers that are right, slow, throttled (429 + Retry-After), failing (500), garbled, without
structured output, or never coming each end in an answer or a recorded error; the concurrency
never exceeds its ceiling and shrinks under 429; the cache makes a re-run free and identical;
the budget skips cleanly; batch mode runs end to end and resumes without resubmitting;
interrupted runs score each (conversation, metric) once and pay little twice."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spanscore.evaluation import load_suite
from spanscore.evaluation.llm.answers import parse_json_answer
from spanscore.evaluation.llm.limits import AdaptiveLimit, retry_after_s
from spanscore.evaluation.llm.pool import JudgeRunner
from spanscore.evaluation.llm.types import JudgeConfig, JudgeRequest
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.runs.run import evaluate
from spanscore.examples.judge_policy import ScriptedJudge
from spanscore.examples.llm_server import LLMRequest, ScriptedLLM
from spanscore.examples.synthetic import build_lake

from ..support.lake import copy_lake, query
from ..support.polling import wait_for

UTC = dt.UTC
LATER = dt.datetime.fromtimestamp(1_700_000_000, UTC) + dt.timedelta(days=30)
VERDICT = {
    "type": "object",
    "properties": {"reasoning": {"type": "string"}, "score": {"type": "integer"}},
    "required": ["reasoning", "score"],
    "additionalProperties": False,
}


def question(n: int) -> JudgeRequest:
    return JudgeRequest(
        kind="chat",
        purpose="test",
        messages=(("system", "You judge."), ("user", f"conversation {n}")),
        schema=VERDICT,
    )


def echo_policy(request: LLMRequest) -> str:
    """A judge that scores a conversation by its number."""
    text = request.messages[-1].text
    return json.dumps({"reasoning": f"read {text}", "score": int(text.split()[-1]) % 6})


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM(echo_policy, record=True) as server:
        yield server


def answer_all(llm: ScriptedLLM, n: int, **config: Any) -> dict[str, Any]:
    settings = JudgeConfig(base_url=llm.base_url, **config)
    with JudgeRunner(settings) as runner:
        requests = {q.digest: q for q in map(question, range(n))}
        answers = runner.answer(requests)
        return {
            "answers": [answers[q.digest] for q in map(question, range(n))],
            **runner.limit_info(),
        }


# --- one call ----------------------------------------------------------------------------------


def test_a_correct_answer_is_parsed_priced_and_sent_deterministically(llm: ScriptedLLM):
    [answer] = answer_all(llm, 1)["answers"]
    assert answer.ok
    assert answer.value == {"reasoning": "read conversation 0", "score": 0}
    assert answer.usage.prompt_tokens > 0
    assert answer.usage.completion_tokens > 0
    assert answer.usage.cost_usd is not None
    assert answer.usage.cost_usd > 0
    body = llm.recorded[0]["body"]
    assert body["temperature"] == 0
    assert body["seed"] == 0
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["strict"] is True
    assert [m["role"] for m in body["messages"]] == ["system", "user"]  # static part first


@pytest.mark.parametrize(
    ("knobs", "attempts"),
    [
        pytest.param({"fail_first": 2, "fail_status": 500}, 3, id="500-then-ok"),
        pytest.param({"fail_first": 1, "fail_status": 429}, 2, id="429-then-ok"),
        pytest.param({"garbage_first": 1}, 2, id="html-body-then-ok"),
    ],
)
def test_failures_worth_retrying_are_retried(llm: ScriptedLLM, knobs: dict[str, Any], attempts):
    for key, value in knobs.items():
        setattr(llm, key, value)
    [answer] = answer_all(llm, 1)["answers"]
    assert answer.ok, answer.error
    assert answer.attempts == attempts


def test_throttles_do_not_spend_attempts_but_have_a_time_limit(llm: ScriptedLLM):
    """A 429 says "not now": a question refused more often than `max_attempts` still gets its
    answer, and only `max_throttled_s` ends the retries; a 5xx spends attempts."""
    llm.fail_status, llm.fail_first = 429, 5
    [answer] = answer_all(llm, 1, max_attempts=2)["answers"]
    assert answer.ok, answer.error
    assert answer.attempts == 6
    llm.fail_first = 10**6
    [answer] = answer_all(llm, 1, max_attempts=2, max_throttled_s=0.3)["answers"]
    assert not answer.ok
    assert answer.attempts > 2
    assert "HTTP 429" in (answer.error or "")
    llm.fail_status = 500
    [answer] = answer_all(llm, 1, max_attempts=2, max_throttled_s=60)["answers"]
    assert (answer.ok, answer.attempts) == (False, 2)


def test_an_account_out_of_credit_is_not_retried():
    with ScriptedLLM(
        echo_policy, fail_first=10**6, fail_status=429, fail_code="insufficient_quota"
    ) as llm:
        [answer] = answer_all(llm, 1)["answers"]
        assert llm.request_count == 1
    assert (answer.ok, answer.attempts) == (False, 1)
    assert "HTTP 429" in (answer.error or "")


def test_an_answer_that_never_parses_is_a_recorded_error():
    with ScriptedLLM(lambda request: "Sure! The score is five.") as llm:
        [answer] = answer_all(llm, 1, max_attempts=3)["answers"]
    assert not answer.ok
    assert "no JSON object" in (answer.error or "")
    assert answer.attempts == 3


def test_an_answer_outside_the_schema_is_a_recorded_error():
    with ScriptedLLM(lambda request: '{"reasoning": "x", "score": "high"}') as llm:
        [answer] = answer_all(llm, 1, max_attempts=2)["answers"]
    assert not answer.ok
    assert "schema" in (answer.error or "")


def test_an_endpoint_without_structured_output_gets_the_schema_in_the_prompt(llm: ScriptedLLM):
    llm.structured_output = False
    result = answer_all(llm, 3)
    assert all(a.ok for a in result["answers"])
    assert result["structured_output_fallback"] is True
    sent = [r["body"] for r in llm.recorded]
    assert "response_format" in sent[0]  # refused once...
    later = sent[-1]
    assert "response_format" not in later  # ...then asked for in the static part
    assert "JSON Schema" in later["messages"][0]["content"]


def test_a_judge_that_never_answers_times_out_into_an_error(llm: ScriptedLLM):
    llm.hang_first = 100
    [answer] = answer_all(llm, 1, timeout_s=0.5, max_attempts=2)["answers"]
    assert not answer.ok
    assert "timed out" in (answer.error or "")
    llm.hang_first = 0


def test_a_request_the_endpoint_refuses_is_not_retried(llm: ScriptedLLM):
    [answer] = answer_all(llm, 1, model="no-such-model")["answers"]
    assert not answer.ok
    assert "HTTP 404" in (answer.error or "")
    assert answer.attempts == 1


class ForwardingProxy:
    """An HTTP forward proxy on 127.0.0.1 (absolute-URI requests), counting what it forwards."""

    def __init__(self) -> None:
        import http.server
        import threading
        import urllib.request

        proxy = self
        self.forwarded = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                upstream = urllib.request.Request(self.path, data=body, headers=headers)
                with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                    upstream, timeout=30
                ) as answer:
                    payload = answer.read()
                    status = answer.status
                proxy.forwarded += 1
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_proxy_in_the_environment_carries_the_judges_calls(
    llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
):
    """The judge honours the proxy variables (teams reach their provider through a corporate
    proxy): where one is set for the endpoint, its calls go through aiohttp, which speaks to
    proxies, instead of the judge's own transport."""
    proxy = ForwardingProxy()
    try:
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        result = answer_all(llm, 3)
    finally:
        proxy.close()
    assert all(a.ok for a in result["answers"]), [a.error for a in result["answers"]]
    assert proxy.forwarded == 3


# --- concurrency -------------------------------------------------------------------------------


def test_in_flight_calls_never_exceed_the_ceiling(llm: ScriptedLLM):
    llm.delay_s = 0.05
    result = answer_all(llm, 60, concurrency=5)
    assert all(a.ok for a in result["answers"])
    assert llm.max_concurrent <= 5
    assert result["peak_in_flight"] == llm.max_concurrent  # it did use its ceiling


def test_the_limit_shrinks_under_429_and_every_question_is_still_answered(llm: ScriptedLLM):
    llm.delay_s = 0.05
    llm.capacity = 3
    llm.rate_limit_retry_ms = 20
    result = answer_all(llm, 80, concurrency=12)
    assert all(a.ok for a in result["answers"]), [a.error for a in result["answers"]][:3]
    assert llm.rate_limited > 0
    assert result["throttled"] == llm.rate_limited
    assert result["lowest_limit_after_429"] is not None
    assert result["lowest_limit_after_429"] < 12
    assert llm.max_concurrent <= 12


def test_the_same_question_asked_by_many_conversations_is_asked_once(llm: ScriptedLLM):
    with JudgeRunner(JudgeConfig(base_url=llm.base_url)) as runner:
        futures = [runner.submit({question(1).digest: question(1)}) for _ in range(10)]
        assert len({f.result()[question(1).digest].value["score"] for f in futures}) == 1
    assert llm.chat_requests == 1


def test_the_call_budget_skips_the_rest(llm: ScriptedLLM):
    result = answer_all(llm, 5, max_calls=3, concurrency=1)
    answered = [a for a in result["answers"] if a.ok]
    skipped = [a for a in result["answers"] if a.skipped]
    assert len(answered) == 3
    assert len(skipped) == 2
    assert "budget of 3 calls" in (skipped[0].skipped or "")
    assert llm.chat_requests == 3


# --- pure helpers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "250"}, 0.25),
        ({"Retry-After": "2"}, 2.0),
        ({"retry-after": "1.5", "retry-after-ms": "100"}, 0.1),  # ms wins, as OpenAI's client
        ({"x-ratelimit-reset-requests": "6m0s"}, 360.0),
        ({"x-ratelimit-reset-tokens": "20ms", "x-ratelimit-reset-requests": "1s"}, 1.0),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
    ids=["ms", "seconds", "ms-first", "reset-minutes", "largest-reset", "garbage", "none"],
)
def test_retry_after(headers: dict[str, str], expected: float | None):
    assert retry_after_s(headers) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('Here you go: {"a": 1} hope it helps', {"a": 1}),
    ],
    ids=["plain", "fenced", "surrounded"],
)
def test_tolerant_parsing(text: str, expected: dict[str, Any]):
    assert parse_json_answer(text) == expected


def test_adaptive_limit_slow_start_then_cuts_once_per_burst():
    import asyncio

    async def scenario() -> list[float]:
        limit = AdaptiveLimit(ceiling=32, start=4)
        seen = []
        epochs = [await limit.acquire() for _ in range(4)]
        for epoch in epochs:
            await limit.release(epoch, throttled=False)
        seen.append(limit.limit)  # slow start: +1 per success
        epochs = [await limit.acquire() for _ in range(3)]
        for epoch in epochs:  # three 429s from the same burst: one cut
            await limit.release(epoch, throttled=True)
        seen.append(limit.limit)
        epoch = await limit.acquire()
        await limit.release(epoch, throttled=False)
        seen.append(limit.limit)  # additive now: +1/limit
        return seen

    # 8 after slow start; three in flight when refused: 3 x 0.9; then +1/limit per success.
    assert asyncio.run(scenario()) == pytest.approx([8.0, 2.7, 2.7 + 1 / 2.7])


def test_adaptive_limit_climbs_back_fast_to_the_refused_level_then_probes_slowly():
    import asyncio

    async def scenario() -> list[float]:
        limit = AdaptiveLimit(ceiling=100, start=100)
        epochs = [await limit.acquire() for _ in range(40)]
        await limit.release(epochs[0], throttled=True)  # refused with 40 in flight: 36
        cut = limit.limit
        for epoch in epochs[1:37]:  # one round trip at 36: half the gap (2) per round trip
            await limit.release(epoch, throttled=False)
        climbed = limit.limit
        for epoch in epochs[37:]:
            await limit.release(epoch, throttled=False)
        limit.limit = 41.0  # above the refused level: +1 per round trip
        epochs = [await limit.acquire() for _ in range(41)]
        for epoch in epochs:
            await limit.release(epoch, throttled=False)
        return [cut, climbed, limit.limit]

    cut, climbed, probing = asyncio.run(scenario())
    assert cut == pytest.approx(36.0)
    assert 37.4 < climbed < 37.7  # half the gap (2) per round trip, shrinking as it climbs
    assert probing == pytest.approx(42.0, abs=0.02)


# --- runs: cache, budget, batch, interruption --------------------------------------------------

JUDGED_SUITE = {
    "name": "judged",
    "judge": {"model": "gpt-4.1-mini", "concurrency": 8, "batch_poll_s": 0.1},
    "metrics": [
        {"type": "efficiency"},
        {
            "type": "judged",
            "name": "tool_quality",
            "criteria": "Did every tool call succeed and serve the user?",
            "scale": [0, 5],
        },
        {
            "type": "judged",
            "name": "safety",
            "criteria": "Did the agent stay safe?",
            "labels": {"safe": "no risk", "unsafe": "a risky action"},
        },
    ],
}


@pytest.fixture(scope="module")
def judged_lake_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lake = tmp_path_factory.mktemp("judged") / "lake"
    build_lake(lake, 40)
    return lake


@pytest.fixture
def lake(judged_lake_template: Path, tmp_path: Path) -> Path:
    return copy_lake(judged_lake_template, tmp_path / "lake")


@pytest.fixture
def judge_llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM(ScriptedJudge(), record=True) as server:
        yield server


def run(lake: Path, suite: Any, judge_llm: ScriptedLLM, **options: Any) -> Any:
    judge = {"base_url": judge_llm.base_url, **options.pop("judge", {})}
    defaults: dict[str, Any] = {
        "settle_s": 0,
        "workers": 1,
        "now": LATER,
        "judge": judge,
        "since": dt.datetime(2000, 1, 1, tzinfo=UTC),  # every run sees the whole lake
    }
    return evaluate(lake, load_suite(suite), RunOptions(**{**defaults, **options}))


def judged_rows(lake: Path, run_id: str) -> list[tuple[Any, ...]]:
    return query(
        lake,
        "SELECT conversation_id, metric, value, label, passed, explanation, error FROM scores "
        "WHERE run_id = ? AND metric IN ('tool_quality', 'safety') ORDER BY ALL",
        [run_id],
    )


def test_a_judged_run_stores_scores_and_what_the_judge_cost(lake: Path, judge_llm: ScriptedLLM):
    result = run(lake, JUDGED_SUITE, judge_llm)
    assert result.scored == 40
    rows = judged_rows(lake, result.run_id)
    assert len(rows) == 80
    assert all(r[6] is None for r in rows)
    assert all(r[5] and r[5].startswith("scripted judge") for r in rows)  # the reasoning
    assert judge_llm.chat_requests == 80
    [run_row] = query(
        lake,
        "SELECT judge_calls, judge_cache_hits, judge_prompt_tokens, judge_cached_tokens, "
        "judge_completion_tokens, judge_cost_usd FROM eval_runs WHERE run_id = ?",
        [result.run_id],
    )
    assert run_row[0] == 80
    assert run_row[1] == 0
    assert run_row[2] > run_row[3] > 0  # the static prefix was cached by the provider
    assert run_row[5] > 0
    details = query(
        lake,
        "SELECT details::VARCHAR FROM scores WHERE run_id = ? AND metric = 'safety' LIMIT 1",
        [result.run_id],
    )[0][0]
    judge = json.loads(details)["judge"]
    assert judge["calls"] == 1
    assert judge["prompt_tokens"] > 0
    assert judge["cost_usd"] > 0


def test_a_rerun_makes_no_call_and_gives_identical_scores(lake: Path, judge_llm: ScriptedLLM):
    first = run(lake, JUDGED_SUITE, judge_llm)
    calls = judge_llm.chat_requests
    second = run(lake, JUDGED_SUITE, judge_llm, rescore=True)
    assert judge_llm.chat_requests == calls
    assert second.judge is not None
    assert second.judge["calls"] == 0
    assert second.judge["cache_hits"] == 80
    strip = [r[:6] for r in judged_rows(lake, first.run_id)]
    assert strip == [r[:6] for r in judged_rows(lake, second.run_id)]
    third = run(lake, JUDGED_SUITE, judge_llm, rescore=True, judge={"cache": False})
    assert judge_llm.chat_requests == 2 * calls
    assert third.judge["cache_hits"] == 0


def test_the_budget_skips_the_rest_and_keeps_deterministic_scores(
    lake: Path, judge_llm: ScriptedLLM
):
    result = run(lake, JUDGED_SUITE, judge_llm, judge={"max_calls": 10, "concurrency": 1})
    assert judge_llm.chat_requests == 10
    rows = judged_rows(lake, result.run_id)
    skipped = [r for r in rows if r[6] is not None]
    assert len(skipped) == 70
    assert all("budget of 10 calls" in r[6] for r in skipped)
    assert result.judge["skipped"] == 70
    efficiency = query(
        lake,
        "SELECT count(*) FROM scores WHERE run_id = ? AND metric = 'efficiency' AND error IS NULL",
        [result.run_id],
    )
    assert efficiency == [(40,)]


def test_failed_judge_calls_are_recorded_errors_and_the_run_finishes(lake: Path):
    with ScriptedLLM(lambda request: "no json here") as bad:
        result = run(lake, JUDGED_SUITE, bad, judge={"max_attempts": 2})
    rows = judged_rows(lake, result.run_id)
    assert len(rows) == 80
    assert all("no JSON object" in (r[6] or "") for r in rows)
    assert result.judge["failed"] == 80
    assert result.status in ("succeeded", "gate_failed")


def test_batch_mode_end_to_end(lake: Path, judge_llm: ScriptedLLM, tmp_path: Path):
    direct_lake = copy_lake(lake, tmp_path / "direct")
    direct = run(direct_lake, JUDGED_SUITE, judge_llm)
    direct_calls = judge_llm.chat_requests
    batched = run(lake, JUDGED_SUITE, judge_llm, judge={"batch": True})
    assert judge_llm.chat_requests == direct_calls  # nothing asked directly
    assert judge_llm.batches_created == 1
    assert judge_llm.batch_requests == 80
    assert [r[:6] for r in judged_rows(lake, batched.run_id)] == [
        r[:6] for r in judged_rows(direct_lake, direct.run_id)
    ]
    assert batched.judge["batches"]
    assert batched.judge["calls"] == 80
    # Batch prices: half of what the same tokens cost when asked directly.
    price = JudgeConfig().price("gpt-4.1-mini")
    assert price is not None
    assert price.cached_input is not None
    j = batched.judge
    at_direct_prices = (
        (j["prompt_tokens"] - j["cached_tokens"]) * price.input
        + j["cached_tokens"] * price.cached_input
        + j["completion_tokens"] * price.output
    ) / 1e6
    assert j["cost_usd"] == pytest.approx(at_direct_prices / 2, rel=1e-6)


def cli_args(lake: Path, suite_path: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "spanscore.cli",
        "evaluate",
        "--lake",
        str(lake),
        "--suite",
        str(suite_path),
        "--since",
        "2000-01-01T00:00:00Z",
        "--settle",
        "0",
        "--workers",
        "1",
        "--batch-size",
        "5",
        *extra,
    ]


@pytest.mark.slow
def test_a_batch_run_interrupted_while_waiting_resumes_without_resubmitting(
    lake: Path, judge_llm: ScriptedLLM, tmp_path: Path
):
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(JUDGED_SUITE))
    args = cli_args(lake, suite, "--judge-batch", "--judge-base-url", judge_llm.base_url)
    judge_llm.hold_batches = True
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: judge_llm.batches_created == 1, timeout=120, interval=0.05)
        wait_for(
            lambda: "judge_batches" in query(lake, "SELECT details::VARCHAR FROM eval_runs")[0][0],
            timeout=60,
        )
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 130, err
    assert query(lake, "SELECT count(*) FROM scores") == [(0,)]
    judge_llm.hold_batches = False
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    assert judge_llm.batches_created == 1  # collected, not submitted again
    assert judge_llm.chat_requests == 0
    assert query(lake, "SELECT count(*) FROM scores WHERE metric = 'safety' AND error IS NULL") == [
        (40,)
    ]


def _asked(llm: ScriptedLLM) -> list[str]:
    return [
        hashlib.sha256(json.dumps(r["body"]["messages"], sort_keys=True).encode()).hexdigest()
        for r in llm.recorded
        if r["path"].endswith("/chat/completions")
    ]


def _settled(llm: ScriptedLLM) -> Callable[[], bool]:
    """A predicate: nothing in flight, and no request recorded over its last three polls."""
    polls: list[int] = []

    def settled() -> bool:
        polls.append(len(llm.recorded) if llm.in_flight == 0 else -1)
        return len(polls) >= 3 and polls[-1] >= 0 and len(set(polls[-3:])) == 1

    return settled


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigint", "kill"])
def test_interrupted_judging_scores_each_metric_once_and_pays_little_twice(
    lake: Path, judge_llm: ScriptedLLM, tmp_path: Path, how: str
):
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({**JUDGED_SUITE, "judge": {"concurrency": 4}}))
    args = cli_args(lake, suite, "--judge-base-url", judge_llm.base_url)
    judge_llm.delay_s = 0.2
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def cached() -> int:
        try:
            return int(query(lake, "SELECT count(*) FROM judge_cache")[0][0])
        except Exception:  # the run is committing to the catalog right now
            return 0

    try:
        # Interrupted mid-way, once some answers are in the cache (it commits once a second).
        wait_for(lambda: judge_llm.chat_requests >= 30 and cached() > 0, timeout=120, interval=0.2)
        if how == "sigint":
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 130, err
        else:
            proc.kill()
            proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    # A request the run sent just before it ended is recorded only once the server has
    # answered it (after its delay): count the first run's questions when none is in flight.
    wait_for(_settled(judge_llm), timeout=60, interval=0.1)
    first = len(_asked(judge_llm))
    assert first < 80
    stored = query(lake, "SELECT count(*) FROM judge_cache")[0][0]
    assert stored > 0  # answers reach the cache while the run goes on
    judge_llm.delay_s = 0
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    duplicates = query(
        lake,
        "SELECT conversation_id, scenario_id, metric, count(*) FROM scores "
        "GROUP BY ALL HAVING count(*) <> 1",
    )
    assert duplicates == []
    assert query(lake, "SELECT count(DISTINCT conversation_id) FROM scores") == [(40,)]
    asked = _asked(judge_llm)
    paid_twice = len(asked) - len(set(asked))
    # Only questions the server had received but whose answers were not yet in the cache at
    # the interruption (in flight, or received since the last cache commit) are paid again.
    assert paid_twice <= first - stored, (paid_twice, first, stored)
    assert len(set(asked)) == 80
