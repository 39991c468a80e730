"""The review loop's read layer: what the review app (`spanscore ui`), its JSON API, the MCP
server (`spanscore mcp`) and the CLI (`judge-check` from the lake's labels) read and write.

Each page or tool gets its data from one function here, so a page, its JSON twin and an MCP
tool cannot disagree. Every function takes a DuckDB cursor on the lake (`spanscore.lake.connect`)
and binds every value it is given as a parameter. The only writes are labels and review queues.

- `runs`: runs per suite over time, one run's overview, two runs compared;
- `conversations`: the conversations, filtered, counted and paged by key; one conversation's
  trajectory, scores in every run, judge exchanges, labels and raw spans;
- `labels`: human labels (newest per reviewer counts, history kept);
- `queues`: review queues built from a filter or a run's failures;
- `agreement`: the judge's agreement with the labels, per judged metric;
- `judging`: what the judge was asked about a conversation (rebuilt), and what it answered.
"""

from spanscore.evaluation.review.agreement import judge_agreement, lake_labels
from spanscore.evaluation.review.conversations import (
    ConversationFilter,
    ConversationPage,
    conversation_view,
    list_conversations,
    raw_spans,
)
from spanscore.evaluation.review.judging import judge_exchange
from spanscore.evaluation.review.labels import (
    LabelError,
    NewLabel,
    NotInLake,
    add_label,
    labels_of,
)
from spanscore.evaluation.review.queues import (
    QueueError,
    QueueSpec,
    build_queue,
    queue_view,
    queues,
)
from spanscore.evaluation.review.runs import compare_view, run_history, run_view

__all__ = [
    "ConversationFilter",
    "ConversationPage",
    "LabelError",
    "NewLabel",
    "NotInLake",
    "QueueError",
    "QueueSpec",
    "add_label",
    "build_queue",
    "compare_view",
    "conversation_view",
    "judge_agreement",
    "judge_exchange",
    "labels_of",
    "lake_labels",
    "list_conversations",
    "queue_view",
    "queues",
    "raw_spans",
    "run_history",
    "run_view",
]
