"""Merge parts into the ordinary run file and manifest, in input order, one run's rows only.

Which rows are merged is decided here, without I/O beyond reading the parts:
- a `--ray` run merges the rows it wrote itself, and fills the positions it skipped with the
  earlier row it skipped them for (the same run, the same answer-cache key, id, source, line);
- `tagger merge` merges the parts of one run (the best row of each position: an ok row beats
  one that is not, among equals the later part's), or of every run only when asked.
Rows of another run, and rows for positions the input does not have, are counted, not merged.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tagger import __version__
from tagger.errors import UsageError
from tagger.files.outfile import OutputFile
from tagger.files.rows import Row
from tagger.pipeline.summary import floor_usage
from tagger.pricing import PriceTable
from tagger.ray.parts import Part, PartRow, PartsRead, find_parts, read_part
from tagger.ray.records import skip_token
from tagger.usage import NO_USAGE, Usage
from tagger.wording import plural


@dataclass
class MergeStats:
    """What a merge chose and wrote."""

    items: int = 0
    ok: int = 0
    failed: int = 0
    not_run: int = 0
    cached: int = 0
    usage: Usage = NO_USAGE
    cost: float | None = 0.0
    replaced: int = 0  # rows of this run that a later row of it replaced (a rerun's)
    other_run_rows: int = 0  # rows of parts another run wrote: left out, or merged when asked
    out_of_range: int = 0  # rows for positions the input does not have: left out
    skipped_lines: int = 0
    skipped_where: list[str] = field(default_factory=list)
    missing: int = 0  # input positions no row was chosen for (the count known)
    mode: str | None = None  # the structured-output mode of the first answered row
    served_models: list[str] = field(default_factory=list)  # the rows' served_model, at most 3
    unpriced: list[str] = field(default_factory=list)  # models rows were answered by, no price
    # The abstracts' own tokens and the answers' of the ok rows paid for (the bill's floor).
    floor_usage: Usage = NO_USAGE


@dataclass
class Chosen:
    """The rows a merge writes, in input order, and what choosing them counted."""

    rows: list[PartRow]
    stats: MergeStats
    parts: list[Part]


def _better(new: PartRow, old: PartRow | None) -> bool:
    """An ok row beats one that is not; among equals the later one (a rerun's) wins."""
    return old is None or new.ok or not old.ok


def runs_of(parts: Sequence[Part]) -> list[str | None]:
    """The runs that wrote the parts, the latest (highest sequence number) last."""
    seen: dict[str | None, int] = {}
    for part in parts:
        seen[part.header.run] = max(seen.get(part.header.run, -1), part.header.seq)
    return sorted(seen, key=lambda run: (run is not None, seen[run]))


def choose_of_run(
    parts: Sequence[Part],
    run: str,
    *,
    count: int | None,
    written: Path | None = None,
    kept: Mapping[int, str] | None = None,
) -> Chosen:
    """The rows of `run` for positions 0..count-1.

    With `written` (the part this invocation wrote) and `kept` (position -> skip token of the
    earlier row it skipped), its own rows win and earlier rows fill only the kept positions:
    a row that is not the one skipped for is stale, whatever its status. Without them, the
    best row of the run at each position.
    """
    read = PartsRead()
    stats = MergeStats()
    best: dict[int, PartRow] = {}
    own: set[int] = set()
    used = []
    for part in parts:
        if part.header.run != run:
            stats.other_run_rows += sum(1 for _ in read_part(part, read))
            continue
        used.append(part)
        mine = written is not None and part.path == written
        for row in read_part(part, read):
            if row.index < 0 or (count is not None and row.index >= count):
                stats.out_of_range += 1
                continue
            old = best.get(row.index)
            if written is not None and not mine:
                if row.index in own or kept is None or kept.get(row.index) != _token(row):
                    stats.replaced += 1
                    continue
                # Answered by an earlier invocation: this one paid nothing for it, as a local
                # rerun reads it from the cache.
                row = replace(row, row=row.row.model_copy(update={"cached": True}))
            elif mine and row.index not in own:
                own.add(row.index)
                stats.replaced += old is not None
                best[row.index] = row
                continue
            if _better(row, old):
                stats.replaced += old is not None
                best[row.index] = row
            else:
                stats.replaced += 1
    stats.skipped_lines, stats.skipped_where = read.skipped, read.skipped_where
    if count is not None:
        stats.missing = max(0, count - len(best))
    return Chosen([best[index] for index in sorted(best)], stats, used)


def choose_any_run(parts: Sequence[Part], *, count: int | None) -> Chosen:
    """The best row at each position from the parts of every run (asked for: `--any-run`);
    rows chosen from a run other than the latest are counted."""
    runs = runs_of(parts)
    latest = runs[-1] if runs else None
    read = PartsRead()
    stats = MergeStats()
    best: dict[int, tuple[PartRow, bool]] = {}
    for part in parts:
        foreign = part.header.run != latest
        for row in read_part(part, read):
            if row.index < 0 or (count is not None and row.index >= count):
                stats.out_of_range += 1
                continue
            old = best.get(row.index)
            if _better(row, old[0] if old else None):
                stats.replaced += old is not None
                best[row.index] = (row, foreign)
    stats.skipped_lines, stats.skipped_where = read.skipped, read.skipped_where
    stats.other_run_rows = sum(foreign for _, foreign in best.values())
    if count is not None:
        stats.missing = max(0, count - len(best))
    return Chosen([best[index][0] for index in sorted(best)], stats, list(parts))


def choose_for_merge(parts: Sequence[Part], run: str | None, *, any_run: bool) -> Chosen:
    """`tagger merge`'s choice: the one run the parts hold (or `run`), every run if asked."""
    runs = runs_of(parts)
    if any_run:
        return choose_any_run(parts, count=_count_of(parts, runs[-1] if runs else None))
    if run is not None:
        matching = [r for r in runs if r is not None and r.startswith(run)]
        if len(matching) != 1:
            raise UsageError(f"--run {run}: {_runs_line(parts, runs)}")
        return choose_of_run(parts, matching[0], count=_count_of(parts, matching[0]))
    if len(runs) > 1 or runs == [None]:
        raise UsageError(
            f"{_runs_line(parts, runs)}: pass --run ID to merge one of them, or --any-run to "
            "merge them all (rows of other runs are counted in the manifest)"
        )
    assert runs[0] is not None
    return choose_of_run(parts, runs[0], count=_count_of(parts, runs[0]))


def _count_of(parts: Sequence[Part], run: str | None) -> int | None:
    counts = [p.header.input_count for p in parts if p.header.run == run and run is not None]
    return counts[-1] if counts else None


def _runs_line(parts: Sequence[Part], runs: Sequence[str | None]) -> str:
    per_run = Counter(part.header.run for part in parts)
    shown = ", ".join(
        f"{run[:12] if run else 'no known run'} ({plural(per_run[run], 'part')})"
        for run in reversed(runs)
    )
    return f"the parts are of {plural(len(runs), 'run')}: {shown}"


def _token(row: PartRow) -> str | None:
    if row.key is None:
        return None
    return skip_token(row.key, row.index, row.row.id, row.row.source, row.row.line)


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
    stats.items += 1
    not_run = not row.ok and (row.error or "").startswith("not run:")
    stats.ok += row.ok
    stats.not_run += not_run
    stats.failed += not row.ok and not not_run
    stats.cached += row.cached
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
