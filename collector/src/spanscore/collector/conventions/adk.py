"""Google ADK's legacy schema (ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1): google.genai requests
and responses in `gcp.vertex.agent.*` attributes. Its current schema is the GenAI form.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .messages import Message, content_blocks, json_or_value


def _genai_contents(contents: Any) -> list[Message]:
    """google.genai `Content` objects (role `user` / `model`) as canonical messages."""
    messages = []
    for content in contents if isinstance(contents, list) else []:
        if not isinstance(content, dict):
            continue
        texts, calls, results = content_blocks(content)
        role = "assistant" if content.get("role") == "model" else content.get("role")
        message: Message = {"role": role, "text": "\n".join(texts) or None, "tool_calls": calls}
        if results:
            message["tool_results"] = results
        messages.append(message)
    return messages


def adk_messages(
    attrs: Mapping[str, Any], events: list[dict[str, Any]]
) -> tuple[list[Message], list[Message]]:
    """`gcp.vertex.agent.llm_request` (a google.genai request: `contents`) and `.llm_response`
    (`content`) of ADK's `call_llm` span (ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1)."""
    request = json_or_value(attrs.get("gcp.vertex.agent.llm_request"))
    response = json_or_value(attrs.get("gcp.vertex.agent.llm_response"))
    inputs = _genai_contents(request.get("contents")) if isinstance(request, dict) else []
    outputs = _genai_contents([response.get("content")]) if isinstance(response, dict) else []
    return inputs, outputs
