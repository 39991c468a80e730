"""What the four framework shims share as OpenTelemetry instrumentors.

Each shim is a `BaseInstrumentor` (the contrib base class), so `opentelemetry-instrument`
finds it through its `opentelemetry_instrumentor` entry point and calls `instrument()` with no
arguments: the tracer provider is then the global one (the one the configurator built), and the
content policy comes from the environment (`SPANSCORE_CAPTURE_*`, `SPANSCORE_REDACT_KEYS`), as
it does for a shim an application instruments on its own. `spanscore.instrumentation.instrument()`
sets the policy itself and tells the shims so (`process_setup=False`).

A shim whose framework is missing or of an unsupported version patches nothing and stays
uninstrumented (`instrument()` returns False and may be called again later); a second
`instrument()` only warns (the base class) and returns True; `uninstrument()` undoes exactly
what was patched and may be repeated.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Collection
from typing import Any

# The module says `# type: ignore` of itself: to mypy it has no attributes.
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.trace import TracerProvider

from ._content import ContentPolicy, set_content_policy


class SpanscoreInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """A framework shim: `_patch` and `_unpatch` are its own; the rest is shared."""

    # The framework's distribution and the versions the shim supports, as requirements.
    instruments: tuple[str, ...] = ()

    def instrumentation_dependencies(self) -> Collection[str]:
        return self.instruments

    def instrument(self, **kwargs: Any) -> bool:
        """True when the framework is patched (now or already); False when it is not
        installed or not supported (logged), and nothing was changed.

        Keywords: `tracer_provider` (default: the global one); `skip_dep_check` (the base
        class's check of `instrumentation_dependencies()`; the shim checks the version itself
        too, with a warning that says why it is skipped)."""
        if self.is_instrumented_by_opentelemetry:
            super().instrument(**kwargs)  # warns, changes nothing
            return self.is_instrumented
        super().instrument(**kwargs)
        if not self.is_instrumented:  # nothing patched: not instrumented, a later call may try
            self._is_instrumented_by_opentelemetry = False
        return self.is_instrumented

    def _instrument(self, **kwargs: Any) -> bool:
        if kwargs.get("process_setup", True):
            set_content_policy(ContentPolicy.from_environment())
        return self._patch(kwargs.get("tracer_provider"))

    def _uninstrument(self, **kwargs: Any) -> None:
        self._unpatch()

    # Each shim's own: abstract, so a shim that lacks one cannot be made at all.

    @abstractmethod
    def _patch(self, tracer_provider: TracerProvider | None) -> bool:
        """Patch the framework; True when something was patched."""

    @abstractmethod
    def _unpatch(self) -> None:
        """Undo what `_patch` did (nothing when it did nothing)."""

    @property
    @abstractmethod
    def is_instrumented(self) -> bool:
        """The framework is patched by this shim."""


class Switch:
    """Whether a patched method records. A shim uninstrumented while another instrumentation's
    wrapper sits on top of its own cannot take its wrapper out of that chain without removing
    the other's too: it leaves it there, switched off (calls only pass through)."""

    __slots__ = ("on",)

    def __init__(self) -> None:
        self.on = True


def restore(owner: Any, attribute: str, wrapper: Any, original: Any, switch: Switch) -> bool:
    """Put `original` back on `owner` when our `wrapper` is still what is there; otherwise
    switch the wrapper off and leave the chain alone. True when restored."""
    switch.on = False
    if owner.__dict__.get(attribute) is wrapper:
        setattr(owner, attribute, original)
        return True
    return False
