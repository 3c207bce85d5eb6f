"""Helpers shared by the Batch API tests."""

from __future__ import annotations

from typing import Any

from tests.fakeserver import FakeLLM
from tests.harness import TaggerCLI

FAST = ("--batch", "--batch-poll", "0.01")


def batch_run(cli: TaggerCLI, *extra: object, **kwargs: Any) -> Any:
    """`tagger run --batch` polling at once; the fake finishes a batch at its 2nd retrieve."""
    if cli.fake.batches is not None and cli.fake.batches.auto_after is None:
        cli.fake.batches.auto_after = 2
    return cli.run(*FAST, *extra, **kwargs)


def batch_lines(fake: FakeLLM) -> list[dict[str, Any]]:
    """Every input line of every batch the fake was asked to create, in order."""
    assert fake.batches is not None
    return [line for batch in fake.batches.created for line in batch.parsed()]


def counts_in(output: str) -> dict[str, int]:
    """The summary table's counts (items, ok, failed, not run, cached) as printed."""
    found = {}
    for label in ("items", "ok", "failed", "not run", "cached"):
        for line in output.splitlines():
            cells = [c.strip() for c in line.split("│") if c.strip()]
            if len(cells) == 2 and cells[0] == label:
                found[label] = int(cells[1])
    return found
