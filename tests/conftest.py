"""Shared pytest fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakeserver import FakeLLM


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """A started fake OpenAI-compatible server, stopped after the test."""
    with FakeLLM() as server:
        yield server


# --- End-to-end CLI harness (test_run, test_llm_faults, test_cache_cli, test_secrets,
# --- test_bad_inputs): the real `tagger` CLI through typer's CliRunner against FakeLLM.
import json  # noqa: E402
import os  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import Any  # noqa: E402

from typer.testing import CliRunner, Result  # noqa: E402

from tests.fakeserver import Recorded, first_user_message  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
PROMPTS_DIR = REPO_ROOT / "prompts"
SEEDS_DIR = REPO_ROOT / "seeds"
TEST_KEY = "sk-test-SECRET-9f8e7d6c5b4a"
FAKE_URL = "<fake>"  # TaggerCLI.run(base_url=...) default: the fake server's URL
_ENV_NAMES = (
    "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID",
    "TAGGER_PROMPTS_DIR", "TAGGER_CACHE_DIR", "TAGGER_MODEL", "TAGGER_PROMPT", "TAGGER_MODE",
    "TAGGER_CONCURRENCY", "TAGGER_RPM", "TAGGER_TPM", "TAGGER_TIMEOUT", "TAGGER_MAX_ATTEMPTS",
    "TAGGER_MAX_COST", "TAGGER_MAX_REQUESTS", "TAGGER_PRICES", "TAGGER_HTTP",
    "COLUMNS", "LINES",
)  # fmt: skip


def seed_texts() -> list[str]:
    """The seed abstracts in run order, read independently of tagger.inputs."""
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


def one_line(text: str) -> str:
    """Collapse all whitespace (rich wraps long lines) for substring checks."""
    return " ".join(text.split())


class TaggerCLI:
    """Runs `tagger ...` in-process and reads back what it wrote and what the fake received."""

    def __init__(self, fake: FakeLLM, tmp_path: Path) -> None:
        self.fake = fake
        self.tmp = tmp_path
        self.out = tmp_path / "out" / "tagged.jsonl"
        self.cache_dir = tmp_path / "cache"
        self.runner = CliRunner()

    def invoke(self, args: Sequence[object], input: str | None = None) -> Result:
        """Invoke the CLI with args (stringified)."""
        from tagger.cli.app import app

        return self.runner.invoke(app, [str(a) for a in args], input=input)

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


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No OPENAI_*/TAGGER_* variables and cwd in an empty tmp dir (so no .env is read).

    Every variable is set then deleted so monkeypatch restores it at teardown even if
    the CLI's load_dotenv() sets it meanwhile.
    """
    names = {n for n in os.environ if n.startswith(("OPENAI_", "TAGGER_"))} | set(_ENV_NAMES)
    for name in sorted(names):
        monkeypatch.setenv(name, "x")
        monkeypatch.delenv(name)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


@pytest.fixture
def tagger_fake() -> Iterator[FakeLLM]:
    """A fake server answering with the shipped taxonomy's task areas."""
    with FakeLLM(areas=taxonomy_ids()) as server:
        yield server


@pytest.fixture
def tagger_cli(cli_env: Path, tagger_fake: FakeLLM, tmp_path: Path) -> TaggerCLI:
    """The CLI harness in an isolated environment, pointed at tagger_fake."""
    return TaggerCLI(tagger_fake, tmp_path)


# --- Read-only files and directories, also when the tests run as root (chmod does not bind
# --- root: then `chattr +i`), undone at teardown so tmp_path can be removed.
import subprocess  # noqa: E402
from collections.abc import Callable  # noqa: E402


def _writable(path: Path) -> bool:
    """Whether this process can really write path (a file: open it; a directory: add a file)."""
    try:
        if path.is_dir():
            probe = path / ".write-probe"
            probe.touch()
            probe.unlink()
        else:
            with path.open("a"):
                pass
    except OSError:
        return False
    return True


@pytest.fixture
def make_read_only() -> Iterator[Callable[[Path], None]]:
    """A function making a path read-only for this process; skips the test if it cannot."""
    undo: list[Callable[[], object]] = []

    def apply(path: Path) -> None:
        mode = path.stat().st_mode
        path.chmod(mode & ~0o222)
        undo.append(lambda: path.chmod(mode))
        if not _writable(path):
            return
        try:
            done = subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode
        except FileNotFoundError:
            done = 1
        if done == 0:
            undo.append(lambda: subprocess.run(["chattr", "-i", str(path)], capture_output=True))
        if done != 0 or _writable(path):
            pytest.skip("cannot make a path read-only here (root without chattr)")

    yield apply
    for step in reversed(undo):
        step()
