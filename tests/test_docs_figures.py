"""Every figure the docs state about the project itself (how many areas, seed abstracts, gold
rows...) is read from the project here, so a change that makes one untrue fails.

Measurements (seconds, tokens, dollars) are dated where they are stated, and are not claims
about the tree as it is: they are not checked here. A figure added to the docs about the
project gets its line below, or is left out of the docs.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tests.harness import PROMPTS_DIR, REPO_ROOT, seed_texts


def _areas(version: str) -> int:
    from tagger.prompting.taxonomy import load_taxonomy

    return len(load_taxonomy(PROMPTS_DIR, version).areas)


def _gold_rows() -> int:
    text = (REPO_ROOT / "examples" / "gold-seeds.jsonl").read_text(encoding="utf-8")
    return sum(1 for line in text.splitlines() if line.strip())


# (page, a pattern whose first group is the figure, what it must equal)
FIGURES: list[tuple[str, str, Callable[[], int]]] = [
    ("README.md", r"\((\d+) areas modelled on", lambda: _areas("v1")),
    ("docs/configuration.md", r"taxonomy/v1\.toml +(\d+) task areas", lambda: _areas("v1")),
    ("docs/review.md", r"gold set for (\d+) of the \d+ abstracts", _gold_rows),
    ("docs/review.md", r"gold set for \d+ of the (\d+) abstracts", lambda: len(seed_texts())),
    ("docs/ray.md", r"tags the (\d+) seed abstracts", lambda: len(seed_texts())),
    ("docs/cloud-models.md", r"Measured on the (\d+) seed abstracts", lambda: len(seed_texts())),
    ("docs/local-models.md", r"mean over the (\d+)", lambda: len(seed_texts())),
]


@pytest.mark.parametrize(("page", "pattern", "actual"), FIGURES, ids=[f[1] for f in FIGURES])
def test_a_figure_the_docs_state_about_the_project_is_true(
    page: str, pattern: str, actual: Callable[[], int]
) -> None:
    text = " ".join((REPO_ROOT / page).read_text(encoding="utf-8").split())
    found = re.findall(pattern, text)
    assert found, f"{page} no longer says {pattern!r}: update FIGURES with what it says now"
    stated = {int(value) for value in found}
    assert stated == {actual()}, f"{page}: {pattern!r} says {stated}, the project has {actual()}"
