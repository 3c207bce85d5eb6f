"""The end-of-run summary's lines, and the bill against its floor."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tagger.pipeline.stats import RunStats
from tagger.pricing import count_text_tokens
from tagger.usage import Usage
from tagger.wording import plural

__all__ = [
    "bill_to_floor",
    "describe_floor",
    "describe_parts",
    "describe_tokens",
    "floor_usage",
    "summarise",
]


def summarise(stats: RunStats) -> Sequence[tuple[str, str]]:
    """Label/value pairs for the end-of-run table."""
    cost = f"${stats.cost:.4f}" if stats.cost is not None else "n/a (unknown model price)"
    if stats.cost is None and stats.price_note:
        cost = f"n/a: {stats.price_note}"
    rows = [
        ("items", str(stats.items)),
        ("ok", str(stats.ok)),
        ("failed", str(stats.failed)),
        ("not run", str(stats.not_run)),
        ("cached", str(stats.cached)),
        ("requests", _requests(stats)),
        ("retries", str(stats.retries)),
        ("repairs", str(stats.repairs)),
        ("tokens", describe_tokens(stats.usage)),
        ("estimated cost", cost),
        *([("paid for", describe_parts(stats.cost_parts))] if stats.cost_parts else []),
        *([("floor", describe_floor(stats))] if stats.floor_cost else []),
        ("mode", stats.mode or "-"),
        ("time", f"{stats.duration:.1f} s"),
    ]
    if stats.service_tiers:
        rows.append(("service tier", ", ".join(stats.service_tiers)))
    if stats.served_models:
        rows.append(("answered by", ", ".join(stats.served_models[:3])))
    if stats.per_request > 1:
        fallbacks = f", {stats.pack_fallbacks} asked again alone" if stats.pack_fallbacks else ""
        rows.append(("per request", f"up to {stats.per_request} abstracts: "
                     f"{stats.packs} packs{fallbacks}"))  # fmt: skip
    if stats.packing_stopped:
        rows.append(("packing", stats.packing_stopped))
    if stats.refused_requests:
        rows.append(("refused by cap", str(stats.refused_requests)))
    if stats.over_cap:
        rows.append(("over the cap", f"{plural(stats.over_cap, 'abstract')} not sent: each "
                     "one's worst case was more than was left of --max-cost (its row says by "
                     "how much); the run went on with those that fitted"))  # fmt: skip
    if stats.usage_estimated:
        rows.append(("usage estimated", f"{stats.usage_estimated} replies without a sane usage"))
    if stats.stop_reason:
        rows.append(("stopped", stats.stop_reason))
    return rows


def bill_to_floor(stats: RunStats) -> float | None:
    """What the run paid over the least the same answers could cost (None: not priced)."""
    if stats.cost is None or not stats.floor_cost:
        return None
    return round(stats.cost / stats.floor_cost, 3)


def describe_parts(parts: dict[str, float]) -> str:
    """'input $0.0021 · cached $0.0017 · cache writes $0.0001 · output $0.0040 · reasoning $0'
    (cache writes and reasoning only where there are any)."""
    names = {"input": "input", "cached_input": "cached", "cache_write": "cache writes",
             "output": "output", "reasoning": "reasoning"}  # fmt: skip
    shown = [key for key in names if key in ("input", "cached_input", "output") or parts.get(key)]
    return " · ".join(f"{names[key]} ${parts.get(key, 0.0):.4f}" for key in shown)


def describe_floor(stats: RunStats) -> str:
    """'$0.0079 (abstracts and answers alone); paid 1.36x that'."""
    ratio = bill_to_floor(stats)
    paid = f"; paid {ratio:.2f}x that" if ratio is not None else ""
    return f"${stats.floor_cost:.4f} (the abstracts and the answers alone){paid}"


def _requests(stats: RunStats) -> str:
    """'3', or '0 chat, 1 GET /models' when the model list was asked for (a refused key)."""
    if not stats.model_listings or stats.requests:
        return str(stats.requests)
    return f"0 chat, {stats.model_listings} GET /models"


def describe_tokens(usage: Usage) -> str:
    """'N in (C cached) / M out (of which R reasoning)'; 'N in (C cached, W written to the
    cache) / ...' where the provider reported cache writes."""
    written = (
        f", {usage.cache_write_tokens} written to the cache" if usage.cache_write_tokens else ""
    )
    text = (
        f"{usage.prompt_tokens} in ({usage.cached_input_tokens} cached{written}) / "
        f"{usage.completion_tokens} out"
    )
    if usage.reasoning_tokens:
        text += f" (of which {usage.reasoning_tokens} reasoning)"
    return text


def floor_usage(
    text: str, title: str | None, answer: Mapping[str, Any] | None, used: Usage
) -> Usage:
    """The least one answered abstract could be billed: its own text (and title) as prompt,
    and its answer as compact JSON (no spaces, no number or array around it) as output, at
    most the answer tokens it was billed. The floor a run's bill is measured against."""
    billed = max(0, used.completion_tokens - used.reasoning_tokens)
    if answer is not None:
        compact = json.dumps(dict(answer), ensure_ascii=False, separators=(",", ":"))
        billed = min(billed, count_text_tokens(compact))
    own = count_text_tokens(text) + count_text_tokens(title or "")
    return Usage(prompt_tokens=own, completion_tokens=billed)
