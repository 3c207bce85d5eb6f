"""The counts sheet of a review workbook: abstracts per task area and method tag, and, for a
run whose rows more than one model answered (a cascade), per answering model and role."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

__all__ = ["count_rows"]


def count_rows(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str, int]]:
    """(kind, name, abstracts) counts per task area and per method tag, most frequent first;
    then per answering model and per cascade role when the rows say so; then the errors."""
    ok = [row for row in rows if row.get("status") == "ok"]
    areas = Counter(str(row.get("task_area")) for row in ok if row.get("task_area"))
    tags: Counter[str] = Counter()
    for row in ok:
        tags.update({str(tag) for tag in row.get("method_tags") or []})
    ordered = [("task_area", name, n) for name, n in sorted(areas.items(), key=_by_count)]
    ordered += [("method_tag", name, n) for name, n in sorted(tags.items(), key=_by_count)]
    models = Counter(str(row.get("model")) for row in rows if row.get("model"))
    roles = Counter(str(row["cascade_role"]) for row in rows if row.get("cascade_role"))
    if len(models) > 1 or roles:
        ordered += [("model", name, n) for name, n in sorted(models.items(), key=_by_count)]
        ordered += [("cascade_role", name, n) for name, n in sorted(roles.items(), key=_by_count)]
    errors = sum(1 for row in rows if row.get("status") != "ok")
    if errors:
        ordered.append(("status", "error", errors))
    return ordered


def _by_count(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]
