"""Throughput: tagger against a bare loop of the same openai calls, in the same run.

    python bench/throughput.py [--items 2000] [--latency 0.05] [--concurrency 64]
                               [--http httpx|aiohttp] [--rounds 3]

Both sides send the same rendered prompts with the same response_format to a fake server in
its own process. After a warm-up of each, rounds alternate bare/tagger and the medians are
compared. CPU is this process's CPU time per item; the difference is tagger's own work
(rendering, validation, cache, writing) per item.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
from common import ROOT, fake_server, write_abstracts

from tagger.config import ClientConfig, HttpBackend, Mode, RunConfig
from tagger.files.abstracts import InputScan, iter_abstracts, scan
from tagger.pipeline.item import render_messages
from tagger.pipeline.job import run_job
from tagger.pipeline.progress import SilentProgress
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan


async def bare_loop(
    url: str, items: list[list[dict[str, str]]], args: argparse.Namespace, schema: dict[str, Any]
) -> None:
    """The baseline: the same requests, no validation, cache or writing."""
    http = openai.DefaultAioHttpClient() if args.http == "aiohttp" else None
    client = openai.AsyncOpenAI(base_url=url, api_key="sk-bench", max_retries=0, http_client=http)
    slots = asyncio.Semaphore(args.concurrency)
    fmt = {"type": "json_schema", "json_schema": {"name": "abstract_tags", "strict": True,
                                                   "schema": schema}}  # fmt: skip

    async def one(messages: list[dict[str, str]]) -> None:
        async with slots:
            await client.chat.completions.create(
                model="gpt-4o-mini",
                messages=messages,  # type: ignore[arg-type]
                temperature=0.0,
                max_tokens=400,
                response_format=fmt,  # type: ignore[arg-type]
            )

    await asyncio.gather(*(one(m) for m in items))
    await client.close()


def timed(work: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--http", choices=["httpx", "aiohttp"], default="httpx")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        fake_server("--latency", str(args.latency)) as (_proc, url),
    ):
        source = write_abstracts(Path(tmp) / "in.jsonl", args.items)
        scanned = scan([source])

        def config(name: str) -> RunConfig:
            return RunConfig(
                client=ClientConfig(base_url=url, http=HttpBackend(args.http), timeout=30),
                prompts_dir=ROOT / "prompts",
                mode=Mode.JSON_SCHEMA,
                concurrency=args.concurrency,
                cache_dir=Path(tmp) / f"cache-{name}",  # a fresh cache: every item is sent
            )

        plan = RunPlan.load(config("plan"))
        messages = [
            render_messages(
                plan.prompt, plan.taxonomy, plan.schema, a.text, a.title, Mode.JSON_SCHEMA
            )
            for a in iter_abstracts(scanned.files)
        ]

        def bare() -> None:
            asyncio.run(bare_loop(url, messages, args, plan.schema))

        def tagger(name: str, inputs: InputScan = scanned) -> Callable[[], None]:
            out = Path(tmp) / f"out-{name}.jsonl"
            return lambda: asyncio.run(
                run_job(config(name), inputs, out, SilentProgress(), PriceTable())
            )

        print(
            f"{args.items} items, latency {args.latency * 1000:.0f} ms, concurrency "
            f"{args.concurrency}, transport {args.http}, {args.rounds} rounds (medians)"
        )
        warm = write_abstracts(Path(tmp) / "warm.jsonl", 200, seed=1)
        timed(lambda: asyncio.run(bare_loop(url, messages[:200], args, plan.schema)))
        timed(tagger("warm", scan([warm])))
        bare_runs, tagger_runs = [], []
        for round_number in range(args.rounds):
            bare_runs.append(timed(bare))
            tagger_runs.append(timed(tagger(f"r{round_number}")))
        n = args.items
        bare_wall = statistics.median(w for w, _ in bare_runs)
        tag_wall = statistics.median(w for w, _ in tagger_runs)
        bare_cpu = statistics.median(c for _, c in bare_runs)
        tag_cpu = statistics.median(c for _, c in tagger_runs)
        for label, wall, cpu in (("bare openai loop", bare_wall, bare_cpu),
                                 ("tagger run", tag_wall, tag_cpu)):  # fmt: skip
            print(f"{label:<18} {n / wall:7.1f} items/s  {1000 * cpu / n:.3f} ms CPU/item")
        ratio = bare_wall / tag_wall
        print(f"tagger / bare throughput: {ratio:.1%} (goal >= 85%)")
        print(f"tagger's own CPU per item: {1000 * (tag_cpu - bare_cpu) / n:.3f} ms")
        return 0 if ratio >= 0.85 else 1


if __name__ == "__main__":
    sys.exit(main())
