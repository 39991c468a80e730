"""Calibrating an LLM judge against human labels: how often does the judge say what a person
said, beyond what chance alone would give?

`spanscore judge-check` judges conversations people have already labelled and prints the
agreement, so a team can trust a rubric before gating on it. This module is its pure part:
reading the labels file and computing the statistics.

Labels file
-----------
JSON (a list of records, or an object mapping conversation id -> label or record), JSONL (one
record a line; blank lines are skipped) or CSV (a header row; an empty cell is an absent
field), told apart by the extension (.json, .jsonl or .ndjson, .csv) unless `format` names it.
A record has

    conversation_id   the conversation (a non-empty string)
    label             a category, for a qualitative rubric ("correct", "partially correct")
    value or score    or a number, for a quantitative rubric on a scale (0-5); an integral
                      number is kept as an int, so 4 and 4.0 are the same point of the scale
    note              optional free text

Surrounding blanks of ids and categories are dropped; other fields are ignored (labelling tools
export their own). A file holds categories or numbers, not both. Loading never half-works: every
problem is reported with the file, the line (JSONL, CSV) or the JSON path (`[3].label`,
`["conv-7"]`) and what was expected; a conversation labelled twice and a file without a single
label are problems too.

Agreement
---------
`agreement()` takes (human, judge) pairs; a judge that gave no verdict (None) is counted as
missing and left out of every statistic. Categories are ordered by `labels`, else the sorted
union of what both raters said (numbers numerically, before names).

- accuracy: the share of conversations where the judge said what the human said (p_o).
- Cohen's kappa: (p_o - p_e) / (1 - p_e), p_e the agreement chance would give from each
  rater's own label frequencies: 1 is perfect, 0 is chance, below 0 worse than chance. A judge
  that always says the majority label can be 90 % accurate and still earns 0.
- for an ordinal scale (`ordinal=True`), Cohen's (1968) weighted kappa
  1 - Σ w·observed / Σ w·expected, with disagreement weights |i - j| (linear) or (i - j)²
  (quadratic) over the positions i, j of the categories in the order: near misses cost less.
  Positions, not values: a category of `labels` nobody used still widens the scale.
- the confusion matrix (rows: human, columns: judge) and per category precision, recall,
  F1 = 2·TP / (2·TP + FP + FN) and support (how often the human said it).

When both raters gave every conversation the same single category, chance agreement is 1 and
kappa is 0/0: it is reported as None with the reason (`kappa_undefined`), never as NaN. So is
any other statistic whose denominator is zero, e.g. the precision of a category the judge never
said. Kappa is read with Landis & Koch's (1977) words: below 0 poor, up to 0.20 slight, 0.40
fair, 0.60 moderate, 0.80 substantial, above that almost perfect.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Category = str | int | float


# --- the labels file -----------------------------------------------------------------------


@dataclass(frozen=True)
class HumanLabel:
    conversation_id: str
    label: Category  # a str for a category, an int or float for a point on a scale
    note: str | None = None
    where: str = ""  # "labels.jsonl:4" or "labels.json: [3]", for messages about this label


class LabelsError(ValueError):
    """The labels file cannot be used; `problems` lists every problem, one line each."""

    SHOWN = 20  # a file in the wrong shape has a problem on every line: the first ones suffice

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        lines = self.problems[: self.SHOWN]
        if len(self.problems) > self.SHOWN:
            lines.append(f"... and {len(self.problems) - self.SHOWN} more problems")
        super().__init__("\n".join(lines))


class _Bad(Exception):
    """A problem of one record; the loader adds where it is."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class _Where:
    file: str
    line: int | None = None
    path: str = ""  # the record's JSON path, when the file is one JSON document

    def __call__(self, field: str | None = None) -> str:
        if self.line is not None:
            return f"{self.file}:{self.line}" + (f": {field}" if field else "")
        return f"{self.file}: {self.path}" + (f".{field}" if field else "")


class _Object(dict[str, Any]):
    """A JSON object that remembers the keys it had twice (json.loads would keep the last)."""

    repeated: list[str]


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    obj.repeated = [k for k, count in Counter(k for k, _ in pairs).items() if count > 1]
    return obj


FORMATS = {".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}


_RECORD = "an object with conversation_id and label or value"


def load_labels(path: str | Path, *, format: str | None = None) -> list[HumanLabel]:  # noqa: A002
    """The human labels of a JSON, JSONL or CSV file, in file order (see the module docstring).

    Raises `LabelsError` naming the file, the line or JSON path, and what was expected."""
    path = Path(path)
    name = str(path)
    if format is not None and format not in ("json", "jsonl", "csv"):
        raise LabelsError([f"{name}: format: expected json, jsonl or csv, got {format!r}"])
    fmt = format or FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise LabelsError(
            [f"{name}: cannot tell the format: expected a .json, .jsonl or .csv file"]
        )
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: spreadsheets write a BOM
    except UnicodeDecodeError as exc:
        raise LabelsError([f"{name}: not UTF-8 text (byte {exc.start})"]) from None
    except OSError as exc:
        raise LabelsError([f"{name}: cannot read: {exc.strerror or exc}"]) from None
    problems: list[str] = []
    reader = {"json": _json_records, "jsonl": _jsonl_records, "csv": _csv_records}[fmt]
    labels: list[HumanLabel] = []
    first: dict[str, HumanLabel] = {}
    for where, raw in reader(name, text, problems):
        if isinstance(raw, _Object) and raw.repeated:
            problems.append(f"{where(raw.repeated[0])}: expected once in a record, given twice")
            continue
        try:
            label = _label(raw, where)
        except _Bad as bad:
            problems.append(f"{where(bad.field)}: {bad.message}")
            continue
        if label.conversation_id in first:
            seen = first[label.conversation_id].where
            problems.append(
                f"{where('conversation_id')}: {label.conversation_id!r} is labelled twice "
                f"(first at {seen})"
            )
            continue
        if labels and isinstance(label.label, str) != isinstance(labels[0].label, str):
            problems.append(
                f"{where()}: expected {_kind_of(labels[0].label)}, as {labels[0].where} has: "
                "a file holds categories or numbers, not both"
            )
            continue
        first[label.conversation_id] = label
        labels.append(label)
    if problems:
        raise LabelsError(problems)
    if not labels:
        raise LabelsError([f"{name}: no labelled conversations"])
    return labels


def _kind_of(label: Category) -> str:
    return "a category (label)" if isinstance(label, str) else "a number (value/score)"


def _json_records(
    name: str, text: str, problems: list[str]
) -> Iterable[tuple[_Where, Mapping[str, Any]]]:
    if not text.strip():
        return
    try:
        document = json.loads(text, object_pairs_hook=_object)
    except json.JSONDecodeError as exc:
        problems.append(f"{name}:{exc.lineno}: invalid JSON: {exc.msg} (column {exc.colno})")
        return
    if isinstance(document, list):
        for i, item in enumerate(document):
            where = _Where(name, path=f"[{i}]")
            if isinstance(item, dict):
                yield where, item
            else:
                problems.append(f"{where()}: expected {_RECORD}, got {_kind(item)}")
    elif isinstance(document, _Object):
        for key in document.repeated:
            where = _Where(name, path=f"[{json.dumps(key)}]")
            problems.append(f"{where()}: {key!r} is labelled twice (the key appears twice)")
        for key, item in document.items():
            where = _Where(name, path=f"[{json.dumps(key)}]")
            if isinstance(item, dict):
                given = item.get("conversation_id", key)
                if given != key:
                    problems.append(
                        f"{where('conversation_id')}: expected {key!r} (the key), got {given!r}"
                    )
                    continue
                item.setdefault("conversation_id", key)
                yield where, item
            elif isinstance(item, str):
                yield where, {"conversation_id": key, "label": item}
            elif isinstance(item, int | float) and not isinstance(item, bool):
                yield where, {"conversation_id": key, "value": item}
            else:
                problems.append(
                    f"{where()}: expected a label (a string), a value (a number) or "
                    f"{_RECORD}, got {_kind(item)}"
                )
    else:
        problems.append(
            f"{name}: expected a list of records or an object mapping conversation id to "
            f"label, got {_kind(document)}"
        )


def _jsonl_records(
    name: str, text: str, problems: list[str]
) -> Iterable[tuple[_Where, Mapping[str, Any]]]:
    # split("\n"), not splitlines(): U+2028 and friends may stand inside a JSON string
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line, object_pairs_hook=_object)
        except json.JSONDecodeError as exc:
            problems.append(f"{name}:{number}: invalid JSON: {exc.msg} (column {exc.colno})")
            continue
        if isinstance(item, dict):
            yield _Where(name, line=number), item
        else:
            problems.append(f"{name}:{number}: expected {_RECORD}, got {_kind(item)}")


def _csv_records(
    name: str, text: str, problems: list[str]
) -> Iterable[tuple[_Where, Mapping[str, Any]]]:
    rows = csv.reader(io.StringIO(text), strict=True)  # strict: a stray quote is an error
    end = 0  # the line the last row ended on
    try:
        header = [cell.strip().lower() for cell in next(rows, [])]
        if not header:
            return
        twice = sorted(h for h, count in Counter(header).items() if count > 1 and h)
        if (
            "conversation_id" not in header
            or not {"label", "value", "score"} & set(header)
            or twice
        ):
            problems.append(
                f"{name}:1: expected a header row naming conversation_id and label, value or "
                f"score once each, got {','.join(header)}"
            )
            return
        end = rows.line_num
        for row in rows:
            # a quoted cell may span lines: a row starts after the previous one ended
            start, end = end + 1, rows.line_num
            if not any(cell.strip() for cell in row):
                continue
            if any(cell.strip() for cell in row[len(header) :]):
                problems.append(
                    f"{name}:{start}: expected {len(header)} cells like the header, got {len(row)}"
                )
                continue
            yield _Where(name, line=start), dict(zip(header, row, strict=False))
    except csv.Error as exc:  # the reader cannot go on after one; report the row's start
        problems.append(f"{name}:{end + 1}: invalid CSV: {exc}")


def _label(raw: Mapping[str, Any], where: _Where) -> HumanLabel:
    cid = raw.get("conversation_id")
    if isinstance(cid, str):
        cid = cid.strip()
    if cid is None or cid == "":
        raise _Bad("conversation_id", "missing: every record names the conversation it labels")
    if not isinstance(cid, str):
        raise _Bad("conversation_id", f"expected a string, got {_kind(cid)}")
    given = [key for key in ("label", "value", "score") if _present(raw.get(key))]
    if not given:
        raise _Bad(None, "expected a label (a category) or a value or score (a number)")
    if len(given) > 1:
        raise _Bad(given[1], f"expected one of label, value and score, got {' and '.join(given)}")
    key = given[0]
    label: Category
    if key == "label":
        if not isinstance(raw[key], str):
            raise _Bad(key, f"expected a category (a string), got {_kind(raw[key])}")
        label = raw[key].strip()
    else:
        label = _number(key, raw[key])
    note = raw.get("note")
    if note is not None and not isinstance(note, str):
        raise _Bad("note", f"expected a string, got {_kind(note)}")
    return HumanLabel(cid, label, note or None, where())


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip())


def _number(key: str, value: Any) -> int | float:
    number: int | float
    if isinstance(value, str):  # CSV cells, and JSON from tools that quote their numbers
        try:
            number = int(value)
        except ValueError:
            try:
                number = float(value)
            except ValueError:
                raise _Bad(key, f"expected a number, got {value!r}") from None
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = value
    else:
        raise _Bad(key, f"expected a number, got {_kind(value)}")
    if isinstance(number, float):
        if not math.isfinite(number):
            raise _Bad(key, f"expected a finite number, got {value!r}")
        if number.is_integer():
            number = int(number)  # 4.0 and 4 are the same point of an ordinal scale
    return number


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    return "an object" if isinstance(value, dict) else "a list"


# --- agreement -----------------------------------------------------------------------------


def landis_koch(kappa: float) -> str:
    """Landis & Koch's (1977) word for a kappa value."""
    if kappa < 0:
        return "poor"
    for bound, word in ((0.2, "slight"), (0.4, "fair"), (0.6, "moderate"), (0.8, "substantial")):
        if kappa <= bound:
            return word
    return "almost perfect"


@dataclass(frozen=True)
class LabelStats:
    label: Category
    precision: float | None  # None: the judge never said this label
    recall: float | None  # None: the human never said it (support 0)
    f1: float | None  # None: neither rater said it
    support: int  # how often the human said it


@dataclass(frozen=True)
class Agreement:
    n: int  # pairs with a judge verdict: the statistics' base
    missing: int  # pairs where the judge gave no verdict
    labels: tuple[Category, ...]
    confusion: tuple[tuple[int, ...], ...]  # [human][judge], in `labels` order
    accuracy: float
    kappa: float | None
    kappa_undefined: str | None  # why kappa (and the weighted kappa) is None
    weights: str | None  # "linear" or "quadratic" for an ordinal scale, else None
    weighted_kappa: float | None
    per_label: tuple[LabelStats, ...]

    @property
    def interpretation(self) -> str | None:
        return None if self.kappa is None else landis_koch(self.kappa)

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "missing": self.missing,
            "accuracy": self.accuracy,
            "kappa": self.kappa,
            "interpretation": self.interpretation,
            "kappa_undefined": self.kappa_undefined,
            "weights": self.weights,
            "weighted_kappa": self.weighted_kappa,
            "labels": list(self.labels),
            "confusion": [list(row) for row in self.confusion],
            "per_label": [
                {
                    "label": s.label,
                    "precision": s.precision,
                    "recall": s.recall,
                    "f1": s.f1,
                    "support": s.support,
                }
                for s in self.per_label
            ],
        }

    def render(self) -> str:
        """The text a terminal user reads: a summary line, the confusion matrix and the table
        of categories."""
        head = [f"n={self.n}", f"missing={self.missing}", f"accuracy={self.accuracy:.3f}"]
        head.append(f"kappa={_kappa_text(self.kappa)}")
        if self.weights is not None:
            head.append(f"weighted kappa ({self.weights})={_kappa_text(self.weighted_kappa)}")
        lines = ["  ".join(head)]
        if self.kappa_undefined:
            lines.append(f"kappa is undefined: {self.kappa_undefined}")
        names = [str(label) for label in self.labels]
        lines += ["", "confusion matrix (rows: human, columns: judge)"]
        lines += _grid(
            [["human \\ judge", *names]]
            + [[name, *map(str, row)] for name, row in zip(names, self.confusion, strict=True)]
        )
        lines.append("")
        lines += _grid(
            [["label", "precision", "recall", "f1", "support"]]
            + [
                [name, _num(s.precision), _num(s.recall), _num(s.f1), str(s.support)]
                for name, s in zip(names, self.per_label, strict=True)
            ]
        )
        return "\n".join(lines) + "\n"


def _kappa_text(kappa: float | None) -> str:
    return "undefined" if kappa is None else f"{kappa:.3f} ({landis_koch(kappa)})"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _grid(rows: list[list[str]]) -> list[str]:
    """Rows as aligned columns: the first (names) to the left, the numbers to the right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def agreement(
    pairs: Iterable[tuple[Category, Category | None]],
    *,
    labels: Sequence[Category] | None = None,
    ordinal: bool = False,
    weights: Literal["linear", "quadratic"] = "quadratic",
) -> Agreement:
    """How well the judge agrees with the humans over (human, judge) pairs (see the module
    docstring). Raises ValueError when there is nothing to compare or a value is not a
    category of `labels`."""
    if weights not in ("linear", "quadratic"):
        raise ValueError(f"weights: expected 'linear' or 'quadratic', got {weights!r}")
    pairs = list(pairs)
    if not pairs:
        raise ValueError("no (human, judge) pairs to compare: label some conversations first")
    for human, judge in pairs:
        if human is None:
            raise ValueError("every pair needs the human's label; got None")
        for value in (human, judge):
            _check_category(value)
    rated = [(h, j) for h, j in pairs if j is not None]
    if not rated:
        raise ValueError(
            f"the judge gave no verdict for any of the {len(pairs)} conversations: "
            "nothing to compare"
        )
    order = _order(rated, labels, ordinal)
    index = {label: i for i, label in enumerate(order)}
    k, n = len(order), len(rated)
    confusion = [[0] * k for _ in range(k)]
    for human, judge in rated:
        confusion[index[human]][index[judge]] += 1
    rows = [sum(row) for row in confusion]
    cols = [sum(row[j] for row in confusion) for j in range(k)]
    agree = sum(confusion[i][i] for i in range(k))

    # Integer sums, one division at the end: exact zero tests, and swapping the raters gives
    # the very same float. chance = n² · p_e, so p_e = 1 exactly when chance == n².
    chance = sum(rows[i] * cols[i] for i in range(k))
    kappa: float | None = None
    weighted: float | None = None
    undefined: str | None = None
    if chance == n * n:
        (only,) = {label for pair in rated for label in pair}
        undefined = (
            f"both raters gave every conversation the same label ({only!r}), so chance "
            "agreement is 1 and kappa is 0/0"
        )
    else:
        kappa = (n * agree - chance) / (n * n - chance)
        if ordinal:
            power = 1 if weights == "linear" else 2
            cost = [[abs(i - j) ** power for j in range(k)] for i in range(k)]
            observed = sum(cost[i][j] * confusion[i][j] for i in range(k) for j in range(k))
            expected = sum(cost[i][j] * rows[i] * cols[j] for i in range(k) for j in range(k))
            # expected > 0 here: some human category differs from some judge category
            weighted = 1 - n * observed / expected

    stats = []
    for i, label in enumerate(order):
        hit = confusion[i][i]
        stats.append(
            LabelStats(
                label=label,
                precision=hit / cols[i] if cols[i] else None,
                recall=hit / rows[i] if rows[i] else None,
                f1=2 * hit / (rows[i] + cols[i]) if rows[i] + cols[i] else None,
                support=rows[i],
            )
        )
    return Agreement(
        n=n,
        missing=len(pairs) - n,
        labels=tuple(order),
        confusion=tuple(tuple(row) for row in confusion),
        accuracy=agree / n,
        kappa=kappa,
        kappa_undefined=undefined,
        weights=weights if ordinal else None,
        weighted_kappa=weighted,
        per_label=tuple(stats),
    )


def _check_category(value: object) -> None:
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, int | float):
        raise ValueError(f"expected a category (a string) or a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r}")


def _order(
    rated: list[tuple[Category, Category]], labels: Sequence[Category] | None, ordinal: bool
) -> list[Category]:
    used = {label for pair in rated for label in pair}
    if labels is None:
        if ordinal and any(isinstance(label, str) for label in used):
            raise ValueError(
                "ordinal=True with category names needs `labels` to give their order, lowest first"
            )
        # numbers numerically, then names; (0, 2) and (1, "a") never compare their 2nd items
        return sorted(used, key=lambda v: (1, v) if isinstance(v, str) else (0, v))
    order = list(labels)
    if len(set(order)) != len(order):
        twice = [label for label, count in Counter(order).items() if count > 1]
        raise ValueError(f"labels: {twice[0]!r} is listed twice")
    known = set(order)
    for human, judge in rated:
        for rater, label in (("human", human), ("judge", judge)):
            if label not in known:
                raise ValueError(
                    f"the {rater} said {label!r}, which is not one of the labels {order!r}"
                )
    return order
