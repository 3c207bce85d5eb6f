"""How far one cluster-wide limiter holds as actors are added: simulated actors against the fake,
then real `tagger run --ray` actors with the machine loaded.

    python bench/ray_limiter.py [--limit 3000] [--seconds 6] [--actors 1,2,4,8,16,32]
                                [--cli-actors 2,4] [--cli-limit 1200] [--busy 2]
                                [--loaded-only]

The fake server (its own process) enforces --limit requests per minute over every sliding
second. One limiter actor (tagger.ray.actors) paces N simulated actors: each is what a Ray Data
tagging actor holds (a ClusterGate reaching the limiter through a RayLink, an LLMClient with
its own connections), all in this process's event loop, sending for --seconds. The figures:
429s the server sent (goal 0), the share of the limit the actors used together (first to last
answered request), and the limiter's own cost: grant calls a second and their mean latency.

Then `tagger run --ray` itself (`--cli-actors`, `''` for none) against a fake enforcing
`--cli-limit` per minute over every sliding second, quiet and with `--busy` busy loops beside it
(`--loaded-only`: only loaded; `--actors ''` skips the simulated ones). Besides 429s and the
limit used (over the whole span, and from the actors' first request: the driver's canary and
Ray's start-up left out), it prints where the actors' time went, from tagger.ray's debug lines
and a trace of every request stage by stage (written to files per process by
bench/raytrace/sitecustomize.py, joined with the fake's trace): grant round trips, permits
given back unused, each stage's delay (permit due, woken, request hook, socket, the fake's
read and its judging), the most requests in any second at each stage, and the gaps in what
the server received. `RAY_worker_niceness=15` in the environment runs the actors at Ray's
own niceness (what `--ray` did before tagger set 0).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import statistics
import sys
import time
import urllib.request
from pathlib import Path

from common import ROOT, fake_server, seed_texts

from tagger.config import ClientConfig, Mode, RunConfig
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.ray.actors import Limits, RayLink, start_limiter
from tagger.ray.cluster import local_system_config
from tagger.ray.gate import ClusterGate
from tagger.ray.messages import Report
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


def cli_run(
    actors: int,
    per_minute: int,
    busy: int,
    items: int,
    concurrency: int,
    code: Path | None,
    nice: int | None = None,
) -> str:
    """`tagger run --ray` (its own process, a local Ray, real actors) against a fake enforcing
    `per_minute` over every sliding second, with `busy` busy loops beside it; `code`: the
    `tagger/` of another version instead (its folder, for the driver and the actors)."""
    import subprocess
    import tempfile

    from common import renice, run_args, server_stats, write_abstracts

    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            source = write_abstracts(Path(tmp) / "in.jsonl", items)
            trace = Path(tmp) / "server.jsonl"
            limits = ["--rpm", str(per_minute), "--window", "60", "--per-second"]
            with fake_server(*limits, "--trace", str(trace)) as (proc, url):
                if nice is not None and not renice(proc.pid, nice):
                    print(f"could not renice the fake server to {nice}", file=sys.stderr)
                args = run_args(source, Path(tmp) / "out.jsonl", url, "--no-cache")
                args += ["--rpm", str(per_minute), "--concurrency", str(concurrency)]
                args += ["--ray", "--ray-actors", str(actors), "-q"]
                logs = Path(tmp) / "logs"
                logs.mkdir()
                env = {**os.environ, "TAGGER_BENCH_LOG_DIR": str(logs)}
                paths = [str(Path(__file__).parent / "raytrace"), str(code or "")]
                env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
                began = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-m", "tagger", *args],
                    capture_output=True,
                    text=True,
                    env=env,
                    cwd=code,
                )
                wall = time.perf_counter() - began
                counts = server_stats(proc)
            gaps = idle_gaps(trace, per_minute)
            trace_times = answered_times(trace)
            manifest = json.loads((Path(tmp) / "out.manifest.json").read_text())
            print("\n".join(worker_report(logs)), flush=True)
            print(after_the_wire(logs, trace, per_minute // 60), flush=True)
            print("\n".join(stages(logs, trace, per_minute // 60)), flush=True)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    by_status = counts.get("by_status", {})
    assert isinstance(by_status, dict)
    ok, limited = int(by_status.get("200", 0)), int(by_status.get("429", 0))
    span = float(counts.get("answered_span", 0.0))  # type: ignore[arg-type]
    used = (ok - 1) / (span * per_minute / 60) if span else 0.0
    version = "" if code is None else f" [{code.name}]"
    actors_used = actors_share(trace_times, per_minute)
    version += "" if nice is None else f" (the fake at nice {nice})"
    return (
        f"tagger run --ray{version}, {actors} actors x {concurrency}, {busy} busy loops: exit "
        f"{done.returncode}, {ok} answered, {limited} x 429, limit used {used:6.1%} "
        f"(from the actors' first request: {actors_used:6.1%}) "
        f"({wall:.1f} s whole command); {gaps}; permits {manifest.get('permits')}"
    )


def worker_report(logs: Path) -> list[str]:
    """What the tagging actors' gates said (tagger.ray's debug lines, bench/raytrace)."""
    grants: list[float] = []
    ahead: list[float] = []
    lost: list[float] = []
    late: list[float] = []
    written: list[float] = []  # when each request was written (monotonic, every actor)
    stale = returned = 0
    batches: list[float] = []
    for path in logs.glob("*.log"):
        for line in path.read_text().splitlines():
            if m := re.search(r"grant: (\d+) permits in ([\d.]+) ms, due (-?[\d.]+) to", line):
                grants.append(float(m.group(2)))
                ahead.append(float(m.group(3)))
            elif m := re.search(r"permit lost: woke ([\d.]+) ms", line):
                lost.append(float(m.group(1)))
            elif m := re.search(r"request written (-?[\d.]+) ms after", line):
                written.append(float(line.split()[0]))
                if float(m.group(1)) > 20:
                    late.append(float(m.group(1)))
            elif m := re.search(r"(\d+) permits stale", line):
                stale += int(m.group(1))
            elif m := re.search(r"(\d+) permits returned", line):
                returned += int(m.group(1))
            elif m := re.search(r"batch of \d+ records done in ([\d.]+) s", line):
                batches.append(float(m.group(1)))

    def spread(values: list[float]) -> str:
        if not values:
            return "-"
        values = sorted(values)
        return (f"median {statistics.median(values):.1f}, p90 "
                f"{values[int(0.9 * (len(values) - 1))]:.1f}, max {values[-1]:.1f}")  # fmt: skip

    return [
        f"  grants: {len(grants)}, round trip ms {spread(grants)}; first permit due in ms "
        f"{spread(ahead)}",
        f"  permits used over 20 ms late: {len(late)} (ms late {spread(late)}); lost: "
        f"{len(lost)} woken too late (ms {spread(lost)}), {stale} stale, {returned} returned "
        "at a batch's end",
        f"  batches: {len(batches)}, seconds each {spread(batches)}",
        f"  the most requests written in any one second, all actors together: "
        f"{most_in_a_second(written)}",
    ]


def most_in_a_second(times: list[float]) -> int:
    """The most of `times` in any window of one second."""
    times = sorted(times)
    most = start = 0
    for end, at in enumerate(times):
        while times[start] <= at - 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


def after_the_wire(logs: Path, trace: Path, cap: int) -> str:
    """How much shorter `cap + 1` requests in a row were when the server judged them than when
    the actors wrote them (the n-th written taken for the n-th judged)."""
    written = sorted(
        float(line.split()[0])
        for path in logs.glob("*.log")
        for line in path.read_text().splitlines()
        if "request written" in line
    )
    judged = sorted(
        json.loads(line)["limited_at"] for line in trace.read_text().splitlines() if line
    )
    if len(written) != len(judged) or len(written) <= cap:
        return f"  written {len(written)}, judged {len(judged)}: not paired"
    shrink = sorted(
        (written[i + cap] - written[i]) - (judged[i + cap] - judged[i])
        for i in range(len(written) - cap)
    )
    delays = sorted(b - a for a, b in zip(written, judged, strict=True))
    return (
        f"  written to judged: delay median {statistics.median(delays) * 1000:.1f} ms, max "
        f"{delays[-1] * 1000:.1f} ms; {cap + 1} in a row shrank by up to "
        f"{shrink[-1] * 1000:.1f} ms (99th percentile {shrink[int(0.99 * len(shrink))] * 1000:.1f})"
    )


STAGES = ("due", "woke", "hook", "wire", "written", "arrived", "limited_at")
_MARKER = re.compile(r"Study number (\d+)")


def stages(logs: Path, trace: Path, cap: int) -> list[str]:
    """Each request attempt stage by stage (bench/raytrace: the actors' side, the fake's trace:
    its side), joined by abstract: each stage's delay after the one before it, and the most
    attempts in any one second at each stage (where runs of `cap + 1` first appear)."""
    sent: dict[int, list[dict[str, float]]] = {}
    for path in logs.glob("*.stages"):
        for line in path.read_text().splitlines():
            attempt = json.loads(line)
            if attempt.get("marker") is not None:
                sent.setdefault(attempt["marker"], []).append(attempt)
    for attempts in sent.values():
        attempts.sort(key=lambda a: a.get("wire", a.get("done", 0.0)))
    rows = []
    taken: dict[int, int] = {}
    for line in trace.read_text().splitlines():
        record = json.loads(line) if line else {}
        found = _MARKER.search(record.get("note", ""))
        if not found:
            continue
        marker = int(found.group(1))
        index = taken[marker] = taken.get(marker, -1) + 1
        attempts = sent.get(marker, [])
        rows.append({**(attempts[index] if index < len(attempts) else {}), **record})
    complete = [r for r in rows if all(r.get(stage) for stage in STAGES)]
    nices = sorted({a.get("nice") for attempts in sent.values() for a in attempts}, key=str)
    out = [
        f"  stages: {len(rows)} attempts at the fake, {len(complete)} traced end to end "
        f"(the actors' niceness: {nices})"
    ]
    for before, after in itertools.pairwise(STAGES):
        delays = sorted(r[after] - r[before] for r in complete)
        if delays:
            pick = [delays[int(q * (len(delays) - 1))] * 1000 for q in (0.5, 0.9, 0.99)]
            out.append(
                f"    {before:>8} -> {after:<10} median {pick[0]:6.1f}  p90 {pick[1]:6.1f}  "
                f"p99 {pick[2]:6.1f}  max {delays[-1] * 1000:6.1f} ms"
            )
    most = ", ".join(f"{s} {most_in_a_second([r[s] for r in complete])}" for s in STAGES)
    out.append(f"    most in any one second at each stage: {most}")
    refused = [r for r in complete if r.get("status") == 429]
    for stage in STAGES:
        runs = sum(1 for r in refused if _crowded(complete, r, stage, cap))
        out.append(
            f"    429s whose second was already over {cap} at {stage}: {runs}/{len(refused)}"
        )
    return out


def _crowded(rows: list[dict[str, float]], refused: dict[str, float], stage: str, cap: int) -> bool:
    """Whether, at `stage`, the admitted requests the fake judged in the second before a
    refused one were already more than `cap` with it within one second."""
    at = refused["limited_at"]
    group = [r for r in rows if r.get("status") != 429 and at - 1.0 < r["limited_at"] <= at]
    times = sorted([r[stage] for r in group] + [refused[stage]])
    return len(times) > cap and times[-1] - times[0] < 1.0


def answered_times(trace: Path) -> list[float]:
    """When the fake judged each request it answered, in order."""
    records = [json.loads(line) for line in trace.read_text().splitlines() if line]
    return sorted(r["limited_at"] for r in records if r.get("status") == 200)


def actors_share(times: list[float], per_minute: int) -> float:
    """The share of the limit used from the actors' first answered request to the last: the
    driver's canary (the first request, sent before Ray is joined) and Ray's start-up after
    it left out."""
    actors = times[1:]
    span = actors[-1] - actors[0] if len(actors) > 1 else 0.0
    return (len(actors) - 1) / (span * per_minute / 60) if span else 0.0


def idle_gaps(trace: Path, per_minute: int) -> str:
    """Where the server waited for requests: the gaps between arrivals longer than 3 paces."""
    times = sorted(
        json.loads(line)["limited_at"] for line in trace.read_text().splitlines() if line
    )
    pace = 60 / per_minute
    gaps = [b - a for a, b in itertools.pairwise(times)]
    long = [g for g in gaps if g > 3 * pace]
    return (
        f"{len(long)} gaps over {3 * pace * 1000:.0f} ms totalling {sum(long):.1f} s "
        f"(longest {max(long, default=0):.2f} s) in a {times[-1] - times[0]:.1f} s span"
    )


def simulated(args: argparse.Namespace) -> None:
    """The simulated actors in this process, then the limiter's own capacity."""
    import ray

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
        _system_config=local_system_config(None, os.environ),  # as `tagger run --ray`'s Ray
    )
    print(f"limit {args.limit}/min enforced per second ({args.limit // 60}/s); "
          f"{args.seconds:g} s per row")  # fmt: skip
    for actors in (int(n) for n in args.actors.split(",") if n):
        limits = ["--rpm", str(args.limit), "--window", "60", "--per-second"]
        with fake_server(*limits) as (_proc, url):
            line = asyncio.run(simulate(url, actors, args.limit, args.seconds, args.concurrency))
        print(line, flush=True)
    print(asyncio.run(capacity(32, 100)), flush=True)
    ray.shutdown()


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
    parser.add_argument("--loaded-only", action="store_true", help="real actors: only --busy")
    parser.add_argument("--against", type=Path, default=None, help="another version's code")
    parser.add_argument(
        "--server-nice", type=int, default=None, help="the fake server's niceness (e.g. -10)"
    )
    args = parser.parse_args()
    if args.actors:
        simulated(args)
    for actors in (int(n) for n in args.cli_actors.split(",") if n):
        for busy in [args.busy] if args.loaded_only else sorted({0, args.busy}):
            for code in [None, *([args.against] if args.against else [])]:
                line = cli_run(
                    actors,
                    args.cli_limit,
                    busy,
                    args.cli_items,
                    args.concurrency * 2,
                    code,
                    args.server_nice,
                )
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
