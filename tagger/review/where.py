"""--where filters on run rows: status, task area, confidence; and a row's confidence."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tagger.errors import UsageError

CONFIDENCE_FIELD = "task_area_confidence"
_WHERE_HELP = "use status=ok|error, area=<id>[,<id>…], confidence<0.6 (also <=, >, >=, !=)"
_WHERE_RE = re.compile(r"^\s*([a-z_]+)\s*(<=|>=|!=|=|<|>)\s*(.*?)\s*$", re.IGNORECASE)
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def confidence(row: dict[str, Any]) -> float | None:
    """A row's task_area_confidence as a float in [0, 1], or None when absent or unusable."""
    value = row.get(CONFIDENCE_FIELD)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        return None
    return float(value)


@dataclass(frozen=True)
class Where:
    """One parsed --where filter."""

    text: str
    field: str
    op: str
    values: tuple[str, ...] = ()
    number: float = 0.0

    def matches(self, row: dict[str, Any]) -> bool:
        """Whether a run row passes this filter (a row without confidence fails one on it)."""
        if self.field == "confidence":
            value = confidence(row)
            return value is not None and _COMPARE[self.op](value, self.number)
        found = str(row.get(self.field) or "") in self.values
        return found if self.op == "=" else not found


def parse_where(text: str) -> Where:
    """Parse one --where filter; a bad one is a UsageError saying what is accepted."""
    match = _WHERE_RE.match(text)
    bad = f"--where {text!r}"
    if match is None:
        raise UsageError(f"{bad}: not a filter; {_WHERE_HELP}")
    name, op, value = match.group(1).lower(), match.group(2), match.group(3)
    if name in ("status", "area", "task_area"):
        if op not in ("=", "!="):
            raise UsageError(f"{bad}: {name} takes = or !=; {_WHERE_HELP}")
        values = tuple(part.strip() for part in value.split(",") if part.strip())
        if not values:
            raise UsageError(f"{bad}: give a value after {op}; {_WHERE_HELP}")
        if name == "status":
            values = tuple(v.lower() for v in values)
        if name == "status" and not set(values) <= {"ok", "error"}:
            raise UsageError(f"{bad}: status is ok or error; {_WHERE_HELP}")
        return Where(text.strip(), "status" if name == "status" else "task_area", op, values)
    if name == "confidence":
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not 0 <= number <= 1:
            raise UsageError(f"{bad}: confidence is compared with a number from 0 to 1")
        return Where(text.strip(), "confidence", op, number=number)
    raise UsageError(f"{bad}: unknown field {name!r}; {_WHERE_HELP}")


def apply_filters(rows: Sequence[dict[str, Any]], filters: Sequence[Where]) -> list[int]:
    """Positions of the rows passing every filter; a filter naming nothing in the run is refused."""
    areas = {str(row.get("task_area")) for row in rows if row.get("task_area")}
    for where in filters:
        unknown = sorted(set(where.values) - areas) if where.field == "task_area" else []
        if unknown:
            raise UsageError(
                f"--where {where.text!r}: no row has task area {', '.join(unknown)} "
                f"(the run has {', '.join(sorted(areas)) or 'none'})"
            )
        if where.field == "confidence" and not any(confidence(row) is not None for row in rows):
            raise UsageError(
                f"--where {where.text!r}: no row has {CONFIDENCE_FIELD} (the server gave no "
                "log-probabilities for this run)"
            )
    return [i for i, row in enumerate(rows) if all(w.matches(row) for w in filters)]
