"""Models of different skill for the fake server: a hidden truth per abstract, and errors.

Each abstract has a true task area and a difficulty in [0, 1), both derived from its text
alone, so every model (and every test) sees the same ones. A model is wrong on an abstract
with a chance that grows with the difficulty (a cheap model far more than a strong one); it
is wrong or right the same way every time it is asked (a draw keyed by model and text). Its
confidence in the area it gives (spelled in the logprobs, tests/fakelogprobs.py) falls with
the difficulty and is lower when it is wrong: informative, not calibrated.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from tests.fakelogprobs import AreaOdds

_ABSTRACT = "Abstract:"


def abstract_part(user: str) -> str:
    """The abstract of a first user message (what follows its last 'Abstract:' line)."""
    lines = user.splitlines()
    marks = [i for i, line in enumerate(lines) if line.lstrip().startswith(_ABSTRACT)]
    if not marks:
        return user
    first = lines[marks[-1]].lstrip()[len(_ABSTRACT) :]
    return " ".join([first, *lines[marks[-1] + 1 :]]).strip()


def _unit(*parts: str) -> float:
    """A deterministic draw in [0, 1) from the parts."""
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def difficulty(abstract: str) -> float:
    """How hard an abstract is, in [0, 1): the same for every model."""
    return _unit("difficulty", " ".join(abstract.split()))


def true_area(abstract: str, areas: Sequence[str]) -> str:
    """The hidden truth: the area a perfect model gives."""
    return areas[int(_unit("truth", " ".join(abstract.split())) * len(areas))]


@dataclass(frozen=True)
class Skill:
    """How often a model is wrong: `easy` on the easiest abstracts, `easy + hard` at the hardest
    (growing with the square of the difficulty)."""

    easy: float
    hard: float

    def wrong_chance(self, level: float) -> float:
        """The chance this model is wrong on an abstract of this difficulty."""
        return min(1.0, self.easy + self.hard * level * level)


STRONG = Skill(easy=0.01, hard=0.04)  # close to the truth everywhere
CHEAP = Skill(easy=0.02, hard=0.40)  # right on ~85% of a uniform corpus, wrong on hard ones


def skilled_answer(
    model: str, skill: Skill, user: str, areas: Sequence[str]
) -> tuple[str, AreaOdds]:
    """The area this model gives for a first user message, and its odds (for the logprobs)."""
    text = " ".join(abstract_part(user).split())
    level = difficulty(text)
    truth = true_area(text, areas)
    others = [area for area in areas if area != truth]
    wrong = bool(others) and _unit("wrong", model, text) < skill.wrong_chance(level)
    area = others[int(_unit("which", model, text) * len(others))] if wrong else truth
    noise = (_unit("noise", model, text) - 0.5) * 0.1
    confidence = 0.98 - 0.4 * level - (0.2 if wrong else 0.0) + noise
    confidence = round(min(0.99, max(0.3, confidence)), 4)
    runner_up = truth if wrong else (others[0] if others else None)
    return area, AreaOdds(confidence, runner_up, round((1 - confidence) * 0.8, 4))
