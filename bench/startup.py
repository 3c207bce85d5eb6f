"""Start-up: `tagger --help`, `tagger --version` and a refused placeholder key (goal < 0.3 s).

    python bench/startup.py [--runs 15]

Each command runs --runs times as its own process, after `compileall` has written the bytecode
(a fresh checkout compiles on its first run only); the best and median wall times and the best
CPU time (user + system of the child) are printed. The baseline is `python -c pass`, the
interpreter's own start-up on the same machine in the same minute.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(command: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """Wall and CPU seconds of one run of command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, env=env, cwd=cwd, capture_output=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    compileall.compile_dir(ROOT / "tagger", quiet=1)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TAGGER_"))}
    tagger = [sys.executable, "-m", "tagger.cli.app"]
    commands = {
        "python -c pass (baseline)": ([sys.executable, "-c", "pass"], env),
        "tagger --version": ([*tagger, "--version"], env),
        "tagger --help": ([*tagger, "--help"], env),
        "tagger run seeds/ with key sk-...": (
            [*tagger, "run", str(ROOT / "seeds")],
            {**env, "OPENAI_API_KEY": "sk-..."},
        ),
    }
    with tempfile.TemporaryDirectory() as cwd:
        for name, (command, command_env) in commands.items():
            runs = [timed(command, command_env, cwd) for _ in range(args.runs)]
            walls = [wall for wall, _ in runs]
            print(
                f"{name:36} best {min(walls):.3f} s  median {statistics.median(walls):.3f} s  "
                f"CPU {min(cpu for _, cpu in runs):.3f} s"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
