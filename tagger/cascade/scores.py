"""The cheap model's confidences, two bytes a row: what the certifier keeps of the cheap stage.

A confidence is kept as its 4-digit rounding (tagger writes confidences with 4 digits, so
nothing is lost on its own rows), a code 0..10,000; a row without a usable confidence (None,
NaN, inf, outside [0, 1], not a number) is NO_SCORE and is never kept. 200 M rows take 400 MB,
where a list of Python floats would take 6 GB. The counts per code stand in for a sort: the
rows at or above a code, their predicted errors, the code a share of rows reaches, all in
10,001 steps whatever the number of rows.
"""

from __future__ import annotations

import bisect
import math
import numbers
from array import array
from collections.abc import Iterable

SCALE = 10_000  # codes per unit: 4 digits
NO_SCORE = 0xFFFF
_BLOCK = 4096  # rows per block of the scored-rank index


def finite_real(value: object) -> float | None:
    """A finite real number (numpy's too) as a float, else None (bools, strings, NaN, inf)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (OverflowError, ValueError):  # a 400-digit integer
        return None
    return number if math.isfinite(number) else None


def score_code(value: object) -> int:
    """A confidence's code 0..SCALE, or NO_SCORE for anything but a finite number in [0, 1]."""
    if type(value) is float:  # a confidence read from a row: once a row, so the short way
        return round(value * SCALE) if 0 <= value <= 1 else NO_SCORE  # NaN fails both
    number = finite_real(value)
    if number is None or not 0 <= number <= 1:
        return NO_SCORE
    return round(number * SCALE)


def code_value(code: int) -> float:
    """The confidence a code stands for (0.9529 for 9529)."""
    return code / SCALE


class Scores:
    """Every row's confidence code, set by row index in any order, then frozen."""

    def __init__(self, rows: int) -> None:
        self._codes = array("H", [NO_SCORE]) * rows
        self._counts = [0] * (SCALE + 1)
        self._scored = 0
        self._frozen = False
        self._prefix: list[int] = []  # scored rows before each block

    @classmethod
    def of(cls, confidences: Iterable[object]) -> Scores:
        """The scores of these confidences (row i's is the i-th), frozen."""
        values = list(confidences)
        scores = cls(len(values))
        for index, value in enumerate(values):
            scores.set(index, value)
        scores.freeze()
        return scores

    def set(self, index: int, value: object) -> None:
        """Row index's confidence (anything unusable: no score); a second call replaces it."""
        if self._frozen:
            raise RuntimeError("the scores are frozen: the certifier has read them")
        old, code = self._codes[index], score_code(value)
        if old != NO_SCORE:
            self._counts[old] -= 1
            self._scored -= 1
        self._codes[index] = code
        if code != NO_SCORE:
            self._counts[code] += 1
            self._scored += 1

    def freeze(self) -> None:
        """No more rows; build the index from scored rank to row."""
        if self._frozen:
            return
        self._frozen = True
        codes, scored = self._codes, 0
        for start in range(0, len(codes), _BLOCK):
            self._prefix.append(scored)
            block = codes[start : start + _BLOCK]
            scored += len(block) - block.count(NO_SCORE)

    @property
    def rows(self) -> int:
        return len(self._codes)

    @property
    def scored(self) -> int:
        """Rows with a score: the only ones that can keep the cheap answer."""
        return self._scored

    @property
    def unscored(self) -> int:
        return self.rows - self._scored

    @property
    def counts(self) -> list[int]:
        """Scored rows per code, 0..SCALE (a copy)."""
        return list(self._counts)

    def code(self, index: int) -> int:
        """Row index's code (NO_SCORE: none)."""
        return self._codes[index]

    def codes(self) -> array[int]:
        """Every row's code, in row order (shared: do not change it)."""
        return self._codes

    def scored_row(self, rank: int) -> int:
        """The row of the rank-th scored row (from 0) in row order."""
        if not self._frozen:
            raise RuntimeError("freeze() the scores first")
        if not 0 <= rank < self.scored:
            raise IndexError(f"no scored row of rank {rank}")
        if self.unscored == 0:
            return rank
        block = bisect.bisect_right(self._prefix, rank) - 1
        start = block * _BLOCK
        wanted = rank - self._prefix[block]  # scored rows to pass within the block
        low, high = 0, min(_BLOCK, self.rows - start) - 1
        while low < high:  # the first offset with wanted + 1 scored rows up to it
            middle = (low + high) // 2
            piece = self._codes[start : start + middle + 1]
            if len(piece) - piece.count(NO_SCORE) > wanted:
                high = middle
            else:
                low = middle + 1
        return start + low


def rows_at_or_above(counts: list[int]) -> list[int]:
    """above[c]: scored rows with a code >= c, for c in 0..SCALE+1."""
    above = [0] * (SCALE + 2)
    for code in range(SCALE, -1, -1):
        above[code] = above[code + 1] + counts[code]
    return above
