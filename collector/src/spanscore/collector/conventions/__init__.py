"""Reading producer conventions into the lake's extracted columns: the one extraction point.

Each convention is data (which attributes mean what) plus small functions where data is not
enough (message lists). The collector calls `Extractor.extract` once per span at ingest; the
result fills the `spans` columns named in `FIELDS`.

Conventions read, first match wins:
- OpenInference (Phoenix): `openinference.span.kind`, `tool.name`, `input.value` /
  `output.value`, flattened `llm.input_messages.N.message...` / `llm.output_messages...`.
- OpenLLMetry (Traceloop): `traceloop.span.kind`, `traceloop.entity.*`, and the indexed
  `gen_ai.prompt.N.*` / `gen_ai.completion.N.*` messages of its older releases (its current
  releases write the GenAI form below).
- The Vercel AI SDK: `ai.operationId`, `ai.toolCall.*`, messages in `ai.prompt.messages` (or
  `ai.prompt`) and `ai.response.toolCalls` / `ai.response.text`.
- Google ADK's legacy schema: `gcp.vertex.agent.*` (its current schema is the GenAI form).
- OpenTelemetry GenAI: `gen_ai.*` attributes; messages in `gen_ai.input.messages` /
  `gen_ai.output.messages` (`tool_call` and `tool_call_response` parts; `response` or `result`),
  or, in the deprecated form, span events `gen_ai.user.message`, `gen_ai.assistant.message`,
  `gen_ai.tool.message`, `gen_ai.choice`.

Messages of every convention are first turned into one canonical list
(`{"role", "text", "tool_calls": [{"id", "name", "arguments"}], "tool_results": [{"id",
"result"}]}`), from
which the model call's new user message, requested tool calls, received tool results and
response text are read the same way.

The package, by job:
- `producers`: the conventions as data (`Convention` objects, one ordered tuple
  `CONVENTIONS`), and the conversation-id keys. Adding a producer is an entry there.
- `messages`: the canonical message, the readers every convention shares, and the summary of
  a model call's messages.
- `genai`, `indexed`, `adk`, `vercel`: the message readers of each family of producers.
- `extract`: `Extractor`, which reads one span with them.
"""

from .extract import Extractor
from .genai import log_record_messages
from .producers import CONVENTIONS, CONVERSATION_KEYS, FIELDS, Convention

__all__ = [
    "CONVENTIONS",
    "CONVERSATION_KEYS",
    "FIELDS",
    "Convention",
    "Extractor",
    "log_record_messages",
]
