"""The test harness: repository paths, seed data, and the real `tagger` CLI run two ways.

In-process (`invoke`, `TaggerCLI`): typer's CliRunner, fast, with the fake server in the same
process. As a process (`run_cli`, `popen`, `subprocess_cmd`): `python -m tagger.cli.app`, for
what only a real process shows (signals, kills, pipes, locks, start-up imports).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from tests.fakeserver import FakeLLM, Recorded, first_user_message

REPO_ROOT = Path(__file__).resolve().parents[1]
PROMPTS_DIR = REPO_ROOT / "prompts"
SEEDS_DIR = REPO_ROOT / "seeds"
TEST_KEY = "sk-test-SECRET-9f8e7d6c5b4a"
FAKE_URL = "<fake>"  # TaggerCLI.run(base_url=...) default: the fake server's URL
# Tests wait on what they can observe (requests the fake saw, answers in the cache), never on
# the clock; this timeout only turns a hang into a failure, so it allows for a crawling machine.
SAFETY_TIMEOUT = 300.0

StartFake = Callable[..., FakeLLM]
"""The `fake_server` fixture: start a FakeLLM with these options, stopped after the test."""
StartTagger = Callable[..., subprocess.Popen[bytes]]
"""The `tagger_process` fixture: popen() whose process is killed after the test if it runs."""


def seed_texts() -> list[str]:
    """The seed abstracts in run order, read independently of tagger.files.abstracts."""
    texts: list[str] = []
    for path in sorted(SEEDS_DIR.glob("*.txt"), key=lambda p: p.name):
        blocks = path.read_text(encoding="utf-8").split("\n\n")
        paragraphs = [
            " ".join(line.strip() for line in b.splitlines() if line.strip()) for b in blocks
        ]
        texts.extend(p for p in paragraphs[1:] if p)  # the first paragraph is the header line
    return texts


def taxonomy_ids() -> tuple[str, ...]:
    """The task-area ids of the shipped taxonomy."""
    from tagger.prompting.taxonomy import load_taxonomy

    return load_taxonomy(PROMPTS_DIR).ids


def token_limit(request: Recorded) -> int:
    """The answer's token budget a request asked for (max_tokens, or a reasoning model's name)."""
    body = request.body or {}
    limit = body.get("max_tokens", body.get("max_completion_tokens"))
    assert isinstance(limit, int), body
    return limit


def one_line(text: str) -> str:
    """Collapse all whitespace (rich wraps long lines) for substring checks."""
    return " ".join(text.split())


# --- in-process ----------------------------------------------------------------------------


def invoke(args: Sequence[object], input: str | None = None) -> Result:
    """Run `tagger <args>` (stringified) in-process and return typer's Result."""
    from tagger.cli.app import app

    return CliRunner().invoke(app, [str(a) for a in args], input=input)


class TaggerCLI:
    """Runs `tagger ...` in-process and reads back what it wrote and what the fake received."""

    def __init__(self, fake: FakeLLM, tmp_path: Path) -> None:
        self.fake = fake
        self.tmp = tmp_path
        self.out = tmp_path / "out" / "tagged.jsonl"
        self.cache_dir = tmp_path / "cache"

    def invoke(self, args: Sequence[object], input: str | None = None) -> Result:
        """Invoke the CLI with args (stringified)."""
        return invoke(args, input)

    def run(
        self,
        *extra: object,
        inputs: Sequence[Path | str] = (SEEDS_DIR,),
        out: Path | None = None,
        key: str | None = TEST_KEY,
        base_url: str | None = FAKE_URL,
        cache_dir: Path | None = None,
        prompts_dir: Path = PROMPTS_DIR,
        timeout: float = 10.0,
    ) -> Result:
        """`tagger run` against the fake with an isolated output and cache."""
        args: list[object] = ["run", *inputs, "-o", out or self.out]
        if base_url is not None:
            args += ["--base-url", self.fake.base_url if base_url == FAKE_URL else base_url]
        if key is not None:
            args += ["--api-key", key]
        args += ["--cache-dir", cache_dir or self.cache_dir, "--prompts-dir", prompts_dir]
        args += ["--timeout", timeout, *extra]
        return self.invoke(args)

    def rows(self, out: Path | None = None) -> list[dict[str, Any]]:
        """The JSONL rows of an output file."""
        text = (out or self.out).read_text(encoding="utf-8")
        return [json.loads(line) for line in text.splitlines()]

    def manifest(self, out: Path | None = None) -> dict[str, Any]:
        """The manifest written beside an output file."""
        path = out or self.out
        stem = path.name.removesuffix(".jsonl")
        data: dict[str, Any] = json.loads(path.with_name(stem + ".manifest.json").read_text())
        return data

    def chats(self) -> list[Recorded]:
        """Chat-completion requests the fake received, in arrival order."""
        return [r for r in list(self.fake.history) if r.path.endswith("/chat/completions")]

    def chats_for(self, snippet: str) -> list[Recorded]:
        """Chat requests whose first user message contains snippet (one abstract's requests)."""
        return [r for r in self.chats() if snippet in first_user_message(r.body or {})]

    def write_jsonl(self, name: str, records: Sequence[dict[str, Any]]) -> Path:
        """Write records as a JSONL input file under tmp/inputs/."""
        path = self.tmp / "inputs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        return path

    def small_input(self, count: int = 3) -> Path:
        """A JSONL input with the first `count` seed abstracts."""
        return self.write_jsonl("small.jsonl", [{"abstract": t} for t in seed_texts()[:count]])

    def expected_answer(
        self, request: Recorded, enum: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """The fake's deterministic answer to a request, validated as tagger validates it."""
        from tagger.prompting.schema import build_answer_model
        from tagger.prompting.taxonomy import load_synonyms, load_taxonomy

        model = build_answer_model(load_taxonomy(PROMPTS_DIR), load_synonyms(PROMPTS_DIR))
        raw = self.fake.answer_for(first_user_message(request.body or {}), enum)
        answer: dict[str, Any] = model.model_validate(raw).model_dump(mode="json")
        return answer


# --- as a process --------------------------------------------------------------------------


def run_args(
    inputs: Path | str, out: Path | str, url: str, cache: Path, *extra: str | int | float
) -> list[str]:
    """Arguments of `tagger run` against the fake server."""
    return [
        "run",
        str(inputs),
        "-o",
        str(out),
        "--base-url",
        url,
        "--api-key",
        "sk-test",
        "--cache-dir",
        str(cache),
        "--prompts-dir",
        str(PROMPTS_DIR),
        *(str(e) for e in extra),
    ]


def subprocess_cmd(*args: str) -> list[str]:
    """The command line of `tagger <args>` as a process."""
    return [sys.executable, "-m", "tagger.cli.app", *args]


def clean_env() -> dict[str, str]:
    """The environment without OPENAI_*/TAGGER_* settings that could change a run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TAGGER_"))}
    env["PYTHONUNBUFFERED"] = "1"
    env["COLUMNS"] = "200"
    return env


def python_json(
    code: str, *args: str, cwd: Path = REPO_ROOT, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run `code` in a fresh interpreter (the clean environment unless `env`); it must exit 0,
    and its last line of output is JSON: that object."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=clean_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def popen(
    args: Sequence[str], cwd: Path, log: Path | None = None, **options: Any
) -> subprocess.Popen[bytes]:
    """Start `tagger <args>` as a process in the clean environment (the caller ends it).

    Its stdout and stderr go to `log` (a pipe could fill up), or where `options` say
    (stdin/stdout/stderr=PIPE ...): the `tagger_process` fixture kills what a test leaves.
    """
    if log is None:
        return subprocess.Popen(subprocess_cmd(*args), cwd=cwd, env=clean_env(), **options)
    with log.open("ab") as fh:
        return subprocess.Popen(
            subprocess_cmd(*args),
            cwd=cwd,
            env=clean_env(),
            stdout=fh,
            stderr=subprocess.STDOUT,
            **options,
        )


def run_cli(
    args: Sequence[str], cwd: Path, timeout: float | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run `tagger` to completion; stderr is merged into stdout."""
    return subprocess.run(
        subprocess_cmd(*args),
        cwd=cwd,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=timeout or SAFETY_TIMEOUT,
    )


def wait_until(
    condition: Callable[[], bool],
    what: str,
    proc: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
    timeout: float = SAFETY_TIMEOUT,
) -> None:
    """Poll until condition() holds; fail if proc exits first, or after `timeout` (a hang)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log is not None else ""
            raise AssertionError(f"tagger exited ({proc.returncode}) before {what}\n{tail}")
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for {what} after {timeout:.0f} s")
        time.sleep(0.01)


def schema_response_format(areas: list[str]) -> dict[str, Any]:
    """A strict json_schema response_format for answers whose task area is one of `areas`."""
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "annotation",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {
                    "summary": {"type": "string"},
                    "task_area": {"type": "string", "enum": areas},
                    "method_tags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["summary", "task_area", "method_tags"],
                "additionalProperties": False,
            },
        },
    }
