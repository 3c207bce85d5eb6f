"""Shared helpers for the benchmarks: synthetic inputs, the fake server, child-process stats."""

from __future__ import annotations

import json
import os
import random
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the fake server lives with the tests (tests.fakeserver)

from tagger.files.abstracts import iter_abstracts, scan  # noqa: E402
from tagger.prompting.taxonomy import load_taxonomy  # noqa: E402
from tests.fakeserver import FakeLLM  # noqa: E402


def seed_texts() -> list[str]:
    """The 57 sample abstracts."""
    return [a.text for a in iter_abstracts(scan([ROOT / "seeds"]).files)]


def write_abstracts(path: Path, count: int, seed: int = 0, first: int = 0) -> Path:
    """A JSONL file of `count` distinct, realistic abstracts, numbered from `first`."""
    rng = random.Random(seed)
    texts = seed_texts()
    with path.open("w", encoding="utf-8") as out:
        for i in range(first, first + count):
            text = f"{rng.choice(texts)} Study number {i} extends these experiments."
            out.write(json.dumps({"id": f"b{i:06d}", "abstract": text}) + "\n")
    return path


def areas_arg() -> str:
    """The taxonomy ids, for the fake server's --areas."""
    return ",".join(load_taxonomy(ROOT / "prompts").ids)


@contextmanager
def fake_server(*args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A fake server in its own process (so it does not share our CPU); yields (proc, url)."""
    proc, url = FakeLLM.spawn(["--areas", areas_arg(), *args])
    try:
        yield proc, url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def renice(pid: int, nice: int) -> bool:
    """Give every thread of a process the niceness `nice` (a negative one needs privileges):
    a fake server standing for a remote provider is then not starved by the load put beside
    tagger. False if not allowed."""
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            os.setpriority(os.PRIO_PROCESS, int(task.name), nice)
    except (OSError, ValueError):
        return False
    return True


def server_stats(proc: subprocess.Popen[str]) -> dict[str, object]:
    """Stop the fake server and return the JSON stats line it prints on exit."""
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def run_args(source: Path, out: Path, url: str, *extra: str) -> list[str]:
    """`tagger run` arguments for a benchmark against the fake server."""
    return ["run", str(source), "-o", str(out), "--base-url", url, "--api-key", "sk-bench", *extra]


def run_tagger(
    args: list[str], code: Path | None = None, trace: Path | None = None
) -> tuple[float, float, int]:
    """Run `tagger` in a child process: (wall seconds, peak RSS MB of children, exit code).

    `code`: a folder holding another version's `tagger/` package (and `prompts/`) to run
    instead, from that folder (`python -m` puts the working folder first on the path).
    `trace`: write where each request's time went there (bench/tracehooks.py).
    """
    env = {**os.environ, "PYTHONPATH": str(code)} if code is not None else None
    start = ["-m", "tagger.cli.app"]
    if trace is not None:
        bench = str(Path(__file__).resolve().parent)
        start = [
            "-c",
            f"import sys; sys.path.insert(0, {bench!r}); import tracehooks; "
            f"tracehooks.install({str(trace)!r}); sys.argv[0] = 'tagger'; "
            "from tagger.cli.app import app; app()",
        ]
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *start, *args],
        cwd=code or ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if done.returncode not in (0, 1):
        print(done.stderr[-2000:], file=sys.stderr)
    return wall, peak_kb / 1024, done.returncode
