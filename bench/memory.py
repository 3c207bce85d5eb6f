"""Peak memory of a large run: 100,000 abstracts streamed (goal: peak RSS < 300 MB).

    python bench/memory.py [--items 100000] [--concurrency 64]

Runs `tagger run` in a child process against the fake server (no latency) and reports the
child's peak RSS next to the baseline of `tagger --version` (interpreter and imports).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from common import fake_server, run_args, run_tagger, write_abstracts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = write_abstracts(Path(tmp) / "in.jsonl", args.items)
        _, baseline_mb, _ = run_tagger(["--version"])
        with fake_server() as (_proc, url):
            out = Path(tmp) / "out.jsonl"
            wall, peak_mb, code = run_tagger(
                run_args(
                    source,
                    out,
                    url,
                    "--cache-dir",
                    str(Path(tmp) / "cache"),
                    "--concurrency",
                    str(args.concurrency),
                )
            )
        manifest = json.loads(out.with_name("out.manifest.json").read_text())
        print(f"baseline `tagger --version`: peak RSS {baseline_mb:.0f} MB")
        print(
            f"{args.items} abstracts: exit {code}, {manifest['ok']} ok, {wall:.0f} s, "
            f"{args.items / wall:.0f} items/s, peak RSS {peak_mb:.0f} MB (goal < 300 MB)"
        )
        return 0 if peak_mb < 300 and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
