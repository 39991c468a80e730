"""The agents a simulation drives (`simulate --agent TARGET`):

- **a Python callable**, `module:function` or `path/to/file.py:function`, sync or async, called
  once per user turn as `function(message)` or `function(message, turn)` (`Turn` below), run
  in this process inside the conversation's context, so that `spanscore.instrumentation` (or
  any instrumentation with its `ConversationSpanProcessor`) tags the agent's spans;
- **an ArkSim custom agent**: a module or class whose agent subclasses ArkSim's `BaseAgent`
  (`async execute(user_query, **kwargs)`, `get_chat_id`, `close`), one instance per
  conversation, exactly as `arksim simulate` uses it;
- **an OpenAI-compatible chat-completions endpoint** (a URL ending in `/chat/completions`,
  or `--agent-api chat`): the conversation so far is sent each turn;
- **any HTTP endpoint** taking JSON (`--agent-api json`): a request template with the
  message, and a path to the reply in the answer.

Remote agents receive the conversation id, the scenario, the simulation and the trial as W3C
baggage (`baggage` header, the keys `spanscore.instrumentation` reads), so an instrumented
agent's spans carry them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import importlib
import inspect
import json
import sys
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Literal, Protocol, TypeVar

import httpx2 as httpx

from spanscore.instrumentation import conversation

SIMULATION_ID = "simulation.id"
SIMULATION_TRIAL = "simulation.trial"
_BAGGAGE_PREFIX = "spanscore."  # as `spanscore.instrumentation.conversation` writes it
T = TypeVar("T")


class TargetError(Exception):
    """The agent cannot be driven at all (not found, unreachable); nothing was run."""


class AgentFailed(Exception):
    """One turn of the agent failed: it raised, or answered something that is not a reply."""


@dataclass
class Turn:
    """What a Python agent is told with each user message."""

    conversation_id: str
    scenario_id: str
    simulation_id: str
    trial: int
    turn_index: int
    # The conversation before this message: {"role": "user" | "assistant", "content": ...}.
    history: list[dict[str, str]]
    # The agent's own per-conversation state: the same dict on every turn of a conversation.
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Conversation:
    """One simulated conversation, as the target sees it."""

    conversation_id: str
    scenario_id: str
    simulation_id: str
    trial: int
    goal: str
    knowledge: tuple[str, ...] = ()

    def attributes(self) -> dict[str, str]:
        """The span attributes (and, prefixed, baggage keys) that mark it."""
        return {
            "gen_ai.conversation.id": self.conversation_id,
            "scenario.id": self.scenario_id,
            SIMULATION_ID: self.simulation_id,
            SIMULATION_TRIAL: str(self.trial),
        }

    def baggage_header(self) -> str:
        return ",".join(
            f"{_BAGGAGE_PREFIX}{key}={urllib.parse.quote(value, safe='')}"
            for key, value in self.attributes().items()
        )


class Session(Protocol):
    async def send(self, message: str, history: list[dict[str, str]]) -> str: ...

    async def close(self) -> None: ...


class Target(Protocol):
    description: str

    async def check(self) -> None:
        """Raise `TargetError` when the agent cannot be reached at all."""

    def open(self, conversation: Conversation) -> Session: ...

    async def aclose(self) -> None: ...


# --- Python agents ---------------------------------------------------------------------------


def _module_name(path: Path) -> tuple[str, Path]:
    """The name a file is imported under, as its own code would import it: its stem, within
    the packages (folders with an `__init__.py`) it sits in, and the folder that name is
    found from. `agents/support.py` in a package `agents` is `agents.support`, so that its
    classes (its exceptions' `error.type`) are named as in production, not after a name the
    loader made up."""
    path = path.resolve()
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts), folder


def _load_module(spec: str) -> ModuleType:
    if spec.endswith(".py") or "/" in spec or "\\" in spec:
        path = Path(spec)
        if not path.is_file():
            raise TargetError(f"agent file {spec} not found")
        name, root = _module_name(path)
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
        module = _import(spec, name)
        loaded = getattr(module, "__file__", None)
        if loaded is None or Path(loaded).resolve() != path.resolve():
            raise TargetError(
                f"agent file {spec} would be imported as {name!r}, which is another module "
                f"({loaded or 'built in'}): rename the file, or name the agent as module:NAME"
            )
        return module
    return _import(spec, spec)


def _import(spec: str, name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise TargetError(f"cannot import agent module {spec!r}: {exc}") from exc
    except Exception as exc:
        raise TargetError(f"importing {spec} failed: {type(exc).__name__}: {exc}") from exc


def _is_arksim_agent(value: Any) -> bool:
    """An ArkSim custom agent class: it subclasses a class named `BaseAgent` and has ArkSim's
    `execute` and `get_chat_id` (duck-typed: ArkSim itself need not be importable here)."""
    return (
        inspect.isclass(value)
        and any(base.__name__ == "BaseAgent" for base in value.__mro__[1:])
        and callable(getattr(value, "execute", None))
        and callable(getattr(value, "get_chat_id", None))
    )


def python_target(spec: str) -> Target:
    """`module:attr`, `file.py:attr`, or a module / file holding one ArkSim agent class."""
    module_spec, _, attr = spec.rpartition(":")
    if not module_spec:
        module_spec, attr = spec, ""
    module = _load_module(module_spec)
    if attr:
        if not hasattr(module, attr):
            raise TargetError(f"{module_spec} has no {attr!r}")
        value = getattr(module, attr)
    else:
        agents = [
            v
            for _, v in inspect.getmembers(module, _is_arksim_agent)
            if v.__module__ == module.__name__
        ]
        if len(agents) != 1:
            found = ", ".join(a.__name__ for a in agents) or "none"
            raise TargetError(
                f"{module_spec}: name the agent as {module_spec}:NAME (a function, or an "
                f"ArkSim agent class; ArkSim agent classes found: {found})"
            )
        value = agents[0]
    if _is_arksim_agent(value):
        return ArkSimTarget(value, spec)
    if callable(value):
        return CallableTarget(value, spec)
    raise TargetError(f"{spec} is not callable: name a function or an ArkSim agent class")


class CallableTarget:
    """A function called once per user turn (see the module doc)."""

    def __init__(self, fn: Callable[..., Any], description: str) -> None:
        self.fn = fn
        self.description = description
        try:
            parameters = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            parameters = ()  # type: ignore[assignment]
        positional = [
            p
            for p in parameters
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]
        self.takes_turn = len(positional) >= 2 or any(
            p.kind == p.VAR_POSITIONAL for p in positional
        )

    async def check(self) -> None:
        return None

    def open(self, conversation: Conversation) -> Session:
        return _CallableSession(self, conversation)

    async def aclose(self) -> None:
        return None


class _CallableSession:
    def __init__(self, target: CallableTarget, conv: Conversation) -> None:
        self.target = target
        self.conv = conv
        self.state: dict[str, Any] = {}
        self.turn_index = 0

    async def send(self, message: str, history: list[dict[str, str]]) -> str:
        turn = Turn(
            self.conv.conversation_id,
            self.conv.scenario_id,
            self.conv.simulation_id,
            self.conv.trial,
            self.turn_index,
            list(history),
            self.state,
        )
        self.turn_index += 1
        args: tuple[Any, ...] = (message, turn) if self.target.takes_turn else (message,)
        return reply_text(await _in_conversation(self.conv, self.target.fn, args))

    async def close(self) -> None:
        return None


async def _in_conversation(
    conv: Conversation, fn: Callable[..., Any], args: tuple[Any, ...]
) -> Any:
    """Call `fn` inside the conversation's context (its baggage stamps every span): awaited
    when it is a coroutine function, else on a thread with a copy of the context."""
    values = conv.attributes()
    marker = conversation(
        values.pop("gen_ai.conversation.id"),
        scenario_id=values.pop("scenario.id"),
        **values,
    )
    if inspect.iscoroutinefunction(fn):
        with marker:
            return await fn(*args)
    with marker:
        context = contextvars.copy_context()
    result = await asyncio.get_running_loop().run_in_executor(
        _executor(), lambda: context.run(fn, *args)
    )
    if inspect.isawaitable(result):
        with marker:
            return await result
    return result


class _DaemonThreads(concurrent.futures.Executor):
    """A thread per call, a daemon: a hung agent, timed out, must not hold the process at exit
    (a thread pool's workers are joined at exit). A thread costs tens of microseconds, next to
    an agent's turn."""

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # handed to the waiting turn
                future.set_exception(exc)

        threading.Thread(target=run, name="spanscore-agent", daemon=True).start()
        return future


_THREADS = _DaemonThreads()


def _executor() -> concurrent.futures.Executor:
    return _THREADS


def reply_text(value: Any) -> str:
    """The text of what an agent returned: a string, ArkSim's `AgentResponse` (`content`), a
    mapping with `content`/`reply`/`output`; anything else is a failed turn."""
    if isinstance(value, str):
        return value
    content = getattr(value, "content", None)
    if isinstance(content, str):
        return content
    if isinstance(value, dict):
        for key in ("content", "reply", "output", "response", "text"):
            if isinstance(value.get(key), str):
                return str(value[key])
    raise AgentFailed(
        f"the agent returned {type(value).__name__} {repr(value)[:80]}, not a reply text"
    )


class ArkSimTarget:
    """An ArkSim custom agent class: one instance per conversation, `execute` per turn."""

    def __init__(self, cls: type, description: str) -> None:
        self.cls = cls
        self.description = description

    async def check(self) -> None:
        return None

    def open(self, conversation: Conversation) -> Session:
        return _ArkSimSession(self, conversation)

    async def aclose(self) -> None:
        return None

    def agent_config(self) -> Any:
        """ArkSim's `AgentConfig` for a custom agent, when ArkSim is installed; else an
        object with the same fields (an agent that only stores it works the same)."""
        name = self.cls.__name__
        module_path = self.cls.__module__
        with contextlib.suppress(Exception):
            from arksim.config import AgentConfig

            return AgentConfig(
                agent_name=name,
                agent_type="custom",
                custom_config={"agent_class": self.cls},
            )
        custom = SimpleNamespace(module_path=module_path, class_name=name, agent_class=self.cls)
        return SimpleNamespace(
            agent_name=name, agent_type="custom", api_config=None, custom_config=custom
        )


class _ArkSimSession:
    def __init__(self, target: ArkSimTarget, conv: Conversation) -> None:
        self.target = target
        self.conv = conv
        self.agent: Any = None
        self.turn_index = 0

    async def send(self, message: str, history: list[dict[str, str]]) -> str:
        if self.agent is None:
            self.agent = await _in_conversation(
                self.conv, self.target.cls, (self.target.agent_config(),)
            )
            # As `arksim simulate` does before the first turn (an agent may open its session
            # there); the chat id stays ours, the conversation's.
            await _in_conversation(self.conv, self.agent.get_chat_id, ())
        metadata = {
            "chat_id": self.conv.conversation_id,
            "user_goal": self.conv.goal,
            "knowledge": [{"content": k} for k in self.conv.knowledge],
            "turn_id": self.turn_index,
        }
        self.turn_index += 1

        async def execute() -> Any:
            return await self.agent.execute(user_query=message, metadata=metadata)

        return reply_text(await _in_conversation(self.conv, execute, ()))

    async def close(self) -> None:
        if self.agent is not None and callable(getattr(self.agent, "close", None)):
            closing = self.agent.close()
            if inspect.isawaitable(closing):
                await closing


# --- remote agents ---------------------------------------------------------------------------


AgentApi = Literal["chat", "json"]


@dataclass
class HttpSettings:
    api: AgentApi | None = None  # default: chat for a URL ending in /chat/completions
    model: str = "agent"  # chat: the `model` field sent
    request_template: str | None = None  # json: the body, with {placeholders}
    reply_path: str = "reply"  # json: where the reply is in the answer
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 120.0


DEFAULT_REQUEST = {"message": "{message}", "conversation_id": "{conversation_id}"}


class HttpTarget:
    """An agent behind HTTP: chat completions, or JSON in and out (see the module doc)."""

    def __init__(self, url: str, settings: HttpSettings) -> None:
        self.url = url
        self.settings = settings
        self.api: AgentApi = settings.api or (
            "chat" if url.rstrip("/").endswith("/chat/completions") else "json"
        )
        self.description = f"{url} ({'chat completions' if self.api == 'chat' else 'JSON'})"
        self.template: Any = DEFAULT_REQUEST
        if settings.request_template is not None:
            try:
                self.template = json.loads(settings.request_template)
            except json.JSONDecodeError as exc:
                raise TargetError(f"--request-template is not JSON: {exc}") from None
        self._client: httpx.AsyncClient | None = None

    async def check(self) -> None:
        await reachable(self.url, "the agent")

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.settings.timeout_s)
        return self._client

    def open(self, conversation: Conversation) -> Session:
        return _HttpSession(self, conversation)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    def body(self, conv: Conversation, message: str, history: list[dict[str, str]]) -> Any:
        if self.api == "chat":
            return {
                "model": self.settings.model,
                "messages": [*history, {"role": "user", "content": message}],
            }
        values = {
            "message": message,
            "conversation_id": conv.conversation_id,
            "scenario_id": conv.scenario_id,
            "simulation_id": conv.simulation_id,
            "trial": str(conv.trial),
            "turn": str(len(history) // 2),
        }
        return _fill(self.template, values, history)

    def reply(self, answer: httpx.Response) -> str:
        if answer.status_code >= 400:
            raise AgentFailed(f"the agent answered HTTP {answer.status_code}: {answer.text[:200]}")
        try:
            data = answer.json()
        except ValueError:
            raise AgentFailed(f"the agent's answer is not JSON: {answer.text[:120]!r}") from None
        path = "choices.0.message.content" if self.api == "chat" else self.settings.reply_path
        value: Any = data
        for part in path.split("."):
            if isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            elif isinstance(value, dict) and part in value:
                value = value[part]
            else:
                raise AgentFailed(
                    f"the agent's answer has no {path!r} (got {json.dumps(data)[:160]})"
                )
        if not isinstance(value, str):
            raise AgentFailed(f"the agent's {path!r} is {type(value).__name__}, not text")
        return value


async def reachable(url: str, what: str) -> None:
    """Raise `TargetError`, naming `url`, when nothing accepts a connection there: an agent or
    a collector that cannot be reached is refused before the first conversation."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetError(f"{url}: not an http(s) URL")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise TargetError(f"{url}: not a valid port") from None
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(parts.hostname, port), timeout=10
        )
    except (OSError, TimeoutError) as exc:
        raise TargetError(
            f"{what} at {url} is unreachable ({type(exc).__name__}: {exc}); nothing was simulated"
        ) from None
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


def _fill(template: Any, values: dict[str, str], history: list[dict[str, str]]) -> Any:
    if isinstance(template, str):
        if template == "{history}":
            return list(history)
        for key, value in values.items():
            template = template.replace("{" + key + "}", value)
        return template
    if isinstance(template, dict):
        return {k: _fill(v, values, history) for k, v in template.items()}
    if isinstance(template, list):
        return [_fill(v, values, history) for v in template]
    return template


class _HttpSession:
    def __init__(self, target: HttpTarget, conv: Conversation) -> None:
        self.target = target
        self.conv = conv

    async def send(self, message: str, history: list[dict[str, str]]) -> str:
        target = self.target
        headers = {**target.settings.headers, "baggage": self.conv.baggage_header()}
        try:
            answer = await target.client().post(
                target.url, json=target.body(self.conv, message, history), headers=headers
            )
        except httpx.TimeoutException as exc:
            # The agent hangs: a timed-out turn whichever clock runs out first, the turn's
            # or the HTTP client's (not an agent error).
            raise TimeoutError(f"{type(exc).__name__}: {exc}") from exc
        except httpx.HTTPError as exc:
            raise AgentFailed(f"{type(exc).__name__}: {exc}") from exc
        return target.reply(answer)

    async def close(self) -> None:
        return None


def make_target(spec: str, http: HttpSettings | None = None) -> Target:
    """The target `--agent` names: a URL, or a Python agent."""
    if spec.startswith(("http://", "https://")):
        return HttpTarget(spec, http or HttpSettings())
    return python_target(spec)
