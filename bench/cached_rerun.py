"""A fully cached rerun of 10,000 abstracts: wall time (goal < 2 s) and zero requests.

    python bench/cached_rerun.py [--files 10] [--items 1000] [--runs 5] [--against DIR]

The corpus is a folder of `--files` JSONL files of `--items` seed-like abstracts each. The first
run fills the cache against the fake server; the reruns, timed, are the same command (the median
of `--runs`). The baseline printed alongside is the wall time of `tagger --version` (interpreter
start-up and imports), the floor any command pays. `--against DIR` also times the same reruns
with the `tagger/` package found in DIR (another version, e.g. `git archive main tagger | tar
-x -C DIR`), interleaved with this one's, and checks that both write the same bytes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import urllib.request
from pathlib import Path

from common import fake_server, run_args, run_tagger, server_stats, write_abstracts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--items", type=int, default=1000, help="abstracts per file")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--against", type=Path, default=None, help="another version's code")
    args = parser.parse_args()
    total = args.files * args.items
    with tempfile.TemporaryDirectory() as tmp, fake_server() as (proc, url):
        corpus = Path(tmp) / "corpus"
        corpus.mkdir()
        for n in range(args.files):
            write_abstracts(corpus / f"part{n:02d}.jsonl", args.items, seed=n, first=n * args.items)
        out = Path(tmp) / "out.jsonl"
        cache = ["--cache-dir", str(Path(tmp) / "cache"), "--concurrency", "64"]
        first, _, code = run_tagger(run_args(corpus, out, url, *cache))
        print(f"first run (fills the cache): {first:.2f} s, exit {code}")
        requests_before = server_stats_count(url)
        startup = statistics.median(run_tagger(["--version"])[0] for _ in range(3))
        versions = {"this code": None, **({"--against": args.against} if args.against else {})}
        times: dict[str, list[float]] = {name: [] for name in versions}
        outputs: dict[str, bytes] = {}
        for _ in range(args.runs):
            for number, (name, code_dir) in enumerate(versions.items()):
                target = out.with_name(f"out-{number}.jsonl")
                wall, _, code = run_tagger(run_args(corpus, target, url, *cache), code_dir)
                times[name].append(wall)
                outputs[name] = target.read_bytes()
        requests = server_stats_count(url) - requests_before
        manifest = json.loads(target.with_name(target.stem + ".manifest.json").read_text())
        print(f"baseline `tagger --version`: {startup:.2f} s")
        for name, walls in times.items():
            shown = ", ".join(f"{t:.2f}" for t in walls)
            median = statistics.median(walls)
            print(f"cached rerun of {total:,}, {name}: median {median:.2f} s ({shown})")
        if args.against:
            same = outputs["this code"] == outputs["--against"]
            print(f"rows of both versions byte-identical: {same}")
        print(f"{manifest['cached']} cached, {requests} requests (goal < 2 s, 0 requests)")
        server_stats(proc)
        return 0 if statistics.median(times["this code"]) < 2.0 and requests == 0 else 1


def server_stats_count(url: str) -> int:
    """Requests the fake server has answered so far (from its /v1/stats endpoint)."""
    with urllib.request.urlopen(url + "/stats", timeout=5) as response:
        return int(json.load(response)["requests"])


if __name__ == "__main__":
    sys.exit(main())
