"""When OpenAI's models retire: read from data, judged before the first request of a run.

Each row of tagger/data/models.toml's [lifecycle] table gives the day a deprecation was
announced, the shutdown day, the recommended successor and the page it was read on. A run on a
deprecated model is warned once, with the date and the successor; a run on a model past its
shutdown day stops (exit 2) before anything is sent, unless the server still lists the model
(then it is warned and goes on) or is not OpenAI's API: the table is OpenAI's retirements, and
an Azure deployment, a proxy or a local server may serve a model of that name on its own
schedule (warned, and goes on). OpenAI's model list may carry a `shutdown_date` of its own: a
model the table lacks is judged by that date.
"""

from __future__ import annotations

import datetime as dt
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from tagger.errors import FatalAPIError
from tagger.sending.families import DATA_FILE

__all__ = ["Lifecycle", "judge_lifecycle", "lifecycle_of", "lifecycles", "parse_day"]

# A dated snapshot shares its model's row: "o4-mini-2025-04-16", "gpt-4-0613".
_SNAPSHOT = re.compile(r"(?P<model>.+?)-(?:\d{4}-\d{2}-\d{2}|(?:0[1-9]|1[0-2])\d{2})")
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_SERVERS_LIST = "the server's model list"


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """One model's retirement, as its source says."""

    model: str
    shutdown: dt.date | None
    deprecated: dt.date | None = None
    successor: str | None = None
    source: str = ""  # OpenAI's page the facts are from
    as_of: str = ""
    read: str = ""  # how they were read: the page itself, a mirror of it, the API description

    def is_deprecated(self, today: dt.date) -> bool:
        """Announced for retirement (or with a shutdown day set), and not yet shut down."""
        announced = self.deprecated is None or self.deprecated <= today
        return announced and not self.is_shut_down(today)

    def is_shut_down(self, today: dt.date) -> bool:
        """Past its shutdown day (the day itself included: the model stops answering then)."""
        return self.shutdown is not None and self.shutdown <= today


def parse_day(value: object) -> dt.date | None:
    """A YYYY-MM-DD day from data or a server, or None if it is not one."""
    if isinstance(value, dt.datetime):  # a moment (TOML's 2026-10-23T00:00): no plain day
        return None
    if isinstance(value, dt.date):
        return value
    if not isinstance(value, str) or not _DAY.fullmatch(value):
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        return None


@cache
def lifecycles() -> dict[str, Lifecycle]:
    """Every row of the shipped table, by model name (read once per process)."""
    text = resources.files("tagger").joinpath(DATA_FILE).read_text(encoding="utf-8")
    return parse_lifecycles(tomllib.loads(text))


def parse_lifecycles(data: dict[str, Any]) -> dict[str, Lifecycle]:
    """The [lifecycle] table; ValueError naming the row whose dates are not days."""
    rows: dict[str, Lifecycle] = {}
    for model, raw in data.get("lifecycle", {}).items():
        shutdown, deprecated = parse_day(raw.get("shutdown")), parse_day(raw.get("deprecated"))
        if shutdown is None or ("deprecated" in raw and deprecated is None):
            raise ValueError(f"{DATA_FILE}: lifecycle {model}: dates must be YYYY-MM-DD days")
        if deprecated is not None and deprecated > shutdown:
            raise ValueError(f"{DATA_FILE}: lifecycle {model}: deprecated after its shutdown")
        rows[model] = Lifecycle(
            model=model,
            shutdown=shutdown,
            deprecated=deprecated,
            successor=raw.get("successor"),
            source=str(raw.get("source", "")),
            as_of=str(raw.get("as_of", "")),
            read=str(raw.get("read", "")),
        )
    return rows


def lifecycle_of(model: str, server_shutdown: object = None) -> Lifecycle | None:
    """The model's row (or its snapshot's model's), else one from the server's shutdown_date."""
    table = lifecycles()
    if model in table:
        return table[model]
    dated = _SNAPSHOT.fullmatch(model) if len(model) <= 200 else None
    if dated and dated.group("model") in table:
        return table[dated.group("model")]
    day = parse_day(server_shutdown)
    if day is not None:
        return Lifecycle(model=model, shutdown=day, source=_SERVERS_LIST)
    return None


def judge_lifecycle(
    model: str,
    today: dt.date,
    *,
    listed: bool,
    server_shutdown: object = None,
    openai: bool = True,
) -> str | None:
    """The warning for a deprecated model (or one shut down that the server still lists);
    FatalAPIError (exit 2) for one past its shutdown day that the server does not list.

    openai: the server is OpenAI's API, whose retirements the table records; elsewhere a model
    the table says is shut down is warned about, never stopped."""
    row = lifecycle_of(model, server_shutdown)
    if row is None or row.shutdown is None:
        return None
    successor = f"; its successor is {row.successor}" if row.successor else ""
    source = f" ({row.source}, read {row.as_of})" if row.as_of else f" ({row.source})"
    if row.is_shut_down(today):
        if listed:
            return (
                f"{model} was shut down on {row.shutdown}{source}, but the server still lists "
                f"it: going on{successor}"
            )
        if not openai and row.source != _SERVERS_LIST:
            return (
                f"{model} was shut down on OpenAI's API on {row.shutdown}{source}; this server "
                f"is not OpenAI's and may serve a model of that name: going on{successor}"
            )
        instead = f"pass --model {row.successor}" if row.successor else "pass another --model"
        raise FatalAPIError(
            f"{model} was shut down on {row.shutdown}{source} and the server does not list "
            f"it: nothing was sent; {instead}"
        )
    if row.is_deprecated(today):
        days = (row.shutdown - today).days
        when = "tomorrow" if days == 1 else f"in {days} days"
        return f"{model} is deprecated: it shuts down on {row.shutdown} ({when}){successor}{source}"
    return None
