"""What the cascade keeps of its stages' rows: the rows themselves on disk, and in memory only
what the certifier and the drivers need (two bytes of confidence and two of task area a
row, and the sample's strong answers)."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from tagger.cascade.scores import Scores
from tagger.cascade.spool import RowSpool
from tagger.files.abstracts import Abstract, InputScan
from tagger.files.rows import Row

__all__ = ["AreaCodes", "CheapRows", "SubsetScan", "strong_rows"]

_NO_AREA = 0xFFFF


class AreaCodes:
    """Each row's task area as a two-byte code: what a sampled row's label is read from."""

    def __init__(self, rows: int) -> None:
        self._areas = array("H", [_NO_AREA]) * rows
        self._codes: dict[str, int] = {}

    def set(self, index: int, area: object) -> None:
        """Row index's area (anything but a text: none)."""
        self._areas[index] = self._code(area) if isinstance(area, str) else _NO_AREA

    def agrees(self, index: int, area: object) -> bool:
        """Whether row index has this area (a row without one agrees with nothing)."""
        code = self._areas[index]
        return isinstance(area, str) and code != _NO_AREA and self._codes.get(area) == code

    def _code(self, area: str) -> int:
        code = self._codes.get(area)
        if code is None:
            if len(self._codes) >= _NO_AREA:  # no taxonomy has 65,535 areas: junk
                return _NO_AREA  # agrees with nothing: a disagreement, never kept blind
            code = self._codes[area] = len(self._codes)
        return code


class CheapRows:
    """The cheap stage's RowWriter: every row to its spool, its confidence to the scores, its
    task area to a code; and the counts that decide whether the cascade goes on."""

    def __init__(self, spool: RowSpool) -> None:
        rows = spool.rows_in_input
        self.spool = spool
        self.scores = Scores(rows)
        self.areas = AreaCodes(rows)
        self.failed = 0  # rows not answered
        self.first_failure: str | None = None
        self.confident = 0  # answered rows with a confidence

    def write(self, row: Row) -> None:
        """Keep one more row (a row already kept is left as it was)."""
        if self.spool.has(row.index):
            return
        self.spool.write(row)
        if not row.ok:
            self.failed += 1
            self.first_failure = self.first_failure or row.error or "failed"
            return
        self.scores.set(row.index, row.task_area_confidence)
        self.confident += row.task_area_confidence is not None
        self.areas.set(row.index, row.task_area)

    def flush(self) -> None:
        """Push what was written to the spool."""
        self.spool.flush()

    @property
    def answered(self) -> int:
        return self.spool.answered

    def agrees(self, index: int, strong: Row | None) -> bool:
        """The label of a sampled row: the strong model's task area is the cheap one's.

        A row either model could not answer counts as a disagreement: the threshold only gets
        higher for it, so the guarantee still holds.
        """
        return strong is not None and strong.ok and self.areas.agrees(index, strong.task_area)


@dataclass(frozen=True)
class SubsetScan(InputScan):
    """The abstracts of a scan at the positions `wanted` accepts, read as the scan reads them
    (from the files again, or from memory): a stage over half of 200 M rows lists none."""

    wanted: Callable[[int], bool] = field(default=lambda _index: True)

    @classmethod
    def of(cls, scan: InputScan, wanted: Callable[[int], bool], count: int) -> SubsetScan:
        return cls(
            files=scan.files,
            count=count,
            unique=count,
            per_file={},
            given=scan.given,
            kept=scan.kept,
            wanted=wanted,
        )

    def abstracts(self) -> Iterator[Abstract]:
        return (abstract for abstract in super().abstracts() if self.wanted(abstract.index))


def strong_rows(sample: Mapping[int, Row], escalated: RowSpool | None) -> Iterator[Row]:
    """The strong model's rows ascending: the escalated stage's, else the sample's (a sampled
    row it failed on goes again with the escalated rows)."""
    ordered = iter(sorted(sample.items()))
    later = escalated.rows() if escalated is not None else iter(())
    pending = next(ordered, None)
    for row in later:
        while pending is not None and pending[0] < row.index:
            yield pending[1]
            pending = next(ordered, None)
        if pending is not None and pending[0] == row.index:
            pending = next(ordered, None)
        yield row
    while pending is not None:
        yield pending[1]
        pending = next(ordered, None)
