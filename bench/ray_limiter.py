"""How far one cluster-wide limiter holds as actors are added: simulated actors against the fake,
then real `tagger run --ray` actors with the machine loaded.

    python bench/ray_limiter.py [--limit 3000] [--seconds 6] [--actors 1,2,4,8,16,32]
                                [--cli-actors 2,4] [--cli-limit 1200] [--busy 2]

The fake server (its own process) enforces --limit requests per minute over every sliding
second. One limiter actor (tagger.ray.actors) paces N simulated actors: each is what a Ray Data
tagging actor holds (a ClusterGate reaching the limiter through a RayLink, an LLMClient with
its own connections), all in this process's event loop, sending for --seconds. The figures:
429s the server sent (goal 0), the share of the limit the actors used together (first to last
answered request), and the limiter's own cost: grant calls a second and their mean latency.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
import urllib.request
from pathlib import Path

from common import ROOT, fake_server, seed_texts

from tagger.config import ClientConfig, Mode, RunConfig
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.ray.actors import Limits, RayLink, start_limiter
from tagger.ray.gate import ClusterGate
from tagger.ray.limiter import Report
from tagger.sending.client import AttemptBudget, LLMClient


class CountingLink(RayLink):
    """A RayLink that counts and times its grant calls."""

    grants = 0
    waited = 0.0

    async def grant(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        try:
            return await super().grant(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            CountingLink.grants += 1
            CountingLink.waited += time.perf_counter() - began


async def simulate(url: str, actors: int, per_minute: int, seconds: float, concurrency: int) -> str:
    config = RunConfig(
        client=ClientConfig(base_url=url, api_key="sk-bench", rpm=per_minute, logprobs=False),  # type: ignore[arg-type]
        prompts_dir=ROOT / "prompts",
        concurrency=concurrency,
    )
    plan = RunPlan.load(config, PriceTable())
    handle = start_limiter(Limits(rpm=per_minute))
    texts = seed_texts()
    CountingLink.grants, CountingLink.waited = 0, 0.0
    deadline = time.monotonic() + seconds

    async def actor(number: int) -> None:
        client = LLMClient(config.client, ClusterGate(CountingLink(handle), concurrency))

        async def worker(slot: int) -> None:
            n = 0
            while time.monotonic() < deadline:
                text = f"{texts[(number * 7 + slot + n) % len(texts)]} Run {number}-{slot}-{n}."
                n += 1
                messages = plan.prompt.render(
                    abstract=text, title=None, areas=plan.taxonomy.render(), format_instructions=""
                )
                with contextlib.suppress(Exception):  # a 429: counted by the server
                    await client.chat(
                        messages, mode=Mode.JSON_SCHEMA, schema=plan.schema,
                        params=dict(plan.prompt.params), budget=AttemptBudget(1),
                    )  # fmt: skip

        await asyncio.gather(*(worker(slot) for slot in range(concurrency)))
        await client.aclose()

    began = time.perf_counter()
    await asyncio.gather(*(actor(number) for number in range(actors)))
    wall = time.perf_counter() - began
    with urllib.request.urlopen(url + "/stats", timeout=5) as response:
        import json

        counts = json.load(response)
    ok = int(counts["by_status"].get("200", 0))
    limited = int(counts["by_status"].get("429", 0))
    span = float(counts["answered_span"])
    used = (ok - 1) / (span * per_minute / 60) if span else 0.0
    latency = CountingLink.waited / max(1, CountingLink.grants) * 1000
    return (
        f"{actors:>3} actors x {concurrency:>2}: {ok:5d} answered, {limited:3d} x 429, "
        f"limit used {used:6.1%}, {CountingLink.grants / wall:6.1f} grants/s "
        f"({latency:5.2f} ms each)"
    )


async def capacity(callers: int, calls: int) -> str:
    """Grant calls one limiter actor answers a second, from `callers` callers at once."""
    handle = start_limiter(Limits(rpm=6_000_000))
    links = [RayLink(handle) for _ in range(callers)]
    await links[0].grant(1, 0, Report())  # the actor is up

    async def caller(link: RayLink) -> None:
        for _ in range(calls):
            await link.grant(64, 0, Report())

    began = time.perf_counter()
    await asyncio.gather(*(caller(link) for link in links))
    wall = time.perf_counter() - began
    return f"limiter capacity: {callers * calls / wall:,.0f} grants/s ({callers} callers at once)"


def cli_run(actors: int, per_minute: int, busy: int, items: int, concurrency: int) -> str:
    """`tagger run --ray` (its own process, a local Ray, real actors) against a fake enforcing
    `per_minute` over every sliding second, with `busy` busy loops beside it."""
    import subprocess
    import tempfile

    from common import run_args, server_stats, write_abstracts

    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            source = write_abstracts(Path(tmp) / "in.jsonl", items)
            with fake_server("--rpm", str(per_minute), "--window", "60", "--per-second") as (
                proc,
                url,
            ):
                args = run_args(source, Path(tmp) / "out.jsonl", url, "--no-cache")
                args += ["--rpm", str(per_minute), "--concurrency", str(concurrency)]
                args += ["--ray", "--ray-actors", str(actors), "-q"]
                began = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-m", "tagger", *args], capture_output=True, text=True
                )
                wall = time.perf_counter() - began
                counts = server_stats(proc)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    by_status = counts.get("by_status", {})
    assert isinstance(by_status, dict)
    ok, limited = int(by_status.get("200", 0)), int(by_status.get("429", 0))
    span = float(counts.get("answered_span", 0.0))  # type: ignore[arg-type]
    used = (ok - 1) / (span * per_minute / 60) if span else 0.0
    return (
        f"tagger run --ray, {actors} actors x {concurrency}, {busy} busy loops: exit "
        f"{done.returncode}, {ok} answered, {limited} x 429, limit used {used:6.1%} "
        f"({wall:.1f} s whole command)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--limit", type=int, default=3000, help="requests per minute")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--concurrency", type=int, default=4, help="per simulated actor")
    parser.add_argument("--actors", default="1,2,4,8,16,32")
    parser.add_argument("--cli-actors", default="2,4", help="real actors ('' to skip)")
    parser.add_argument("--cli-limit", type=int, default=1200, help="requests per minute")
    parser.add_argument("--cli-items", type=int, default=400)
    parser.add_argument("--busy", type=int, default=2, help="busy loops beside the real run")
    args = parser.parse_args()
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    print(f"limit {args.limit}/min enforced per second ({args.limit // 60}/s); "
          f"{args.seconds:g} s per row")  # fmt: skip
    for actors in (int(n) for n in args.actors.split(",")):
        limits = ["--rpm", str(args.limit), "--window", "60", "--per-second"]
        with fake_server(*limits) as (_proc, url):
            line = asyncio.run(simulate(url, actors, args.limit, args.seconds, args.concurrency))
        print(line, flush=True)
    print(asyncio.run(capacity(32, 100)), flush=True)
    ray.shutdown()
    for actors in (int(n) for n in args.cli_actors.split(",") if n):
        for busy in sorted({0, args.busy}):
            line = cli_run(actors, args.cli_limit, busy, args.cli_items, args.concurrency * 2)
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
