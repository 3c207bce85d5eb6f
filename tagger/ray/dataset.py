"""tag_dataset: a Ray Dataset of abstracts in, a Dataset of tagged rows out; input files read
by Ray Data."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from tagger.config import RunConfig
from tagger.files.abstracts import iter_abstracts
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.ray.actors import Limits, start_limiter
from tagger.ray.records import abstract_record
from tagger.ray.stage import StageSettings, TagStage

DEFAULT_ACTORS = 2
DEFAULT_BATCH_SIZE = 64
# A tagging actor mostly waits on the network: a fraction of a CPU each leaves room for the
# tasks that read inputs and the driver (a whole CPU each would deadlock a small cluster).
DEFAULT_ACTOR_CPUS = 0.25


def limits_of(config: RunConfig, prices: PriceTable | None = None) -> Limits:
    """The limits a run's configuration sets for the whole cluster."""
    return Limits(
        rpm=config.client.rpm,
        tpm=config.client.tpm,
        max_requests=config.max_requests,
        max_cost=config.max_cost,
        model=config.client.model,
        prices=prices,
    )


def tag_dataset_with(
    ds: Any,
    config: RunConfig,
    *,
    prices: PriceTable | None = None,
    actors: int = DEFAULT_ACTORS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    actor_cpus: float = DEFAULT_ACTOR_CPUS,
    base_urls: Iterable[str] = (),
    skip: Iterable[str] = (),
    limiter: Any = None,
) -> Any:
    """The Dataset of output rows for `ds`'s records, under one run configuration.

    `limiter` is a handle from tagger.ray.actors.start_limiter (one is started if None):
    every actor takes its permits there, so the limits hold for all of them together.
    `skip` names rows already written ("key:index", tagger.ray.parts.done_rows): they are
    left out of the output, and nothing is asked for them.
    """
    import ray

    plan = RunPlan.load(config)  # on the driver: a bad prompt fails here, before any actor
    if limiter is None:
        limiter = start_limiter(limits_of(config, prices))
    settings = StageSettings.from_plan(plan, tuple(base_urls))
    return ds.map_batches(
        TagStage,
        fn_constructor_kwargs={"settings": settings, "limiter": limiter, "skip": frozenset(skip)},
        batch_size=batch_size,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=actor_cpus,
    )


def read_abstracts(files: list[Path], per_file: Mapping[str, int], blocks: int) -> Any:
    """The abstracts of already scanned files as a Dataset of records, read on the workers.

    Each file is read by tagger's own reader (the same ids, titles, venues and lines as a
    local run), its records numbered from the file's offset in the run, then split into about
    `blocks` blocks so that every actor gets work even from one file.
    """
    import ray

    offsets: list[dict[str, Any]] = []
    offset = 0
    for path in files:
        # The worker opens the absolute path (its working directory is not the driver's); the
        # rows name the path as given, like a local run's.
        offsets.append({"path": str(path.resolve()), "source": str(path), "offset": offset})
        offset += per_file.get(str(path), 0)
    ds = ray.data.from_items(offsets).flat_map(_file_records)
    return ds.repartition(max(1, blocks))


def _file_records(item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The records of one input file, indexed from its offset in the run."""
    offset = int(item["offset"])
    for abstract in iter_abstracts([Path(item["path"])]):
        record = abstract_record(abstract)
        record["index"] = offset + abstract.index
        record["source"] = item["source"]
        yield record
