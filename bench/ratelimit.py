"""Rate limits: the fake server enforces a sliding-window RPM; how close does tagger get?

    python bench/ratelimit.py [--limit 600] [--window 60] [--items 700] [--per-minute-only]

By default the server enforces the limit per second too (600 per minute as 10 in any sliding
second, as providers may). Four runs against the same limit: --rpm at the true limit (goal:
>= 95% of the limit used, zero 429s), --rpm unset (learned from the headers), the same with a
forced --mode (no format probe: the first request goes alone anyway), and --rpm at twice the
truth (goal: every item still ok). The figure of merit is the request rate the server saw
(first to last answered request) against the limit.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import urllib.request
from pathlib import Path

from common import fake_server, run_args, run_tagger, write_abstracts


def stats(url: str) -> dict[str, object]:
    """The fake server's counters."""
    with urllib.request.urlopen(url + "/stats", timeout=5) as response:
        result: dict[str, object] = json.load(response)
        return result


def one_run(label: str, rpm: int | None, args: argparse.Namespace, tmp: Path, *extra: str) -> bool:
    per_minute = args.limit * 60 / args.window
    limits = ["--rpm", str(args.limit), "--window", str(args.window), "--retry-after", "1"]
    with fake_server(*limits, *([] if args.per_minute_only else ["--per-second"])) as (_, url):
        source = write_abstracts(tmp / f"in-{label}.jsonl", args.items, seed=len(label))
        out = tmp / f"out-{label}.jsonl"
        command = run_args(source, out, url, "--no-cache", "--concurrency", str(args.concurrency))
        command += [*extra, *(["--rpm", str(rpm)] if rpm is not None else [])]
        wall, _, code = run_tagger(command)
        counts = stats(url)
    by_status = counts["by_status"]
    assert isinstance(by_status, dict)
    ok_requests = int(by_status.get("200", 0))
    limited = int(by_status.get("429", 0))
    manifest = json.loads(out.with_name(f"out-{label}.manifest.json").read_text())
    span = float(counts["answered_span"])  # first to last answered request, server clock
    used = (ok_requests - 1) / (span * per_minute / 60) if span else 0.0
    print(
        f"{label:<22} {wall:6.1f} s  {ok_requests} answered, {limited} x 429, "
        f"{manifest['ok']}/{args.items} ok, exit {code}, limit used {used:.1%}"
    )
    return manifest["ok"] == args.items


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=600, help="requests per window")
    parser.add_argument("--window", type=float, default=60.0, help="window in seconds")
    parser.add_argument("--items", type=int, default=700)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--per-minute-only", action="store_true", help="no per-second enforcement")
    args = parser.parse_args()
    per_minute = round(args.limit * 60 / args.window)
    also = "" if args.per_minute_only else f", and {args.limit / args.window:g} per sliding 1 s"
    print(
        f"server limit: {args.limit} requests per sliding {args.window:g} s{also} "
        f"(= {per_minute}/min), {args.items} items, concurrency {args.concurrency}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        results = [
            one_run("--rpm = limit", per_minute, args, Path(tmp)),
            one_run("--rpm unset", None, args, Path(tmp)),
            one_run("--rpm unset, --mode", None, args, Path(tmp), "--mode", "json_schema"),
            one_run("--rpm = 2 x limit", 2 * per_minute, args, Path(tmp)),
        ]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
