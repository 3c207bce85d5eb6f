"""A fully cached rerun of 10,000 abstracts: wall time (goal < 2 s) and zero requests.

    python bench/cached_rerun.py [--items 10000]

The first run fills the cache against the fake server; the second, timed, is the same command.
The baseline printed alongside is the wall time of `tagger --version` (interpreter start-up and
imports), the floor any command pays.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from common import fake_server, run_args, run_tagger, server_stats, write_abstracts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, fake_server() as (proc, url):
        source = write_abstracts(Path(tmp) / "in.jsonl", args.items)
        out = Path(tmp) / "out.jsonl"
        command = run_args(
            source, out, url, "--cache-dir", str(Path(tmp) / "cache"), "--concurrency", "64"
        )
        first, _, code = run_tagger(command)
        print(f"first run (fills the cache): {first:.2f} s, exit {code}")
        requests_before = server_stats_count(url)
        startup, _, _ = run_tagger(["--version"])
        rerun, _, code = run_tagger(command)
        requests_after = server_stats_count(url)
        manifest = json.loads(out.with_name("out.manifest.json").read_text())
        print(f"baseline `tagger --version`: {startup:.2f} s")
        print(
            f"cached rerun of {args.items}: {rerun:.2f} s wall, exit {code}, "
            f"{manifest['cached']} cached, {requests_after - requests_before} requests "
            f"(goal < 2 s, 0 requests)"
        )
        server_stats(proc)
        return 0 if rerun < 2.0 and requests_after == requests_before else 1


def server_stats_count(url: str) -> int:
    """Requests the fake server has answered so far (from its /v1/stats endpoint)."""
    import urllib.request

    with urllib.request.urlopen(url + "/stats", timeout=5) as response:
        return int(json.load(response)["requests"])


if __name__ == "__main__":
    sys.exit(main())
