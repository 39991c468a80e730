"""A model call a framework shim records itself (LangChain's chat model runs): the client
shims below it (the `openai` client's) record nothing while it runs, so the call is recorded
once, by the shim that saw it first."""

from __future__ import annotations

import contextvars

recorded_by_framework: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "spanscore_model_call_recorded_by_framework", default=False
)
