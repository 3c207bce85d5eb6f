"""tagger on Ray against a local run: items/s with 1 and 2 actors, and the Ray stage's per-row cost.

    python bench/ray_throughput.py [--items 3000] [--latency 0.05] [--concurrency 32] [--quick]

Against the fake server in its own process (--latency seconds an answer):

1. whole commands, as a user runs them: `tagger run` (local), then `tagger run --ray` with 1
   and 2 actors, each starting its own local Ray (start-up included);
2. the same with a Ray already running (in this process: ray.init(num_cpus=2)): the steady
   rate once the cluster is up, which is what a long run sees;
3. the per-row cost of the Ray stage: every answer cached, so no request is sent and what is
   left is Arrow batches, records, the cache lookup and the rows, against a local cached rerun.

--concurrency is per actor for Ray, and for the whole local run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, fake_server, run_args, run_tagger, write_abstracts

from tagger.config import ClientConfig, RunConfig
from tagger.files.abstracts import scan
from tagger.pipeline.progress import SilentProgress
from tagger.pricing import PriceTable


def whole(label: str, command: list[str], items: int) -> float:
    wall, rss, code = run_tagger(command)
    assert code == 0, f"{label}: exit {code}"
    print(f"  {label:<34} {wall:6.1f} s  {items / wall:7.0f} items/s  (peak RSS {rss:.0f} MB)")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=3000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="600 items: a smoke run")
    parser.add_argument("--merge-rows", type=int, default=100_000, help="rows for the merge")
    args = parser.parse_args()
    if args.quick:
        args.items = 600
    concurrency = ["--concurrency", str(args.concurrency), "--no-logprobs"]
    with (
        tempfile.TemporaryDirectory() as tmp_name,
        fake_server("--latency", str(args.latency)) as (_proc, url),
    ):
        tmp = Path(tmp_name)
        source = write_abstracts(tmp / "in.jsonl", args.items)
        print(f"{args.items} abstracts, fake server answering in {args.latency * 1000:.0f} ms")
        print("whole commands (a fresh cache each):")
        whole(
            "tagger run (local)",
            run_args(
                source, tmp / "local.jsonl", url, "--cache-dir", str(tmp / "c0"), *concurrency
            ),
            args.items,
        )
        for actors in (1, 2):
            command = run_args(
                source, tmp / f"ray{actors}.jsonl", url, "--cache-dir", str(tmp / f"c{actors}")
            )
            command += [*concurrency, "--ray", "--ray-actors", str(actors)]
            whole(f"tagger run --ray, {actors} actor(s)", command, args.items)
        steady(args, source, url, tmp)
        merge_rate(tmp, args.merge_rows)
    return 0


def merge_rate(tmp: Path, rows: int) -> None:
    """`tagger merge` on parts of `rows` rows (two parts, each half of them, shuffled)."""
    import json
    import random

    from tagger.ray.merge import merge_parts

    parts = tmp / "merge.parts"
    parts.mkdir()
    template = json.loads((tmp / "local.jsonl").read_text().splitlines()[0])  # a real row
    order = list(range(rows))
    random.Random(0).shuffle(order)
    for number, half in enumerate((order[: rows // 2], order[rows // 2 :])):
        with (parts / f"part-{number}.jsonl").open("w") as out:
            out.write(json.dumps({"part": {"run": "bench", "seq": number, "input_count": rows}}))
            out.write("\n")
            for index in half:
                row = {**template, "id": f"m{index}", "index": index}
                out.write(json.dumps({"key": f"k{index}", "row": row}) + "\n")
    began = time.perf_counter()
    stats = merge_parts([parts], tmp / "merged.jsonl")
    wall = time.perf_counter() - began
    assert stats.items == rows
    print(f"merge: {rows} rows in {wall:.1f} s, {rows / wall:,.0f} rows/s")


def steady(args: argparse.Namespace, source: Path, url: str, tmp: Path) -> None:
    import ray

    from tagger.ray.job import RayRun, run_on_ray

    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    ray.data.DataContext.get_current().enable_progress_bars = False
    print(f"with Ray already up (ray.init took {time.perf_counter() - started:.1f} s):")
    scanned = scan([source])
    for actors in (1, 2):
        config = RunConfig(
            client=ClientConfig(base_url=url, api_key="sk-bench", logprobs=False),  # type: ignore[arg-type]
            prompts_dir=ROOT / "prompts",
            cache_dir=tmp / f"w{actors}",
            concurrency=args.concurrency,
        )
        out = tmp / f"warm{actors}.jsonl"
        how = RayRun(None, actors=actors)
        began = time.perf_counter()
        stats = run_on_ray(config, scanned, out, SilentProgress(), PriceTable(), how).stats
        wall = time.perf_counter() - began
        assert stats.ok == args.items, stats
        print(f"  {actors} actor(s), {args.items} sent:{'':<17} {wall:6.1f} s  "
              f"{args.items / wall:7.0f} items/s")  # fmt: skip
        (tmp / f"warm{actors}.jsonl.parts").rename(tmp / f"old{actors}.parts")  # no skipping
        began = time.perf_counter()
        stats = run_on_ray(config, scanned, out, SilentProgress(), PriceTable(), how).stats
        wall = time.perf_counter() - began
        assert stats.cached == args.items, stats
        print(f"  {actors} actor(s), all cached:{'':<13} {wall:6.1f} s  "
              f"{wall / args.items * 1e6:7.0f} µs/row (Ray stage, read, parts, merge)")  # fmt: skip
    ray.shutdown()
    command = run_args(source, tmp / "local.jsonl", url, "--cache-dir", str(tmp / "c0"))
    wall, _, code = run_tagger(command)
    assert code == 0
    print(f"  local cached rerun (whole command):{'':<3} {wall:6.1f} s  "
          f"{wall / args.items * 1e6:7.0f} µs/row")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
