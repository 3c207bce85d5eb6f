"""Merge parts into the ordinary run file and manifest, in input order."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tagger import __version__
from tagger.files.outfile import OutputFile
from tagger.files.rows import Row
from tagger.pricing import PriceTable
from tagger.ray.parts import PartRow, PartsRead, read_parts
from tagger.usage import NO_USAGE, Usage


@dataclass
class MergeStats:
    """What a merge wrote."""

    items: int = 0
    ok: int = 0
    failed: int = 0
    not_run: int = 0
    cached: int = 0
    usage: Usage = NO_USAGE
    cost: float | None = 0.0
    replaced: int = 0  # rows a later part answered better (a rerun's)
    skipped_lines: int = 0
    skipped_where: list[str] = field(default_factory=list)
    missing: int = 0  # input positions no part holds a row for (expected count given)


def _better(new: PartRow, old: PartRow | None) -> bool:
    """An ok row beats one that is not; among equals the later part's (a rerun's) wins."""
    return old is None or new.ok or not old.ok


def merge_parts(
    parts: Sequence[Path],
    output: Path,
    *,
    manifest: dict[str, Any] | None = None,
    expected: int | None = None,
    prices: PriceTable | None = None,
) -> MergeStats:
    """Write the best row of every input position to OUT (input order) with its manifest.

    Rows without a position (index -1, from a Dataset that had none) follow, in part order.
    OUT is written as a run writes it: locked, in OUT.partial, then renamed with the manifest.
    """
    read = PartsRead()
    best: dict[int, PartRow] = {}
    unplaced: list[PartRow] = []
    stats = MergeStats()
    for row in read_parts(parts, read):
        if row.index < 0:
            unplaced.append(row)
            continue
        old = best.get(row.index)
        if _better(row, old):
            stats.replaced += old is not None
            best[row.index] = row
    target = OutputFile(output, list(parts))
    try:
        try:
            model = None
            for row in [best[index] for index in sorted(best)] + unplaced:
                target.writer.write(row.row)
                model = model or row.row.model
                _count(stats, row.row)
            stats.skipped_lines, stats.skipped_where = read.skipped, read.skipped_where
            if expected is not None:
                stats.missing = max(0, expected - len(best))
            table = prices or PriceTable()
            stats.cost = table.cost(model, stats.usage) if model else None
            document = _manifest(manifest or {}, stats, parts, output)
            target.settle(document, complete=stats.missing == 0, ok=stats.ok)
        except BaseException:
            target.discard()
            raise
    finally:
        target.release()
    return stats


def _count(stats: MergeStats, row: Row) -> None:
    stats.items += 1
    not_run = not row.ok and (row.error or "").startswith("not run:")
    stats.ok += row.ok
    stats.not_run += not_run
    stats.failed += not row.ok and not not_run
    stats.cached += row.cached
    stats.usage += Usage(
        prompt_tokens=max(0, row.prompt_tokens),
        completion_tokens=max(0, row.completion_tokens),
        cached_input_tokens=max(0, row.cached_input_tokens),
    )


def _manifest(
    base: dict[str, Any], stats: MergeStats, parts: Sequence[Path], output: Path
) -> dict[str, Any]:
    """The run's manifest: what the run said about itself, with the merged counts."""
    return {
        "tagger_version": __version__,
        **base,
        "status": "complete" if stats.missing == 0 and not stats.not_run else "incomplete",
        "output": str(output),
        "merged_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "parts": [str(path) for path in parts],
        "items": stats.items,
        "ok": stats.ok,
        "failed": stats.failed,
        "not_run": stats.not_run,
        "cached": stats.cached,
        "missing": stats.missing,
        **stats.usage.as_fields(),
        "estimated_cost_usd": stats.cost,
    }
