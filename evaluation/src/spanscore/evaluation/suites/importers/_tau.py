"""What the tau-bench and tau2-bench importers share: which tools change state, and the
assertions for their database and communicate rules.

Both benchmarks give a task's reward 1 only when the database after the agent's actions equals
the database after replaying the gold actions. spanscore has no database: it compares the
calls that change state instead. The agent's successful calls to the tools that write must be
the gold write actions, with their arguments, in any order; calls to read-only tools are free
and failed calls changed nothing (`tool_calls` with `mode: unordered`, `failed_calls:
not_made` and the read-only tools in `ignore_tools`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from spanscore.evaluation.suites.importers._common import ImporterError, user_block

# Which tools of the benchmarks' published domains change state. tau2-bench annotates each tool
# (`@is_tool(ToolType.READ | WRITE | GENERIC)`; GENERIC tools such as `calculate` change
# nothing); tau-bench does not, so its tables say which tools modify the domain's data.
WRITE_TOOLS: dict[str, frozenset[str]] = {
    "tau_bench/retail": frozenset({
        "cancel_pending_order", "exchange_delivered_order_items", "modify_pending_order_address",
        "modify_pending_order_items", "modify_pending_order_payment", "modify_user_address",
        "return_delivered_order_items",
    }),
    "tau_bench/airline": frozenset({
        "book_reservation", "cancel_reservation", "send_certificate",
        "update_reservation_baggages", "update_reservation_flights",
        "update_reservation_passengers",
    }),
    "tau2/retail": frozenset({
        "cancel_pending_order", "exchange_delivered_order_items", "modify_pending_order_address",
        "modify_pending_order_items", "modify_pending_order_payment", "modify_user_address",
        "return_delivered_order_items",
    }),
    "tau2/airline": frozenset({
        "book_reservation", "cancel_reservation", "send_certificate",
        "update_reservation_baggages", "update_reservation_flights",
        "update_reservation_passengers",
    }),
    "tau2/telecom": frozenset({
        "suspend_line", "resume_line", "send_payment_request", "enable_roaming",
        "disable_roaming", "refuel_data",
    }),
}  # fmt: skip
READ_ONLY_TOOLS: dict[str, frozenset[str]] = {
    "tau_bench/retail": frozenset({
        "calculate", "find_user_id_by_email", "find_user_id_by_name_zip", "get_order_details",
        "get_product_details", "get_user_details", "list_all_product_types", "think",
        "transfer_to_human_agents",
    }),
    "tau_bench/airline": frozenset({
        "calculate", "get_reservation_details", "get_user_details", "list_all_airports",
        "search_direct_flight", "search_onestop_flight", "think", "transfer_to_human_agents",
    }),
    "tau2/retail": frozenset({
        "calculate", "transfer_to_human_agents", "find_user_id_by_name_zip",
        "find_user_id_by_email", "get_order_details", "get_product_details", "get_item_details",
        "get_user_details", "list_all_product_types",
    }),
    "tau2/airline": frozenset({
        "calculate", "transfer_to_human_agents", "get_reservation_details", "get_user_details",
        "list_all_airports", "search_direct_flight", "search_onestop_flight",
        "get_flight_status",
    }),
    "tau2/telecom": frozenset({
        "transfer_to_human_agents", "get_customer_by_phone", "get_customer_by_id",
        "get_customer_by_name", "get_details_by_id", "get_bills_for_customer", "get_data_usage",
    }),
}  # fmt: skip

OPTIONS = ("read_only_tools", "write_tools")


class ToolKinds:
    """Which tools write and which only read: the options first, then the benchmark's domains."""

    def __init__(self, benchmark: str, options: Mapping[str, Any] | None, path: Path) -> None:
        options = dict(options or {})
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ImporterError(
                f"{path}: unknown import options {', '.join(unknown)}; "
                f"expected {', '.join(OPTIONS)}"
            )
        self.read_only = set(_names(options.get("read_only_tools"), path, "read_only_tools"))
        self.writes = set(_names(options.get("write_tools"), path, "write_tools"))
        both = sorted(self.read_only & self.writes)
        if both:
            raise ImporterError(f"{path}: {', '.join(both)} both read-only and write tools")
        self.domains = {
            domain: (READ_ONLY_TOOLS[domain] - self.writes, WRITE_TOOLS[domain] - self.read_only)
            for domain in READ_ONLY_TOOLS
            if domain.startswith(benchmark + "/")
        }
        self.benchmark = benchmark

    def use_domains_of(self, names: Iterable[str], domains: Iterable[str] = ()) -> None:
        """Take the tool kinds of the published domains the file's tasks use: those named
        (tau2's `domain`), and those that have one of the tools its gold actions call."""
        names, named = set(names), set(domains)
        for domain, (reads, writes) in self.domains.items():
            if domain.split("/", 1)[1] in named or names & (reads | writes):
                self.read_only |= reads
                self.writes |= writes

    def check(self, names: Iterable[str], path: Path) -> tuple[set[str], set[str]]:
        """(read-only tools, write tools) for a task calling `names`; a suite error naming
        the tools whose kind is unknown."""
        unknown = sorted(set(names) - self.read_only - self.writes)
        if unknown:
            raise ImporterError(
                f"{path}: cannot tell whether these tools change state: {', '.join(unknown)}. "
                f"They are not tools of {self.benchmark}'s published domains: import the file "
                "with `spanscore import` and --read-only-tool/--write-tool NAME (import options "
                "read_only_tools, write_tools)"
            )
        return self.read_only, self.writes


def _names(value: Any, path: Path, option: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [n.strip() for n in value.split(",") if n.strip()]
    if not isinstance(value, list | tuple | set) or not all(isinstance(n, str) for n in value):
        raise ImporterError(f"{path}: option {option}: expected a list of tool names")
    return list(value)


def db_writes(
    gold: list[tuple[str, dict[str, Any]]], kinds: ToolKinds, path: Path
) -> dict[str, Any]:
    """The database rule as calls: the successful write calls are the gold writes."""
    read_only, writes = kinds.check((name for name, _ in gold), path)
    return {
        "type": "tool_calls",
        "name": "db_writes",
        "mode": "unordered",
        "failed_calls": "not_made",
        "ignore_tools": sorted(read_only),
        "expected": [
            {"name": name, "arguments": arguments, "match": "exact"}
            for name, arguments in gold
            if name in writes
        ],
    }


def communicated(name: str, facts: list[str], *, intermediate: bool) -> dict[str, Any]:
    """Every fact in some agent message, lower-cased, with the messages' commas removed."""
    return {
        "type": "response",
        "name": name,
        "in_any_message": True,
        "intermediate_messages": intermediate,
        "ignore_case": True,
        "remove_commas": True,
        "keywords": list(facts),
    }


DB_NOTE = (
    "db_writes stands for the database rule (the database after the agent's actions equals the "
    "database after replaying the gold actions): the agent's successful calls to tools that "
    "write must be the gold write actions with exactly their arguments, in any order; "
    "read-only tools are free and failed calls changed nothing. Differences: two different "
    "write paths that reach the same database pass there and fail here; writes whose order "
    "matters pass here in any order; a call to a tool spanscore does not know as read-only "
    "counts as a write; a failed call is one whose span records an error (a tool that "
    "returns an error text, as tau-bench's do, has to raise or mark its span failed)."
)


def simulated_user(definition: Mapping[str, Any]) -> dict[str, Any] | None:
    """A scenario's `user:` block from a task's user (`tau2.user_definition`,
    `tau_bench.user_definition`): tau2's structured instructions field by field (the reason for
    the call is the goal, what the user knows and does not know, the task instructions), else
    the instruction text as the goal, as tau-bench's user simulator reads it."""
    instructions = definition.get("instructions")
    if isinstance(instructions, Mapping):
        known, unknown = instructions.get("known_info"), instructions.get("unknown_info")
        return user_block(
            goal=instructions.get("reason_for_call"),
            persona=definition.get("persona"),
            knowledge=[known] if isinstance(known, str) and known else [],
            unknown=[unknown] if isinstance(unknown, str) and unknown else [],
            instructions=instructions.get("task_instructions"),
        )
    return user_block(
        goal=instructions if isinstance(instructions, str) else None,
        persona=definition.get("persona"),
    )


def with_user(scenario: dict[str, Any], user: dict[str, Any] | None) -> dict[str, Any]:
    """The scenario with its `user:` block placed before its assertions."""
    if user is None:
        return scenario
    assertions = scenario.pop("assertions")
    return {**scenario, "user": user, "assertions": assertions}
