"""The Agents SDK version of the customer-service example runs every scripted conversation
against the local ScriptedLLM and executes the tools the plans call for."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("agents")

from openai import AsyncOpenAI

from spanscore.examples.customer_service.scripted import conversations
from spanscore.examples.customer_service.store import Store
from spanscore.examples.llm_server import ScriptedLLM, ScriptedPolicy


def test_every_scripted_conversation_runs() -> None:
    from agents.tracing import set_tracing_disabled

    from spanscore.examples.customer_service.agents_sdk import run_conversation

    plans = conversations()
    set_tracing_disabled(True)  # no processor here: the shim's own tests cover the spans
    try:
        with ScriptedLLM(ScriptedPolicy()) as llm:
            client = AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0)

            async def everything() -> list[list[dict[str, Any]]]:  # one loop: one client
                return [await run_conversation(client, Store(), plan) for plan in plans]

            transcripts = asyncio.run(everything())
            assert not llm.errors, llm.errors
    finally:
        set_tracing_disabled(False)
    for plan, transcript in zip(plans, transcripts, strict=True):
        called = [e["name"] for e in transcript if e["type"] == "tool_call"]
        planned = [name for turn in plan.turns for step in turn.steps for name, _ in step]
        assert called == planned, plan.conversation_id
        replies = [e["text"] for e in transcript if e["type"] == "assistant"]
        assert replies == [t.reply for t in plan.turns]
