"""Metrics of a run against a gold set, and a row-by-row comparison of two runs."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tagger.prompting.schema import MAX_SUMMARY_WORDS, normalise_tag
from tagger.prompting.taxonomy import Synonyms, synonym_key
from tagger.review.bymodel import by_model, cascade_accuracy, compare_by_model, is_cascade
from tagger.review.errorbars import error_bars
from tagger.review.errorbars import scored as score_item
from tagger.review.stats import Scored, tag_macro_f1

# tagger's automatic ids: 24 hex digits of a sha256; earlier versions wrote its first 12.
_AUTO_ID_RE = re.compile(r"[0-9a-f]{24}")
_OLD_ID_RE = re.compile(r"[0-9a-f]{12}")
_OLD_ID_DIGITS = 12
# Openers that waste the one line a summary has on saying it is a paper.
_OPENER_RE = re.compile(r"^\s*(?:this paper|this work|in this paper|in this work|we)\b", re.I)


def index_rows(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Rows by id; an ok row wins over an error row for the same id, else the first."""
    found: dict[str, dict[str, Any]] = {}
    for row in rows:
        ident = str(row["id"])
        if ident not in found or (found[ident].get("status") != "ok" and row.get("status") == "ok"):
            found[ident] = row
    return found


class IdIndex:
    """A run's rows by id, where an old 12-digit automatic id matches the 24-digit one."""

    def __init__(self, rows: Sequence[dict[str, Any]]) -> None:
        self.rows = index_rows(rows)
        # Old id -> the new id it starts with; None when two new ids share it (no guessing).
        self._by_old: dict[str, str | None] = {}
        for ident in self.rows:
            if _AUTO_ID_RE.fullmatch(ident):
                old = ident[:_OLD_ID_DIGITS]
                self._by_old[old] = None if old in self._by_old else ident

    def find(self, ident: str) -> str | None:
        """The id under which this index holds the row for ident, or None."""
        if ident in self.rows:
            return ident
        if _OLD_ID_RE.fullmatch(ident):
            return self._by_old.get(ident)
        if _AUTO_ID_RE.fullmatch(ident) and ident[:_OLD_ID_DIGITS] in self.rows:
            return ident[:_OLD_ID_DIGITS]
        return None


def tag_keys(tags: Any, synonyms: Synonyms | None) -> set[str]:
    """Tags folded for comparison: normalised, synonyms applied, then synonym_key."""
    if not isinstance(tags, list):
        return set()
    keys = {synonym_key(normalise_tag(str(tag), synonyms)) for tag in tags}
    return keys - {""}


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def _f1(precision: float | None, recall: float | None) -> float | None:
    if precision is None or recall is None:
        return None
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def summary_checks(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Shape checks on the summaries of a run's ok rows (no gold needed)."""
    summaries = [
        str(row.get("summary"))
        for row in rows
        if row.get("status") == "ok" and isinstance(row.get("summary"), str)
    ]
    words = [len(text.split()) for text in summaries]
    count = len(summaries)
    return {
        "rows": count,
        "one_line": _ratio(sum("\n" not in s and "\r" not in s for s in summaries), count),
        "mean_words": _ratio(sum(words), count),
        "max_words": max(words, default=0),
        "over_limit": _ratio(sum(n > MAX_SUMMARY_WORDS for n in words), count),
        "bad_opener": _ratio(sum(bool(_OPENER_RE.match(s)) for s in summaries), count),
    }


@dataclass
class GoldScoring:
    """Gold rows matched to a run: which were found, which scored (ok), each scored item."""

    matched: list[tuple[dict[str, Any], str | None]]
    found: list[tuple[dict[str, Any], dict[str, Any]]]
    scored: list[tuple[dict[str, Any], dict[str, Any]]]
    items: list[Scored]
    whole_run: bool  # the scored gold rows are every ok row of the run


def score_gold(
    run: Sequence[dict[str, Any]], gold: Sequence[dict[str, Any]], synonyms: Synonyms | None
) -> GoldScoring:
    """Match gold rows to the run by id and score each one the run answered."""
    index = IdIndex(run)
    matched = [(g, index.find(g["id"])) for g in gold]
    found = [(g, index.rows[key]) for g, key in matched if key is not None]
    # In id order: the order of the gold file must not change any figure, to the last digit.
    scored = sorted(
        ((g, row) for g, row in found if row.get("status") == "ok"), key=lambda p: str(p[0]["id"])
    )
    items = [
        score_item(
            gold_row,
            run_row,
            tag_keys(gold_row.get("method_tags"), synonyms),
            tag_keys(run_row.get("method_tags"), synonyms),
        )
        for gold_row, run_row in scored
    ]
    ok_ids = {ident for ident, row in index.rows.items() if row.get("status") == "ok"}
    scored_ids = {str(row["id"]) for _, row in scored}
    return GoldScoring(matched, found, scored, items, bool(ok_ids) and scored_ids == ok_ids)


def evaluate(
    run: Sequence[dict[str, Any]], gold: Sequence[dict[str, Any]], synonyms: Synonyms | None
) -> dict[str, Any]:
    """Coverage, task-area accuracy and confusion, tag P/R/F1, summaries; with error bars."""
    scoring = score_gold(run, gold, synonyms)
    items = scoring.items
    confusion: Counter[tuple[str, str]] = Counter(
        (str(g["task_area"]), str(row.get("task_area"))) for g, row in scoring.scored
    )
    correct = sum(i.correct for i in items)
    true_pos = sum(i.true_pos for i in items)
    n_pred, n_gold = sum(i.predicted for i in items), sum(i.gold for i in items)
    precision, recall = _ratio(true_pos, n_pred), _ratio(true_pos, n_gold)
    labels = sorted({area for pair in confusion for area in pair})
    found, scored = scoring.found, scoring.scored
    report: dict[str, Any] = {
        "coverage": {
            "gold": len(gold),
            "found": len(found),
            "errored": len(found) - len(scored),
            "share": _ratio(len(found), len(gold)),
            "missing": [g["id"] for g, key in scoring.matched if key is None],
        },
        "task_area": {
            "evaluated": len(scored),
            "correct": correct,
            "accuracy": _ratio(correct, len(scored)),
            "labels": labels,
            "confusion": {e: {p: confusion[(e, p)] for p in labels} for e in labels},
        },
        "method_tags": {
            "evaluated": len(scored),
            "true_positives": true_pos,
            "predicted": n_pred,
            "gold": n_gold,
            "precision": precision,
            "recall": recall,
            "f1": _f1(precision, recall),
            "abstract_f1": _ratio(math.fsum(i.f1 for i in items), len(items)),
            "tag_macro_f1": tag_macro_f1(items, None),
        },
        "summary": summary_checks(run),
    }
    error_bars(report, items, gold, run, whole_run=scoring.whole_run)
    models = by_model(scoring.scored)
    if len(models) > 1 or is_cascade(run):  # a cascade, or a run put together from several
        report["by_model"] = models
        report["cascade"] = cascade_accuracy(scoring.scored)
    return report


def metric(report: dict[str, Any], path: str) -> float | None:
    """Look up "section.key" in an evaluate() report."""
    section, key = path.split(".")
    value = report[section][key]
    return None if value is None else float(value)


def describe_side(rows: Sequence[dict[str, Any]]) -> str:
    """ "model prompt@version" for a run (several joined with ", " if mixed)."""
    seen: dict[str, None] = {}
    for row in rows:
        prompt = f"{row.get('prompt') or '?'}@{row.get('prompt_version') or '?'}"
        seen[f"{row.get('model') or '?'} {prompt}"] = None
    return ", ".join(seen)


def _one_line(value: Any) -> str:
    return " ".join(str(value).split()) if value is not None else ""


def compare_runs(
    a_rows: Sequence[dict[str, Any]],
    b_rows: Sequence[dict[str, Any]],
    synonyms: Synonyms | None,
) -> dict[str, Any]:
    """Match rows by id; per row: area, tag and summary changes; totals first."""
    a_by_id, b_index = index_rows(a_rows), IdIndex(b_rows)
    rows: list[dict[str, Any]] = []
    only_a: list[str] = []
    matched_b: set[str] = set()
    for ident, a in a_by_id.items():
        key = b_index.find(ident)
        if key is None:
            only_a.append(ident)
            continue
        matched_b.add(key)
        b = b_index.rows[key]
        a_tags = [normalise_tag(str(t), synonyms) for t in a.get("method_tags") or []]
        b_tags = [normalise_tag(str(t), synonyms) for t in b.get("method_tags") or []]
        a_keys, b_keys = {synonym_key(t) for t in a_tags}, {synonym_key(t) for t in b_tags}
        rows.append(
            {
                "id": ident,
                "title": a.get("title") or b.get("title"),
                "status_a": a.get("status"),
                "status_b": b.get("status"),
                "model_a": a.get("model"),
                "model_b": b.get("model"),
                "area_a": a.get("task_area"),
                "area_b": b.get("task_area"),
                "area_changed": a.get("task_area") != b.get("task_area"),
                "tags_removed": [t for t in a_tags if synonym_key(t) not in b_keys],
                "tags_added": [t for t in b_tags if synonym_key(t) not in a_keys],
                "tags_a": a_tags,
                "tags_b": b_tags,
                "summary_changed": _one_line(a.get("summary")) != _one_line(b.get("summary")),
                "summary_a": a.get("summary"),
                "summary_b": b.get("summary"),
            }
        )
    only_b = [ident for ident in b_index.rows if ident not in matched_b]
    split = is_cascade(a_rows) or is_cascade(b_rows)
    return {
        "a": describe_side(a_rows),
        "b": describe_side(b_rows),
        "totals": {
            "compared": len(rows),
            "only_a": len(only_a),
            "only_b": len(only_b),
            "area_changed": sum(r["area_changed"] for r in rows),
            "tags_changed": sum(bool(r["tags_added"] or r["tags_removed"]) for r in rows),
            "summary_changed": sum(r["summary_changed"] for r in rows),
        },
        "only_a": only_a,
        "only_b": only_b,
        "rows": rows,
        **({"by_model": compare_by_model(rows)} if split else {}),
    }


DIFF_COLUMNS = (
    "id", "title", "status_a", "status_b", "area_changed", "area_a", "area_b",
    "tags_removed", "tags_added", "tags_a", "tags_b", "summary_changed", "summary_a", "summary_b",
)  # fmt: skip


def diff_sheet_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """compare rows as sheet values: flags as yes/no, tag lists joined by the sheet writer."""
    return [
        {
            **row,
            **{k: "yes" if row[k] else "no" for k in ("area_changed", "summary_changed")},
        }
        for row in rows
    ]
