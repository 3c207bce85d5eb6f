"""Whole-command throughput: `tagger run` against a bare openai SDK loop, both as processes.

    python bench/throughput.py [--items 3000] [--latency 0.05] [--concurrency 64]
                               [--http both|httpx|aiohttp] [--rounds 3] [--no-tty] [--quick]

Each side is timed as a whole process, as a user runs it: interpreter start-up and imports,
reading the inputs, sending, and writing the output. `tagger run` also pays for its input
checking pass, a cache commit per answer (a fresh cache each time: every abstract is sent),
its rows and manifest and, on a terminal, its progress line (its stderr is a pseudo-terminal
unless --no-tty). The bare loop (bench/bare_loop.py) sends the same request bodies, rendered
beforehand, with the matching SDK client and writes the answers; nothing else. Both use the
same fake server in its own process. Rounds interleave the two sides (bare, tagger; then
tagger, bare; ...) to cancel the machine's drift; each round's ratio is of its own pair.
CPU is the child process's user+system time.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from common import ROOT, fake_server, run_args, write_abstracts

from tagger.config import ClientConfig, Mode, RunConfig
from tagger.files.abstracts import iter_abstracts, scan
from tagger.pipeline.request import build_request, render_messages
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan

GOAL = 0.85
BARE = str(Path(__file__).with_name("bare_loop.py"))


@dataclass(frozen=True)
class Timing:
    """One whole process: wall seconds, CPU seconds (user + system), exit code."""

    wall: float
    cpu: float
    code: int


def write_requests(source: Path, path: Path, url: str, *, logprobs: bool) -> Path:
    """The chat-completions bodies tagger sends for source, one per line, for the bare loop."""
    config = RunConfig(client=ClientConfig(base_url=url), prompts_dir=ROOT / "prompts")
    plan = RunPlan.load(config, PriceTable())
    with path.open("w", encoding="utf-8") as out:
        for abstract in iter_abstracts(scan([source]).files):
            messages = render_messages(
                plan.prompt, plan.taxonomy, plan.schema, abstract.text, abstract.title,
                Mode.JSON_SCHEMA,
            )  # fmt: skip
            body = build_request(
                config.client.model, messages, Mode.JSON_SCHEMA, plan.schema, plan.prompt.params,
                logprobs=logprobs and config.client.logprobs,  # as tagger run asks
            )  # fmt: skip
            out.write(json.dumps(body, ensure_ascii=False) + "\n")
    return path


def run_process(command: list[str], *, tty: bool) -> Timing:
    """Run one command to its end; stderr on a pseudo-terminal (drained here) if tty."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    if tty:
        leader, follower = pty.openpty()
        drain = threading.Thread(target=_drain, args=(leader,), daemon=True)
        drain.start()
        env = {**os.environ, "COLUMNS": "100", "TERM": os.environ.get("TERM", "xterm")}
        proc = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=follower, env=env
        )
        os.close(follower)
        code = proc.wait()
        drain.join(timeout=5)
    else:
        code = subprocess.run(
            command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        ).returncode
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(wall, cpu, code)


def _drain(fd: int) -> None:
    """Read a pseudo-terminal until its writer is gone, as a terminal would."""
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=3000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--http", choices=["both", "httpx", "aiohttp"], default="both")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-tty", action="store_true", help="tagger's stderr to /dev/null")
    parser.add_argument(
        "--no-logprobs", action="store_true", help="tagger run --no-logprobs; bare loop likewise"
    )
    parser.add_argument("--quick", action="store_true", help="600 items, 1 round: a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.items, args.rounds = 600, 1
    transports = ["httpx", "aiohttp"] if args.http == "both" else [args.http]
    with (
        tempfile.TemporaryDirectory() as tmp_name,
        fake_server("--latency", str(args.latency)) as (_proc, url),
    ):
        tmp = Path(tmp_name)
        source = write_abstracts(tmp / "in.jsonl", args.items)
        requests = write_requests(
            source, tmp / "requests.jsonl", url, logprobs=not args.no_logprobs
        )
        runs = 0

        def bare(http: str) -> Timing:
            out = tmp / "bare-out.jsonl"
            command = [sys.executable, BARE, str(requests), str(out), url, "--http", http]
            timing = run_process([*command, "--concurrency", str(args.concurrency)], tty=False)
            _check(timing, out, args.items, "bare loop")
            return timing

        def tagger(http: str, inputs: Path = source, count: int = args.items) -> Timing:
            nonlocal runs
            runs += 1
            out = tmp / f"out-{runs}.jsonl"
            extra = ["--cache-dir", str(tmp / f"cache-{runs}"), "--http", http]
            extra += ["--no-logprobs"] if args.no_logprobs else []
            command = run_args(inputs, out, url, *extra, "--concurrency", str(args.concurrency))
            timing = run_process(
                [sys.executable, "-m", "tagger.cli.app", *command], tty=not args.no_tty
            )
            _check(timing, out, count, "tagger run")
            return timing

        print(
            f"{args.items} items, latency {args.latency * 1000:.0f} ms, concurrency "
            f"{args.concurrency}, {args.rounds} rounds per transport, whole processes, "
            f"tagger's stderr {'/dev/null' if args.no_tty else 'a terminal'}, "
            f"logprobs {'off' if args.no_logprobs else 'as tagger asks by default'}"
        )
        warm = write_abstracts(tmp / "warm.jsonl", 200, seed=1)
        for http in transports:  # compiled bytecode, page cache, the server's first sockets
            tagger(http, warm, 200)
        results: dict[str, list[tuple[Timing, Timing]]] = {http: [] for http in transports}
        for round_number in range(args.rounds):
            for http in transports:
                if round_number % 2 == 0:
                    first_bare = bare(http)
                    pair = (first_bare, tagger(http))
                else:
                    first_tagger = tagger(http)
                    pair = (bare(http), first_tagger)
                results[http].append(pair)
        return report(results, args.items)


def _check(timing: Timing, out: Path, count: int, what: str) -> None:
    """A run that failed or wrote too few lines measures nothing: stop the benchmark."""
    lines = sum(1 for _ in out.open(encoding="utf-8")) if out.exists() else 0
    if timing.code != 0 or lines != count:
        sys.exit(f"{what} exited {timing.code} with {lines} of {count} lines: not measured")


def report(results: dict[str, list[tuple[Timing, Timing]]], items: int) -> int:
    """Print medians and per-round ratios per transport; 0 if every median ratio meets GOAL."""
    met = True
    for http, pairs in results.items():
        bare_wall = statistics.median(b.wall for b, _ in pairs)
        tag_wall = statistics.median(t.wall for _, t in pairs)
        bare_cpu = statistics.median(b.cpu for b, _ in pairs)
        tag_cpu = statistics.median(t.cpu for _, t in pairs)
        ratios = [b.wall / t.wall for b, t in pairs]
        ratio = statistics.median(ratios)
        met = met and ratio >= GOAL
        print(f"-- transport {http}")
        for label, wall, cpu in (("bare openai loop", bare_wall, bare_cpu),
                                 ("tagger run", tag_wall, tag_cpu)):  # fmt: skip
            print(
                f"{label:<18} {items / wall:7.1f} items/s  {wall:6.2f} s  "
                f"{1000 * cpu / items:.3f} ms CPU/item"
            )
        shown = ", ".join(f"{r:.1%}" for r in ratios)
        print(f"tagger / bare (median of rounds): {ratio:.1%} (rounds: {shown}; goal >= 85%)")
        print(
            f"tagger's extra CPU per item: {1000 * (tag_cpu - bare_cpu) / items:.3f} ms "
            f"(CPU ratio bare / tagger {bare_cpu / tag_cpu:.1%})"
        )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
