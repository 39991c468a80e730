"""Reports of evaluation runs: one self-contained HTML page, or the same content as JSON.

Usage::

    from spanscore.evaluation import open_lake
    from spanscore.evaluation.report import ReportOptions, build_report, render_html

    con = open_lake("./lake", read_only=True)
    doc = build_report(con, "latest", ReportOptions(trace_url="https://traces/{trace_id}"))
    Path("report.html").write_text(render_html(doc))

or `write_report(lake, "report.html")` in one call. The page needs no network: styles, script,
plots (inline SVG) and data are inside it. The JSON document (`--format json`) follows
`report_json_schema()`, published as `docs/report.schema.json`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from spanscore.evaluation.report.data import (
    ReportError,
    ReportOptions,
    build_report,
    previous_run,
    resolve_run,
)
from spanscore.evaluation.report.html import render_html
from spanscore.evaluation.report.schema import ReportDoc, report_json_schema, validate_report
from spanscore.lake import connect


@dataclass
class WrittenReport:
    path: Path
    run_id: str
    conversations: int
    embedded: int
    bytes: int


def render(doc: ReportDoc, fmt: Literal["html", "json"] = "html") -> str:
    """The document as the page or as JSON text."""
    if fmt == "json":
        return json.dumps(doc, ensure_ascii=False, indent=1, allow_nan=False) + "\n"
    return render_html(doc)


def write_report(
    lake: str | os.PathLike[str],
    path: str | os.PathLike[str],
    run: str | None = "latest",
    options: ReportOptions | None = None,
    fmt: Literal["html", "json"] = "html",
) -> WrittenReport:
    """Build the report of `run` from the lake and write it to `path`."""
    con = connect(lake, read_only=True)
    try:
        doc = build_report(con, run, options)
    finally:
        con.close()
    text = render(doc, fmt)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    target.write_bytes(data)
    return WrittenReport(
        path=target,
        run_id=doc["run"]["run_id"],
        conversations=len(doc["conversations"]["id"]),
        embedded=sum(1 for d in doc["details"] if d is not None),
        bytes=len(data),
    )


__all__ = [
    "ReportDoc",
    "ReportError",
    "ReportOptions",
    "WrittenReport",
    "build_report",
    "previous_run",
    "render",
    "render_html",
    "report_json_schema",
    "resolve_run",
    "validate_report",
    "write_report",
]
