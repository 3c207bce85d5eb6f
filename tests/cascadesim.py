"""Simulated cascades where the truth is known: for the cascade's tests and bench/cascade.py.

Each row has a hidden difficulty; the cheap model agrees with the strong one with a chance
that falls with it, and reports a confidence that follows that chance but is overconfident and
noisy (informative, imperfectly calibrated), as logprob confidences of small models are.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from tagger.cascade import CascadeDecision, CascadeTarget, Certifier


@dataclass(frozen=True)
class Population:
    confidences: list[float | None]
    agrees: list[bool]  # the cheap model's task_area equals the strong model's

    @property
    def cheap_accuracy(self) -> float:
        return sum(self.agrees) / len(self.agrees)


def population(
    rows: int,
    seed: int,
    accuracy: float = 0.85,
    sharpness: float = 1.6,
    noise: float = 0.8,
    missing: float = 0.0,
) -> Population:
    """rows with a cheap accuracy near `accuracy`; sharpness > 1 is overconfidence."""
    rng = random.Random(seed)
    power = 2.0
    slope = (1 - accuracy) * (power + 1)  # mean of 1 - slope * d**power over d ~ U(0, 1)
    confidences: list[float | None] = []
    agrees = []
    for _ in range(rows):
        chance = min(max(1 - slope * rng.random() ** power, 0.001), 0.999)
        logit = math.log(chance / (1 - chance)) * sharpness + 0.5 + rng.gauss(0, noise)
        confidence = round(1 / (1 + math.exp(-logit)), 4)
        confidences.append(None if rng.random() < missing else confidence)
        agrees.append(rng.random() < chance)
    return Population(confidences, agrees)


def run_cascade(
    world: Population, goal: CascadeTarget, sample_size: int | None = None
) -> CascadeDecision:
    """The certifier driven to its decision, the strong model's labels read from the truth."""
    certifier = Certifier(world.confidences, goal, sample_size=sample_size)
    while batch := certifier.next_sample():
        certifier.record({i: world.agrees[i] for i in batch})
    return certifier.decision()


def agreement(world: Population, decision: CascadeDecision) -> float:
    """The share of all rows whose final task_area is the strong model's."""
    wrong = sum(not world.agrees[i] for i in decision.keep)
    return 1 - wrong / len(world.agrees) if world.agrees else 1.0


def coverage(
    rows: int, targets: Sequence[float], runs: int, delta: float = 0.05, **shape: float
) -> dict[float, tuple[int, float]]:
    """Per target: runs that met it, and the mean share of rows the strong model answered."""
    result = {}
    for target in targets:
        met, strong = 0, 0.0
        for run in range(runs):
            world = population(rows, seed=run, **shape)
            decision = run_cascade(world, CascadeTarget(target, delta, seed=10_000 + run))
            met += agreement(world, decision) >= target
            strong += decision.escalated_share
        result[target] = (met, strong / runs)
    return result
