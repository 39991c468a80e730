"""The simulated user's side of a conversation: the prompt made from a scenario's `user:` block,
the question asked of the user model for each turn, and how its answer is read.

The user model answers a JSON object (structured output, or asked for in the prompt where the
endpoint refuses it): the next message, and whether the conversation should end, and why.
ArkSim's stop signal (`###STOP###` in the message) is honoured too, so an ArkSim prompt
template's habits do not leave a user talking forever.

The question is a `JudgeRequest` asked through the judge's machinery (`JudgeRunner`): adaptive
concurrency, Retry-After, retries, cost, and the lake's cache. Each trial samples with its own
seed (sent to the model, and part of the cache key), so that trials differ from one another
while a re-run with the same seed replays every user turn from the cache without a call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from spanscore.evaluation.llm.types import JudgeAnswer, JudgeRequest
from spanscore.evaluation.suites.users import SimulatedUser

PROMPT_VERSION = "simulated-user-1"
PURPOSE_PREFIX = "simulated_user/"  # the purpose of every question, before the scenario id
STOP_SIGNAL = "###STOP###"  # ArkSim's

Outcome = Literal["continue", "goal_reached", "gave_up"]

ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {
            "type": "string",
            "description": "your next message to the agent (empty when you end the conversation)",
        },
        "outcome": {
            "type": "string",
            "enum": ["continue", "goal_reached", "gave_up"],
            "description": "continue; or end the conversation now: goal_reached, or gave_up "
            "when the goal cannot be reached",
        },
    },
    "required": ["message", "outcome"],
    "additionalProperties": False,
}

START = "(The conversation starts. Write your first message to the agent.)"

# The headings of the system prompt's sections (changing one changes every cache key).
AGENT_CONTEXT = "What you know about the agent:"
PROFILE = "Who you are:"
PERSONA = "How you speak and behave:"
GOAL = "Your goal:"
INSTRUCTIONS = "How you go about it:"
KNOWLEDGE = "What you know (give each fact only when the conversation needs it, never all at once):"
UNKNOWN = "What you do NOT know (if the agent asks for it, say you do not know; never make it up):"
_END = "End the conversation when"
_HEADINGS = (AGENT_CONTEXT, PROFILE, PERSONA, GOAL, INSTRUCTIONS, KNOWLEDGE, UNKNOWN, _END)


def system_prompt(user: SimulatedUser) -> str:
    """What the user model is told about the user it plays."""
    lines = [
        "You play a user talking to an AI agent, so that the agent can be tested. Stay in "
        "character: you are the user and the agent is the assistant; never switch roles, "
        "and never say that you are simulated.",
    ]
    if user.agent_context:
        lines.append(f"\n{AGENT_CONTEXT}\n{user.agent_context}")
    if user.profile:
        lines.append(f"\n{PROFILE}\n{user.profile}")
    if user.persona:
        lines.append(f"\n{PERSONA}\n{user.persona}")
    lines.append(f"\n{GOAL}\n{user.goal}")
    if user.instructions:
        lines.append(f"\n{INSTRUCTIONS}\n{user.instructions}")
    if user.knowledge:
        lines.append(f"\n{KNOWLEDGE}\n" + "\n".join(f"- {fact}" for fact in user.knowledge))
    if user.unknown:
        lines.append(f"\n{UNKNOWN}\n" + "\n".join(f"- {item}" for item in user.unknown))
    stop = user.stop_when or "your goal is reached, or it clearly cannot be reached"
    lines.append(
        f"\n{_END} {stop}.\n\n"
        "Rules:\n"
        "- One message at a time, brief (under 50 words), in plain sentences, no lists.\n"
        "- Never invent facts you were not given; do not reveal everything at once.\n"
        "- Do not give up before the agent has had a fair chance to help.\n"
        "- Answer with a JSON object: `message` (your next message; empty when you end the "
        "conversation) and `outcome` (`continue`, or `goal_reached` / `gave_up` to end it)."
    )
    return "\n".join(lines)


def _section(prompt: str, heading: str) -> str | None:
    start = prompt.find(f"\n\n{heading}\n")
    if start < 0:
        return None
    body = start + len(heading) + 3
    ends = [i for h in _HEADINGS if (i := prompt.find(f"\n\n{h}", body)) >= 0]
    return prompt[body : min(ends, default=len(prompt))]


def read_scenario(prompt: str) -> tuple[str, list[str]]:
    """The goal and the facts the user knows, read back from a `system_prompt`: for a
    scripted user model that follows its scenario (`spanscore.examples.user_policy`). A
    prompt that is none gives no goal and no fact."""
    goal = (_section(prompt, GOAL) or "").strip()
    facts: list[str] = []
    for line in (_section(prompt, KNOWLEDGE) or "").splitlines():
        if line.startswith("- "):
            facts.append(line[2:])
        elif facts:  # a fact of several lines
            facts[-1] += "\n" + line
    return goal, facts


def next_turn_request(
    user: SimulatedUser,
    history: list[tuple[str, str]],
    *,
    scenario_id: str,
    seed: int,
    trial: int,
) -> JudgeRequest:
    """The question for the user's next message. `history` holds (user message, agent reply)
    pairs so far; the user model sees its own messages as its turns (`assistant`) and the
    agent's as the other side's (`user`)."""
    messages: list[tuple[str, str]] = [("system", system_prompt(user)), ("user", START)]
    for said, reply in history:
        messages.append(("assistant", said))
        messages.append(("user", reply))
    return JudgeRequest(
        kind="chat",
        purpose=f"{PURPOSE_PREFIX}{scenario_id}",
        messages=tuple(messages),
        schema_name="user_turn",
        schema=ANSWER_SCHEMA,
        prompt_version=PROMPT_VERSION,
        # Another trial is another user: its own sampling seed, part of the cache key.
        seed=trial_seed(seed, trial),
    )


def trial_seed(seed: int, trial: int) -> int:
    """The user model's sampling seed for one trial of a simulation run with `seed`."""
    return seed * 1_000_003 + trial


@dataclass(frozen=True)
class UserTurn:
    """What the user model said: a message to send, or the end of the conversation."""

    message: str
    outcome: Outcome
    cached: bool


class UserModelError(Exception):
    """The user model gave no usable answer (after its retries), or its budget is spent."""

    def __init__(self, reason: str, *, budget: bool = False) -> None:
        super().__init__(reason)
        self.budget = budget


def read_turn(answer: JudgeAnswer) -> UserTurn:
    """The user's turn from the model's answer; `UserModelError` when there is none."""
    if answer.skipped is not None:  # the pool's words are the judge's
        raise UserModelError(
            answer.skipped.replace("the judge budget", "the user model's budget"), budget=True
        )
    if answer.error is not None:
        raise UserModelError(answer.error.replace("judge failed", "the user model failed"))
    value = answer.value
    if not isinstance(value, dict) or not isinstance(value.get("message"), str):
        raise UserModelError(f"the user model's answer has no message: {str(value)[:120]!r}")
    message = value["message"].strip()
    outcome = value.get("outcome", "continue")
    if outcome not in ("continue", "goal_reached", "gave_up"):
        raise UserModelError(f"the user model answered an unknown outcome {outcome!r}")
    if STOP_SIGNAL in message:
        message = message.replace(STOP_SIGNAL, "").strip()
        if outcome == "continue":
            outcome = "goal_reached"
    if outcome == "continue" and not message:
        raise UserModelError("the user model answered an empty message without ending")
    return UserTurn(message=message, outcome=outcome, cached=answer.cached)
