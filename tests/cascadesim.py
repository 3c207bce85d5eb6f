"""Simulated cascades where the truth is known: for the cascade's tests and bench/cascade.py.

Each row has a hidden difficulty; the cheap model agrees with the strong one with a chance
that falls with it, and reports a confidence that follows that chance but is overconfident and
noisy (informative, imperfectly calibrated), as logprob confidences of small models are.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from tagger.cascade import CascadeDecision, CascadeTarget, Certifier
from tagger.cascade.hypergeom import lower_tail
from tagger.cascade.scores import Scores

# The samples' seeds start far from the corpora's (0, 1, ...): a corpus and a sample drawn from
# the same seed would share their random stream, and the sample would not be independent.
SAMPLE_SEEDS = 1_000_003


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
    world: Population,
    goal: CascadeTarget,
    sample_size: int | None = None,
    scores: Scores | None = None,
) -> CascadeDecision:
    """The certifier driven to its decision, the strong model's labels read from the truth."""
    certifier = Certifier(
        world.confidences if scores is None else scores, goal, sample_size=sample_size
    )
    while batch := certifier.next_sample():
        certifier.record({i: world.agrees[i] for i in batch})
    return certifier.decision()


def agreement(world: Population, decision: CascadeDecision) -> float:
    """The share of all rows whose final task_area is the strong model's."""
    wrong = sum(not world.agrees[i] for i in decision.kept_rows())
    return 1 - wrong / len(world.agrees) if world.agrees else 1.0


def missed(world: Population, decision: CascadeDecision) -> bool:
    """Whether the kept rows hold more disagreements than the budget (the target missed)."""
    return sum(not world.agrees[i] for i in decision.kept_rows()) > decision.error_budget


@dataclass(frozen=True)
class Coverage:
    """Simulated runs of one target: how many missed it, and how many the bound allows."""

    runs: int
    misses: int
    bound: float  # the sum over runs of the exact tail each run's cutoff stands on (<= delta)
    strong_share: float  # the mean share of rows the strong model answered

    def allows(self, delta: float, sigmas: float = 2.33) -> bool:
        """Whether the misses are what a miss rate <= delta gives (one-sided, ~1% level)."""
        spread = sigmas * math.sqrt(self.runs * delta * (1 - delta))
        return self.misses <= self.runs * delta + spread


def coverage(
    rows: int,
    target: float,
    *,
    delta: float = 0.05,
    populations: int = 3,
    samples: int = 100,
    **shape: float,
) -> Coverage:
    """Draw `populations` corpora, then `samples` seeded samples of each (the sample is planned
    once per corpus: the plan depends on the scores alone); count the runs that missed."""
    runs = misses = 0
    bound = strong = 0.0
    for world_seed in range(populations):
        world = population(rows, seed=world_seed, **shape)
        scores = Scores.of(world.confidences)
        size = Certifier(scores, CascadeTarget(target, delta)).planned_sample_size
        for sample_seed in range(samples):
            goal = CascadeTarget(target, delta, seed=SAMPLE_SEEDS + sample_seed)
            decision = run_cascade(world, goal, sample_size=size, scores=scores)
            runs += 1
            misses += missed(world, decision)
            strong += decision.escalated_share
            allowed = decision.allowed_disagreements
            if allowed >= 0:
                marked = decision.error_budget + 1 + allowed
                bound += lower_tail(allowed, scores.scored, marked, len(decision.sampled))
    return Coverage(runs, misses, bound, strong / runs if runs else 0.0)
