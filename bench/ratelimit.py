"""Rate limits: the fake server enforces a sliding-window RPM; how close does tagger get?

    python bench/ratelimit.py [--limit 600] [--window 60] [--items 700] [--per-minute-only]
                              [--cases rpm,unset,mode,double] [--loaded] [--against DIR]

By default the server enforces the limit per second too (600 per minute as 10 in any sliding
second, as providers may). Four runs against the same limit: --rpm at the true limit (goal:
>= 95% of the limit used, zero 429s), --rpm unset (learned from the headers), the same with a
forced --mode (no format probe: the first request goes alone anyway), and --rpm at twice the
truth (goal: every item still ok). The figure of merit is the request rate the server saw
(first to last answered request) against the limit. `--loaded` runs two busy loops beside
tagger (a machine shared with other work); `--trace` shows where each request's time went
(gate, socket, server) and at which stage the requests of each 429 bunched (`--trace-dir DIR`
keeps the traces); `--against DIR` runs each case with the `tagger/`
package in DIR too (another version, e.g. `git archive main tagger | tar -x -C DIR`), right
after this one's, as the baseline of the same run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from common import fake_server, renice, run_args, run_tagger, write_abstracts
from tracereport import report


def stats(url: str) -> dict[str, object]:
    """The fake server's counters."""
    with urllib.request.urlopen(url + "/stats", timeout=5) as response:
        result: dict[str, object] = json.load(response)
        return result


CASES = {  # name: (label, --rpm as a multiple of the limit (None: unset), extra arguments)
    "rpm": ("--rpm = limit", 1, ()),
    "unset": ("--rpm unset", None, ()),
    "mode": ("--rpm unset, --mode", None, ("--mode", "json_schema")),
    "double": ("--rpm = 2 x limit", 2, ()),
}


@contextmanager
def busy_loops(count: int) -> Iterator[None]:
    """`count` processes spinning on a core each while the block runs (a loaded machine)."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def one_run(
    label: str,
    rpm: int | None,
    args: argparse.Namespace,
    tmp: Path,
    *extra: str,
    code: Path | None = None,
) -> bool:
    per_minute = args.limit * 60 / args.window
    limits = ["--rpm", str(args.limit), "--window", str(args.window), "--retry-after", "1"]
    limits += [] if args.per_minute_only else ["--per-second"]
    where = args.trace_dir or tmp
    name = f"{label.replace(' ', '').replace('=', '-')}-{len(list(where.glob('client-*')))}"
    traced = (where / f"client{name}.jsonl", where / f"server{name}.jsonl") if args.trace else None
    limits += ["--trace", str(traced[1])] if traced else []
    with fake_server(*limits) as (server, url):
        if args.server_nice is not None and not renice(server.pid, args.server_nice):
            print(f"could not renice the fake server to {args.server_nice}", file=sys.stderr)
        source = write_abstracts(tmp / f"in-{label}.jsonl", args.items, seed=len(label))
        out = tmp / f"out-{label}.jsonl"
        command = run_args(source, out, url, "--no-cache", "--concurrency", str(args.concurrency))
        command += [*extra, *(["--rpm", str(rpm)] if rpm is not None else [])]
        with busy_loops(2 if args.loaded else 0):
            wall, _, exit_code = run_tagger(command, code, traced[0] if traced else None)
        counts = stats(url)
    by_status = counts["by_status"]
    assert isinstance(by_status, dict)
    ok_requests = int(by_status.get("200", 0))
    limited = int(by_status.get("429", 0))
    manifest = json.loads(out.with_name(f"out-{label}.manifest.json").read_text())
    span = float(counts["answered_span"])  # first to last answered request, server clock
    used = (ok_requests - 1) / (span * per_minute / 60) if span else 0.0
    version = "" if code is None else f" [{code.name}]"
    print(
        f"{label + version:<30} {wall:6.1f} s  {ok_requests} answered, {limited} x 429, "
        f"{manifest['ok']}/{args.items} ok, exit {exit_code}, limit used {used:.1%}"
    )
    if traced:
        cap = max(1, int(args.limit / args.window))
        print("\n".join(report(*traced, cap=cap)))
    return manifest["ok"] == args.items


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=600, help="requests per window")
    parser.add_argument("--window", type=float, default=60.0, help="window in seconds")
    parser.add_argument("--items", type=int, default=700)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--per-minute-only", action="store_true", help="no per-second enforcement")
    parser.add_argument("--cases", default=",".join(CASES), help="which runs, comma-separated")
    parser.add_argument("--loaded", action="store_true", help="two busy loops beside tagger")
    parser.add_argument("--against", type=Path, default=None, help="another version's code")
    parser.add_argument(
        "--trace", action="store_true", help="where each 429's requests bunched (tracereport.py)"
    )
    parser.add_argument("--trace-dir", type=Path, default=None, help="keep the traces here")
    parser.add_argument(
        "--server-nice", type=int, default=None, help="the fake server's niceness (e.g. -10)"
    )
    args = parser.parse_args()
    args.trace = args.trace or args.trace_dir is not None
    per_minute = round(args.limit * 60 / args.window)
    also = "" if args.per_minute_only else f", and {args.limit / args.window:g} per sliding 1 s"
    print(
        f"server limit: {args.limit} requests per sliding {args.window:g} s{also} "
        f"(= {per_minute}/min), {args.items} items, concurrency {args.concurrency}"
        + (", two busy loops beside tagger" if args.loaded else "")
    )
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.cases.split(","):
            label, times, extra = CASES[name]
            rpm = None if times is None else times * per_minute
            for code in [None, *([args.against] if args.against else [])]:
                results.append(one_run(label, rpm, args, Path(tmp), *extra, code=code))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
