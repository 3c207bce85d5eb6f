"""Parts merged into the ordinary run file and manifest: the rows tagger.ray.choose takes,
written in input order as a run writes OUT, each priced by the model that answered it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tagger import __version__
from tagger.errors import UsageError
from tagger.files.outfile import OutputFile
from tagger.files.rows import Row
from tagger.pipeline.summary import floor_usage
from tagger.pricing import PriceTable
from tagger.ray.choose import (
    Chosen,
    MergeStats,
    choose_any_run,
    choose_for_merge,
    choose_of_run,
    runs_of,
)
from tagger.ray.parts import Part, PartsRead, find_parts
from tagger.usage import NO_USAGE, Usage

__all__ = [
    "Chosen",
    "MergeStats",
    "choose_any_run",
    "choose_for_merge",
    "choose_of_run",
    "merge_fields",
    "merge_parts",
    "runs_of",
    "write_merged",
]


def write_merged(
    chosen: Chosen,
    output: Path,
    manifest: Callable[[MergeStats, list[Part]], dict[str, Any]],
    *,
    prices: PriceTable | None = None,
    flex: bool = False,
    inputs: Sequence[Path] = (),
) -> MergeStats:
    """Write the chosen rows to OUT with the manifest `manifest(stats)` returns.

    OUT is written as a run writes it: locked, in OUT.partial, then renamed with the manifest.
    Every row is priced by the model that answered it.
    """
    stats = chosen.stats
    target = OutputFile(output, [*inputs, *(part.path for part in chosen.parts)])
    try:
        try:
            by_model: dict[tuple[str, bool], Usage] = {}
            for row in chosen.rows:
                target.writer.write(row.row)
                _count(stats, row.row, by_model)
            stats.cost = _cost(stats, by_model, prices or PriceTable(), flex)
            document = manifest(stats, chosen.parts)
            complete = document.get("status") == "complete"
            target.settle(document, complete=complete, ok=stats.ok)
        except BaseException:
            target.discard()
            raise
    finally:
        target.release()
    return stats


def _count(stats: MergeStats, row: Row, by_model: dict[tuple[str, bool], Usage]) -> None:
    stats.count(row)
    if row.cached:  # answered before: its tokens were paid then, as in a local run
        return
    stats.mode = stats.mode or (row.mode if row.ok else None)
    served = row.served_model
    if served and served not in stats.served_models and len(stats.served_models) < 3:
        stats.served_models.append(served)
    used = Usage(
        prompt_tokens=max(0, row.prompt_tokens),
        completion_tokens=max(0, row.completion_tokens),
        cached_input_tokens=max(0, row.cached_input_tokens),
        reasoning_tokens=max(0, row.reasoning_tokens),
        cache_write_tokens=max(0, row.cache_write_tokens),
    )
    stats.usage += used
    if row.ok and used.prompt_tokens > 0:  # paid for by this row
        answer = {
            "summary": row.summary,
            "task_area": row.task_area,
            "method_tags": row.method_tags,
        }
        stats.floor_usage += floor_usage(row.abstract, row.title, answer, used)
    if used != NO_USAGE:
        # Priced as a local run prices: by the model the server says answered, if it says.
        model = (row.served_model or row.model, row.batch_id is not None)
        by_model[model] = by_model.get(model, NO_USAGE) + used


def _cost(
    stats: MergeStats, by_model: dict[tuple[str, bool], Usage], prices: PriceTable, flex: bool
) -> float | None:
    total = 0.0
    for (model, batch), used in by_model.items():
        cost = prices.cost(model, used, batch=batch, flex=flex and not batch)
        if cost is None:
            stats.unpriced.append(model)
            continue
        total += cost
    return None if stats.unpriced else total


def merge_fields(stats: MergeStats, parts: Sequence[Part]) -> dict[str, Any]:
    """What a manifest says about the merge itself."""
    return {
        "parts": [str(part.path) for part in parts],
        "missing": stats.missing,
        "replaced_rows": stats.replaced,
        "other_run_rows": stats.other_run_rows,
        "out_of_range_rows": stats.out_of_range,
        "skipped_part_lines": stats.skipped_lines,
    }


def merge_parts(
    paths: Sequence[Path],
    output: Path,
    *,
    run: str | None = None,
    any_run: bool = False,
    prices: PriceTable | None = None,
) -> MergeStats:
    """`tagger merge`: the parts named (files, or OUT.parts/ directories) merged into OUT.

    The parts must be of one run, or `run` names the one to merge (a prefix of its identity);
    `any_run` merges every run's rows, counting those of runs other than the latest.
    """
    read = PartsRead()
    parts = find_parts(paths, read)
    if not parts:
        raise UsageError("no part files found: name OUT.parts/ or part-*.jsonl files")
    chosen = choose_for_merge(parts, run, any_run=any_run)
    chosen.stats.skipped_lines += read.skipped
    chosen.stats.skipped_where = (read.skipped_where + chosen.stats.skipped_where)[:5]
    runs = runs_of(chosen.parts)

    def manifest(stats: MergeStats, used: list[Part]) -> dict[str, Any]:
        whole = stats.missing == 0 and not stats.not_run and _count_known(used)
        return {
            "tagger_version": __version__,
            "status": "complete" if whole else "incomplete",
            "output": str(output),
            "merged_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "runs": [r for r in runs if r is not None],
            "any_run": any_run,
            "items": stats.items,
            "ok": stats.ok,
            "failed": stats.failed,
            "not_run": stats.not_run,
            "cached": stats.cached,
            **stats.usage.as_fields(),
            "estimated_cost_usd": stats.cost,
            **merge_fields(stats, used),
        }

    return write_merged(chosen, output, manifest, prices=prices)


def _count_known(parts: Sequence[Part]) -> bool:
    return any(part.header.input_count is not None for part in parts)
