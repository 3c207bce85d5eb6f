"""Which rows a merge takes from the parts, in input order, one run's rows only (no I/O but
reading the parts):
- a `--ray` run takes the rows it wrote itself, and fills the positions it skipped with the
  earlier row it skipped them for (the same run, the same answer-cache key, id, source, line);
- `tagger merge` takes the parts of one run (the best row of each position: an ok row beats
  one that is not, among equals the later part's), or of every run only when asked.
Rows of another run, and rows for positions the input does not have, are counted, not taken.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tagger.errors import UsageError
from tagger.files.rows import RowCounts
from tagger.ray.parts import Part, PartRow, PartsRead, read_part
from tagger.ray.records import skip_token
from tagger.usage import NO_USAGE, Usage
from tagger.wording import plural

__all__ = ["Chosen", "MergeStats", "choose_any_run", "choose_for_merge", "choose_of_run", "runs_of"]


@dataclass
class MergeStats(RowCounts):
    """What a merge chose and wrote."""

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
