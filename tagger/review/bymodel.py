"""Review split by the model that answered: a cascade's rows come from two models.

`eval` scores each model on the rows it answered, and a cascade against each of its models
alone where the rows carry both answers: every cascade row carries the cheap model's task
area (`cascade_cheap_area`), so the cheap model alone is scored on every gold row; the strong
model alone only on the rows it answered (sampled and escalated), which are not a random
part of the run (the escalated ones are the cheap model's least confident), so its figure is
labelled with the rows it covers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["by_model", "cascade_accuracy", "compare_by_model", "is_cascade"]


def is_cascade(rows: Iterable[dict[str, Any]]) -> bool:
    """Whether these rows come from a `tagger run --cascade`."""
    return any(row.get("cascade_role") for row in rows)


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _scores(pairs: Sequence[tuple[dict[str, Any], Any]]) -> dict[str, Any]:
    """evaluated / correct / accuracy of (gold row, predicted area) pairs."""
    correct = sum(str(gold["task_area"]) == str(area) for gold, area in pairs)
    return {"evaluated": len(pairs), "correct": correct, "accuracy": _share(correct, len(pairs))}


def by_model(scored: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> list[dict[str, Any]]:
    """Task-area accuracy per answering model (the row's `model`), on the gold rows scored."""
    models = sorted({str(row.get("model") or "?") for _, row in scored})
    return [
        {
            "model": model,
            **_scores(
                [
                    (g, row.get("task_area"))
                    for g, row in scored
                    if (row.get("model") or "?") == model
                ]
            ),
        }
        for model in models
    ]


def cascade_accuracy(
    scored: Sequence[tuple[dict[str, Any], dict[str, Any]]],
) -> dict[str, Any] | None:
    """The cascade's task-area accuracy next to each model's alone (None: not a cascade)."""
    rows = [(g, row) for g, row in scored if row.get("cascade_role")]
    if not rows:
        return None
    cheap = _commonest(row.get("model") for _, row in rows if row.get("cascade_role") == "kept")
    strong = _commonest(row.get("model") for _, row in rows if row.get("cascade_role") != "kept")
    cheap_pairs = [(g, row.get("cascade_cheap_area")) for g, row in rows]
    strong_pairs = [
        (g, row.get("task_area")) for g, row in rows if row.get("cascade_role") != "kept"
    ]
    roles = Counter(str(row.get("cascade_role")) for _, row in rows)
    return {
        "cascade": _scores([(g, row.get("task_area")) for g, row in rows]),
        "cheap_alone": {"model": cheap, **_scores(cheap_pairs)},
        # Only where the strong model answered: the sampled and escalated rows.
        "strong_alone": {"model": strong, "rows": "sampled and escalated", **_scores(strong_pairs)},
        "roles": dict(sorted(roles.items())),
    }


def _commonest(values: Iterable[Any]) -> str | None:
    counted = Counter(str(v) for v in values if v)
    return counted.most_common(1)[0][0] if counted else None


def compare_by_model(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """compare's rows counted by (model A, model B): how many, and how many changed area."""
    counts: Counter[tuple[str, str]] = Counter()
    changed: Counter[tuple[str, str]] = Counter()
    for row in rows:
        pair = (str(row.get("model_a") or "?"), str(row.get("model_b") or "?"))
        counts[pair] += 1
        changed[pair] += bool(row.get("area_changed"))
    return [
        {"model_a": a, "model_b": b, "compared": counts[(a, b)], "area_changed": changed[(a, b)]}
        for a, b in sorted(counts)
    ]
