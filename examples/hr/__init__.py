"""The HR time-off example of watsonx Orchestrate's evaluation docs, as a scripted agent.

`timeoff_schedule.json` is the ground-truth dataset in watsonx's native format; `agent.py`
runs the HR agent's conversations (a correct one and deliberately wrong ones) as OpenTelemetry
GenAI spans, each stamped with `scenario.id` = `timeoff_schedule`, the dataset's name.
"""

from pathlib import Path

DATASET = Path(__file__).with_name("timeoff_schedule.json")

__all__ = ["DATASET"]
