"""Peak memory of a large run: 100,000 abstracts streamed (goal: peak RSS < 300 MB).

    python bench/memory.py [--items 100000] [--concurrency 64]
    python bench/memory.py --cascade [--baseline main] [--items 100000]

Runs `tagger run` in a child process against the fake server (no latency) and reports the
child's peak RSS next to the baseline of `tagger --version` (interpreter and imports).
--cascade runs `--cascade gpt-5.4-nano,gpt-5.4-mini --target 0.95` against a fake that knows
both models (the cheap one right on ~85%), each stage into its own cache; --baseline REV
runs the same cascade with the `tagger/` package of a git revision (git archive), on the same
inputs, in the same run. Each measurement is its own process: a peak is never carried over.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from common import ROOT, fake_server, run_args, write_abstracts

CHEAP, STRONG = "gpt-5.4-nano", "gpt-5.4-mini"
_MEASURE = (
    "import resource, subprocess, sys\n"
    "done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "sys.stderr.write(done.stderr.decode(errors='replace')[-2000:] if done.returncode > 1 "
    "else '')\n"
    "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)


def peak_of(args: list[str], code: Path | None = None) -> tuple[int, float]:
    """Run `tagger ARGS` (from `code`'s package if given): (exit code, its peak RSS in MB)."""
    command = [sys.executable, "-m", "tagger.cli.app", *args]
    env = None
    if code is not None:
        import os

        env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *command],
        cwd=code or ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    if done.stderr:
        print(done.stderr, file=sys.stderr)
    code_text, peak_kb = done.stdout.split()
    return int(code_text), int(peak_kb) / 1024


def checkout(revision: str, into: Path) -> Path:
    """The `tagger/` and `prompts/` of a git revision, in a folder of their own."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "tagger", "prompts"],
        check=True,
        capture_output=True,
    ).stdout
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--cascade", action="store_true", help="a cascade's peak")
    parser.add_argument("--baseline", metavar="REV", help="with --cascade: also run REV's")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = write_abstracts(Path(tmp) / "in.jsonl", args.items)
        _, baseline_mb = peak_of(["--version"])
        print(f"baseline `tagger --version`: peak RSS {baseline_mb:.0f} MB")
        extra = ["--skilled", f"{CHEAP},{STRONG}"] if args.cascade else []
        versions: list[tuple[str, Path | None]] = [("this tree", None)]
        if args.baseline:
            versions.insert(0, (args.baseline, checkout(args.baseline, Path(tmp) / "base")))
        worst = 0.0
        with fake_server(*extra) as (_proc, url):
            for name, code in versions:
                out = Path(tmp) / f"out-{len(name)}-{id(code)}.jsonl"
                options = ["--cache-dir", str(Path(tmp) / f"cache-{id(code)}")]
                options += ["--concurrency", str(args.concurrency)]
                if args.cascade:
                    options += ["--cascade", f"{CHEAP},{STRONG}", "--target", "0.95"]
                code_exit, peak_mb = peak_of(run_args(source, out, url, *options), code)
                manifest = json.loads(out.with_name(out.stem + ".manifest.json").read_text())
                shown = f"{args.items} abstracts ({name}): exit {code_exit}, {manifest['ok']} ok"
                if args.cascade:
                    section = manifest["cascade"]
                    shown += f", {section['strong_answered_share']:.1%} to the strong model"
                print(f"{shown}, peak RSS {peak_mb:.0f} MB", flush=True)
                worst = peak_mb if code is None else worst
        if args.cascade:
            return 0
        print("goal < 300 MB")
        return 0 if worst < 300 else 1


if __name__ == "__main__":
    sys.exit(main())
