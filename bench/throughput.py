"""Throughput: tagger against a bare loop of the same openai calls, in the same run.

python bench/throughput.py [--items 2000] [--latency 0.05] [--concurrency 64] [--http httpx]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import openai
from common import ROOT, fake_server, write_abstracts

from tagger.config import ClientConfig, HttpBackend, Mode, RunConfig
from tagger.execute import run_job
from tagger.inputs import iter_abstracts, scan
from tagger.plan import RunPlan
from tagger.pricing import PriceTable
from tagger.tagging import render_messages


class _NoProgress:
    def advance(self, row: dict[str, Any]) -> None:
        pass


async def bare_loop(
    url: str, items: list[list[dict[str, str]]], args: argparse.Namespace, schema: dict[str, Any]
) -> None:
    """The baseline: the same requests, no validation, cache or writing."""
    http = openai.DefaultAioHttpClient() if args.http == "aiohttp" else None
    client = openai.AsyncOpenAI(base_url=url, api_key="sk-bench", max_retries=0, http_client=http)
    slots = asyncio.Semaphore(args.concurrency)
    fmt = {
        "type": "json_schema",
        "json_schema": {"name": "abstract_tags", "strict": True, "schema": schema},
    }

    async def one(messages: list[dict[str, str]]) -> None:
        async with slots:
            await client.chat.completions.create(
                model="gpt-4o-mini",
                messages=messages,
                temperature=0.0,
                max_tokens=400,
                response_format=fmt,  # type: ignore[arg-type]
            )

    await asyncio.gather(*(one(m) for m in items))
    await client.close()


def measure(label: str, work: Any, count: int) -> tuple[float, float]:
    wall0, cpu0 = time.perf_counter(), time.process_time()
    work()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    print(
        f"{label:<28} {count / wall:8.1f} items/s   {wall:6.2f} s wall   "
        f"{1000 * cpu / count:6.3f} ms CPU/item"
    )
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--http", choices=["httpx", "aiohttp"], default="httpx")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        fake_server("--latency", str(args.latency)) as (
            _proc,
            url,
        ),
    ):
        source = write_abstracts(Path(tmp) / "in.jsonl", args.items)
        scanned = scan([source])
        config = RunConfig(
            client=ClientConfig(base_url=url, http=HttpBackend(args.http), timeout=30),
            prompts_dir=ROOT / "prompts",
            mode=Mode.JSON_SCHEMA,
            concurrency=args.concurrency,
            cache_dir=Path(tmp) / "cache",
        )
        plan = RunPlan.load(config)
        messages = [
            render_messages(
                plan.prompt, plan.taxonomy, plan.schema, a.text, a.title, Mode.JSON_SCHEMA
            )
            for a in iter_abstracts(scanned.files)
        ]
        print(
            f"{args.items} items, latency {args.latency * 1000:.0f} ms, concurrency "
            f"{args.concurrency}, transport {args.http}"
        )
        base_wall, base_cpu = measure(
            "bare openai loop",
            lambda: asyncio.run(bare_loop(url, messages, args, plan.schema)),
            args.items,
        )
        out = Path(tmp) / "out.jsonl"
        tag_wall, tag_cpu = measure(
            "tagger run (cache+write)",
            lambda: asyncio.run(run_job(config, scanned, out, _NoProgress(), PriceTable())),
            args.items,
        )
        ratio = base_wall / tag_wall
        overhead = 1000 * (tag_cpu - base_cpu) / args.items
        print(f"tagger / bare throughput: {ratio:.1%}  (goal >= 85%)")
        print(f"tagger CPU overhead: {overhead:.3f} ms/item beyond the SDK's own work")
        return 0 if ratio >= 0.85 else 1


if __name__ == "__main__":
    sys.exit(main())
