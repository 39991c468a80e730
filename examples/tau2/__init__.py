"""A tau2-bench style retail task file, and a scripted agent whose conversations it scores.

`retail_tasks.json` is written for this example in tau2-bench's `tasks.json` format (it is not
tau2-bench's data): one task scored by its database and what the agent must say (the default
`reward_basis`, DB and COMMUNICATE), and one scored by its gold actions (`ACTION`). `agent.py`
runs a retail agent's conversations, correct and deliberately wrong, as OpenTelemetry GenAI
spans stamped with `scenario.id` = the task's id.
"""

from pathlib import Path

TASKS = Path(__file__).with_name("retail_tasks.json")

__all__ = ["TASKS"]
