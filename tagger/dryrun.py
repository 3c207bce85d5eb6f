"""`tagger.estimate()`: `tagger run --dry-run` from Python, nothing sent and no key needed."""

from __future__ import annotations

from typing import Any

from tagger.pipeline.forecast import DryRunReport

__all__ = ["DryRunReport", "estimate"]


def estimate(items: object, **options: Any) -> DryRunReport:
    """What `tag(items, **options)` would send and cost, computed without sending anything.

    The same estimate as `tagger run --dry-run` (the same function computes both): how many
    abstracts, how many distinct ones, how many the cache already answers, the first prompt
    as it would be sent (`first_messages`), the estimated tokens (`usage`) and cost in US$
    (`cost`, None when the model has no price), and which price row it came from.

    items, options: as for `tag()` (no API key is needed). Raises what `tag()` raises for a
    configuration or input error, before anything is read from the network.
    """
    from tagger.calling import ErrorsFromHere
    from tagger.items import read_items
    from tagger.options import RunOptions
    from tagger.pipeline.forecast import dry_run
    from tagger.pricing import PriceTable

    with ErrorsFromHere():
        chosen = RunOptions.resolve(options)
        config = chosen.config()
        given = read_items(items)
        return dry_run(config, given, PriceTable.load(chosen.prices), senders=chosen.first_senders)
