"""tag_dataset: a Ray Dataset of abstracts in, a Dataset of tagged rows out; input files read
by Ray Data."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tagger.config import RunConfig, check_base_url
from tagger.errors import ConfigError, UsageError
from tagger.files.abstracts import iter_abstracts
from tagger.options import RunOptions
from tagger.pipeline.job import require_key
from tagger.pipeline.packing import per_request_for
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.ray.actors import Limits, start_limiter
from tagger.ray.canary import RayCanary
from tagger.ray.cluster import READ_CPUS
from tagger.ray.cluster import actor_cpus as fitted_actor_cpus
from tagger.ray.records import abstract_record
from tagger.ray.stage import StageSettings, TagStage

DEFAULT_ACTORS = 2
DEFAULT_BATCH_SIZE = 64
# A tagging actor mostly waits on the network: a fraction of a CPU each leaves room for the
# tasks that read inputs and the driver (a whole CPU each would deadlock a small cluster).
DEFAULT_ACTOR_CPUS = 0.25
# A worker holding permits and unheard for --timeout and this long is taken for lost.
LEASE_MARGIN_SECONDS = 60.0
# Blocks are the unit Ray hands to an actor and returns whole: small ones keep every actor busy
# and the driver's progress moving, and a lost worker re-does little.
MAX_BLOCKS_PER_ACTOR = 64


@dataclass(frozen=True)
class RayRun:
    """Where and how a `--ray` run (or a `--ray --cascade` stage) goes."""

    address: str | None  # None: start a local Ray; "auto": the cluster this node is in
    actors: int = DEFAULT_ACTORS
    batch_size: int = DEFAULT_BATCH_SIZE
    base_urls: tuple[str, ...] = ()

    def blocks(self, count: int) -> int:
        """How many blocks `count` records are split into: a batch each, at least one per
        actor, at most MAX_BLOCKS_PER_ACTOR per actor."""
        batches = math.ceil(count / self.batch_size)
        return max(self.actors, min(batches, MAX_BLOCKS_PER_ACTOR * self.actors))

    def tag(
        self,
        records: Any,
        config: RunConfig,
        *,
        prices: PriceTable,
        limiter: Any,
        canary: RayCanary | None,
        skip: Iterable[str] = (),
        mark_skipped: bool = False,
    ) -> Any:
        """tag_dataset_with on this run's actors, batch size and base URLs, each actor with
        the CPUs that leave every node a whole one for Ray Data's own tasks."""
        return tag_dataset_with(
            records,
            config,
            prices=prices,
            actors=self.actors,
            batch_size=self.batch_size,
            actor_cpus=fitted_actor_cpus(self.actors, DEFAULT_ACTOR_CPUS),
            base_urls=self.base_urls,
            skip=skip,
            limiter=limiter,
            mark_skipped=mark_skipped,
            canary=canary,
        )


def tag_dataset(
    ds: Any,
    *,
    actors: int = DEFAULT_ACTORS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    actor_cpus: float | None = None,
    skip: Iterable[str] = (),
    **options: Any,
) -> Any:
    """Tag the abstracts of a Ray Dataset: a Dataset with one tagged row per record.

    ds: records with an `abstract` column and optionally `id`, `title`, `venue`, `year`,
        `index` (the position the merge orders by), `source`, `line`, and `extra` (a JSON
        object of other fields, written after the row's own).
    options: the options of `tagger.tag()`, with the same names, defaults, environment
        variables and `.env` file; `base_url` may be a list: the actors are spread over
        those endpoints (a vLLM fleet). `rpm`, `tpm`, `max_cost` and `max_requests` hold
        for all actors together; `concurrency` is the requests in flight per actor.
    actors: tagging actors (each one event loop with `concurrency` requests in flight);
    actor_cpus: the CPUs each asks for (default: a quarter, or less so that every node keeps
        a whole CPU for Ray Data's own tasks; tagger.ray.cluster.actor_cpus);
    skip: rows already written, as skip tokens (tagger.ray.parts.done_rows).

    The output has the columns of `tagger.Row` plus `key` (the answer-cache key: text,
    title, model, base URL, prompt, schema, taxonomy, synonyms, params and effort) and
    `row` (the row as JSON, as `tagger run` writes it).
    A record that cannot be tagged is a row with status "error": no record fails the job.
    Raises a `tagger.errors` exception for a configuration error, before any actor starts.
    """
    given = options.get("base_url")
    urls: tuple[str, ...] = ()
    if isinstance(given, list | tuple):
        try:
            urls = tuple(check_base_url(str(url)) for url in given)
        except ValueError as exc:
            raise ConfigError(f"invalid option: --base-url: {exc}") from None
        options = {**options, "base_url": urls[0] if urls else None}
    chosen = RunOptions.resolve(options)
    config = chosen.config()
    if config.batch is not None:
        raise UsageError("batch=True is for `tagger run --batch`: tag_dataset runs live")
    require_key(config)
    if actor_cpus is None:  # what leaves every node a whole CPU for Ray Data's own tasks
        actor_cpus = fitted_actor_cpus(actors, DEFAULT_ACTOR_CPUS)
    return tag_dataset_with(
        ds,
        config,
        prices=PriceTable.load(chosen.prices),
        actors=actors,
        batch_size=batch_size,
        actor_cpus=actor_cpus,
        base_urls=urls,
        skip=skip,
    )


def limits_of(config: RunConfig, prices: PriceTable | None = None) -> Limits:
    """The limits a run's configuration sets for the whole cluster."""
    model = config.client.model
    flex = config.client.service_tier == "flex"
    table = prices or PriceTable()
    priced = table.flex_price(model) if flex else table.price(model)
    if config.max_cost is not None and priced is None:
        raise ConfigError(
            f"--max-cost needs a price for model '{model}': add it to a --prices file"
        )
    return Limits(
        rpm=config.client.rpm,
        tpm=config.client.tpm,
        max_requests=config.max_requests,
        max_cost=config.max_cost,
        model=config.client.model,
        prices=prices,
        lease=config.client.timeout + LEASE_MARGIN_SECONDS,
        flex=flex,
    )


def per_request(config: RunConfig, prices: PriceTable) -> int:
    """Abstracts per request on Ray: a local run's choice (each actor packs its own records)."""
    return per_request_for(config, RunPlan.load(config, prices).prompt, prices)


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
    mark_skipped: bool = False,
    canary: RayCanary | None = None,
) -> Any:
    """The Dataset of output rows for `ds`'s records, under one run configuration.

    `limiter` is a handle from tagger.ray.actors.start_limiter (one is started if None):
    every actor takes its permits there, so the limits hold for all of them together.
    `skip` names rows already written (skip tokens, tagger.ray.parts.done_rows): they are
    left out of the output (with `mark_skipped`, a record of status "skipped" each), and
    nothing is asked for them. `canary`: what the driver's canary taught (every actor starts
    with it) and the rows whose answer it kept (tagger.ray.canary).
    """
    import ray

    # The actors open the cache by this path, from their own working directory.
    config = config.model_copy(update={"cache_dir": config.cache_dir.resolve()})
    table = prices or PriceTable()
    plan = RunPlan.load(config, table)  # on the driver: a bad prompt fails here, before any actor
    if limiter is None:
        limiter = start_limiter(limits_of(config, prices))
    packed = per_request(config, table)
    settings = StageSettings.from_plan(
        plan,
        tuple(base_urls),
        learned=canary.learned if canary else (),
        per_request=packed,
        canary_rows=canary.rows if canary else frozenset(),
    )
    return ds.map_batches(
        TagStage,
        fn_constructor_kwargs={
            "settings": settings,
            "limiter": limiter,
            "skip": frozenset(skip),
            "mark_skipped": mark_skipped,
        },
        batch_size=batch_size,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=actor_cpus,
    )


def read_abstracts(
    files: list[Path], per_file: Mapping[str, int], blocks: int, wanted: bytes | None = None
) -> Any:
    """The abstracts of already scanned files as a Dataset of records, read on the workers.

    Each file is read by tagger's own reader (the same ids, titles, venues and lines as a
    local run), its records numbered from the file's offset in the run, then split into about
    `blocks` blocks so that every actor gets work even from one file. `wanted`: a bitmap of
    the positions to read (bit i of byte i // 8; a cascade stage's subset), None for all.
    """
    import ray

    offsets: list[dict[str, Any]] = []
    offset = 0
    for path in files:
        # The worker opens the absolute path (its working directory is not the driver's); the
        # rows name the path as given, like a local run's.
        offsets.append({"path": str(path.resolve()), "source": str(path), "offset": offset})
        offset += per_file.get(str(path), 0)
    # A reference: the bitmap is read once a task, not shipped with every item.
    read = functools.partial(_file_records, wanted=ray.put(wanted) if wanted is not None else None)
    ds = ray.data.from_items(offsets).flat_map(read, num_cpus=READ_CPUS)
    return ds.repartition(max(1, blocks))


def _file_records(item: dict[str, Any], wanted: Any = None) -> Iterator[dict[str, Any]]:
    """The records of one input file at the wanted positions (a bitmap, or a reference to
    one in Ray's object store; None: all), indexed from its offset."""
    bits: bytes | None = wanted
    if wanted is not None:
        import ray

        bits = ray.get(wanted) if isinstance(wanted, ray.ObjectRef) else wanted
    offset = int(item["offset"])
    for abstract in iter_abstracts([Path(item["path"])]):
        index = offset + abstract.index
        if bits is not None and not (
            index >> 3 < len(bits) and bits[index >> 3] >> (index & 7) & 1
        ):
            continue
        record = abstract_record(abstract)
        record["index"] = index
        record["source"] = item["source"]
        yield record
