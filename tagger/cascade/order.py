"""A seeded random order of 0..size-1, drawn lazily: the first k cost O(k), whatever the size.

Fisher–Yates shuffling with the swaps kept in a dict, so a population of 200 M rows needs no
list of 200 M indices. The same seed gives the same order, and taking k then j items gives the
first k + j of it: a resumed run that replays its batches draws the same rows.
"""

from __future__ import annotations

import random


class SeededOrder:
    """The rows 0..size-1 in one seeded uniformly random order."""

    def __init__(self, size: int, seed: int) -> None:
        self._size = size
        self._rng = random.Random(seed)
        self._swaps: dict[int, int] = {}
        self._drawn = 0

    @property
    def remaining(self) -> int:
        return self._size - self._drawn

    def next(self) -> int:
        """The next row of the order (IndexError once all are drawn)."""
        if self._drawn >= self._size:
            raise IndexError("every row is drawn")
        pick = self._rng.randrange(self._drawn, self._size)
        here = self._swaps.pop(self._drawn, self._drawn)
        row = here
        if pick != self._drawn:
            row = self._swaps.get(pick, pick)
            self._swaps[pick] = here
        self._drawn += 1
        return row
