"""Every shell and Python example in the README and the docs runs, against the fake server.

A page's fenced blocks run in order in one scratch directory (a copy of seeds/ and examples/),
so a later block reads what an earlier one wrote, as for a reader pasting them one by one.
`tagger` talks to the fake server through OPENAI_BASE_URL unless the block starts its own (the
standalone `python tests/fakeserver.py ... &`, started on a free port instead of the page's).
A plain `tagger ...` line runs in-process (typer's CliRunner, in the scratch directory and the
reader's environment: the same code without an interpreter's start-up each time); a line with
anything only a shell or a process of its own does (pipes, redirection, variables, globs,
`&&`, a `--ray` that starts its own Ray) runs in bash, as do Python blocks.
A block preceded by `<!-- not run: REASON -->` is not run (a real server, the test command
itself, benchmarks); ```text and ```toml blocks are output and files, not commands (a ```toml
block whose first line is `# NAME.toml` is written to NAME.toml for the blocks after it).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness import REPO_ROOT, TEST_KEY, StartFake, clean_env, taxonomy_ids

DOCS = REPO_ROOT / "docs"
# cli.md is generated from the code; its examples are tagger.cli.helpstyle.EXAMPLES.
PAGES = [REPO_ROOT / "README.md", *sorted(p for p in DOCS.glob("*.md") if p.name != "cli.md")]
RUNNABLE = {"sh", "python"}
NOT_COMMANDS = {"text", "toml", "json"}
FENCE = re.compile(
    r"(?:^<!-- not run: (?P<reason>[^>]+?) -->\n)?^```(?P<lang>\w*)\n(?P<body>.*?)^```",
    re.S | re.M,
)
# Already done in the checkout the tests run in: installing tagger, making its virtualenv.
SETUP = ("pip install", "python3 -m venv", ". .venv/bin/activate")
DOC_PORT = "8077"
# The reader's own step between commands, played by the test: every row marked reviewed.
PERSON_REVIEWS = re.compile(r'types y in the "reviewed" column of (\S+)$')
# What only a shell does (pipes, redirection, variables, globs, lists): such a line runs in bash.
NEEDS_A_SHELL = re.compile(r"[|&<>;$`*?~\\\[\]{}()]")
# A `--ray` line runs in a process of its own too (it starts a Ray for the run), unless the
# reader's RAY_ADDRESS is the session's Ray, which this process has joined already.
STARTS_RAY = re.compile(r"\s--ray\b")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    body: str
    not_run: str | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO_ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    return [
        Block(
            page,
            text.count("\n", 0, m.start("lang")) + 1,
            m.group("lang"),
            m.group("body"),
            m.group("reason"),
        )
        for m in FENCE.finditer(text)
    ]


ALL_BLOCKS = [block for page in PAGES for block in blocks(page)]


def test_every_block_says_what_it_is() -> None:
    unlabelled = [b.where for b in ALL_BLOCKS if b.lang not in RUNNABLE | NOT_COMMANDS]
    assert unlabelled == [], (
        "label each block: ```sh or ```python (run by tests/test_examples.py, or preceded by "
        "<!-- not run: REASON -->), ```text (output), ```toml (a file)"
    )
    assert any(b.lang == "sh" and b.not_run is None for b in ALL_BLOCKS)


def _command(line: str) -> str:
    """A shell line without its comment."""
    return re.sub(r"(^|\s)#.*$", "", line).strip()


def _commands(body: str) -> list[str]:
    """The block's command lines: continuation lines joined, comments dropped."""
    return [c for c in map(_command, body.replace("\\\n", " ").splitlines()) if c]


def test_examples_are_pasteable() -> None:
    for block in ALL_BLOCKS:
        if block.lang not in RUNNABLE:
            continue
        for line in _commands(block.body) if block.lang == "sh" else block.body.splitlines():
            assert "…" not in line and " ... " not in line, (block.where, line)
            assert not re.search(r"\[[A-Z_]+\]|<[a-z_]+>", line), (block.where, line)


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _mark_every_row_reviewed(sheet: Path) -> None:
    from openpyxl import load_workbook

    book = load_workbook(sheet)
    rows = book.worksheets[0]
    header = [cell.value for cell in rows[1]]
    column = header.index("reviewed") + 1
    for row in range(2, rows.max_row + 1):
        rows.cell(row=row, column=column, value="y")
    book.save(sheet)


class Reader:
    """Runs a page's blocks as a reader pasting them would, in one scratch directory."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.env = env
        self.background: list[subprocess.Popen[str]] = []

    def run(self, block: Block) -> None:
        if block.lang == "toml":
            name = re.match(r"# (\S+\.toml)\n", block.body)
            if name:
                (self.workdir / name.group(1)).write_text(block.body, encoding="utf-8")
        elif block.lang == "python":
            self._check(block, [sys.executable, "-c", block.body], block.body)
        elif block.lang == "sh":
            self._shell(block)

    def _shell(self, block: Block) -> None:
        body = block.body.replace(DOC_PORT, _free_port())
        for raw in body.replace("\\\n", " ").splitlines():
            person = PERSON_REVIEWS.search(raw)
            if person:
                _mark_every_row_reviewed(self.workdir / person.group(1))
            line = _command(raw)
            parts = [p.strip() for p in line.split("&&") if not p.strip().startswith(SETUP)]
            command = " && ".join(parts)
            if not command:
                continue
            if command.startswith("export "):
                for assignment in command.split()[1:]:
                    name, _, value = assignment.partition("=")
                    self.env[name] = value
            elif command.endswith("&"):
                self._start(block, command.removesuffix("&").strip())
            elif command.startswith("tagger ") and not self._needs_a_process(command):
                self._tagger(block, shlex.split(command)[1:], command)
            else:
                self._check(block, ["bash", "-c", command], command)

    def _needs_a_process(self, command: str) -> bool:
        if NEEDS_A_SHELL.search(command):
            return True
        return bool(STARTS_RAY.search(command)) and self.env.get("RAY_ADDRESS") != _joined_ray()

    def _tagger(self, block: Block, args: list[str], shown: str) -> None:
        """`tagger ARGS` in-process, in the scratch directory with exactly the reader's
        environment (a .env it reads is forgotten after, as when its process ends)."""
        from typer.testing import CliRunner

        from tagger.cli.app import app

        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.env)
        try:
            with contextlib.chdir(self.workdir):
                done = CliRunner().invoke(app, args)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        assert done.exit_code == 0, (
            f"{block.where}: `{shown}` exited {done.exit_code}\n{done.output}\n{done.exc_info}"
        )

    def _start(self, block: Block, command: str) -> None:
        process = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            cwd=self.workdir,
            env=self.env,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.background.append(process)
        assert process.stdout is not None
        ready = process.stdout.readline()
        assert ready.startswith("READY "), (block.where, command, ready)

    def _check(self, block: Block, args: list[str], shown: str) -> None:
        done = subprocess.run(
            args, cwd=self.workdir, env=self.env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, (
            f"{block.where}: `{shown}` exited {done.returncode}\n{done.stdout}\n{done.stderr}"
        )

    def stop(self) -> None:
        for process in self.background:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)


def _joined_ray() -> str | None:
    """The address of the Ray this process has joined (the session's), if any."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    return str(ray.get_runtime_context().gcs_address)


def _scratch(tmp_path: Path, fake_server: StartFake) -> Reader:
    fake = fake_server(areas=taxonomy_ids())
    fake.batches.auto_after = 10  # a batch takes a while: --detach leaves it running
    workdir = tmp_path / "work"
    workdir.mkdir()
    for name in ("seeds", "examples"):
        shutil.copytree(REPO_ROOT / name, workdir / name)
    shutil.copy(REPO_ROOT / ".env.example", workdir / ".env.example")
    (workdir / "tests").symlink_to(REPO_ROOT / "tests")
    (workdir / "docs").mkdir()
    env = clean_env()
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        OPENAI_BASE_URL=fake.base_url,
        OPENAI_API_KEY=TEST_KEY,
        TAGGER_BATCH_POLL="0.05",
        COLUMNS="100",
        # Outside a project tagger caches in the user's cache directory: this one, not theirs.
        XDG_CACHE_HOME=str(workdir / ".user-cache"),
    )
    return Reader(workdir, env)


RUN_PAGES = [p for p in PAGES if any(b.lang in RUNNABLE and not b.not_run for b in blocks(p))]


def _starts_ray(page: Path) -> bool:
    """Whether a block the page runs starts Ray (such a test runs beside the other Ray tests)."""
    return any(
        b.lang in RUNNABLE and not b.not_run and re.search(r"\s--ray\b|\bimport ray\b", b.body)
        for b in blocks(page)
    )


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, id=p.name, marks=[pytest.mark.ray] * _starts_ray(p)) for p in RUN_PAGES],
)
def test_examples_on_the_page_run(page: Path, fake_server: StartFake, tmp_path: Path) -> None:
    reader = _scratch(tmp_path, fake_server)
    try:
        for block in blocks(page):
            if block.not_run is None:
                reader.run(block)
    finally:
        reader.stop()


# The help examples, in an order where each finds what it reads (`tagger run` writes
# tagged.jsonl before `tagger export` reads it), with the few steps they need in between.
HELP_EXAMPLES_ORDER = [
    "tagger run seeds/ --prompt tag@v1 -o v1.jsonl",
    "",
    "run",
    "prompts",
    "export",
    '# a person corrects cells and types y in the "reviewed" column of review.xlsx',
    "gold",
    "gold import",
    "eval",
    "cp tagged.jsonl v2.jsonl",
    "compare",
    "tags",
    "sample",
    "models",
    "prices",
    "where",
    "cache",
    "cache stats",
    "tagger run seeds/ -o batched.jsonl --prompt tag-compact@v1 --batch --detach",
    "batch",
    "batch list",
    "batch status",
    "batch cancel",
    "tagger run seeds/ -o tagged.jsonl --ray",
    "merge",
    "cache clear",
]


def test_every_help_example_runs(fake_server: StartFake, tmp_path: Path, ray_cluster: str) -> None:
    from tagger.cli.helpstyle import EXAMPLES

    assert set(EXAMPLES) <= set(HELP_EXAMPLES_ORDER), "add the new example to HELP_EXAMPLES_ORDER"
    script = "\n".join(EXAMPLES.get(step, step) for step in HELP_EXAMPLES_ORDER)
    reader = _scratch(tmp_path, fake_server)
    # Its `--ray` example joins the session's Ray (RAY_ADDRESS, as a reader on a cluster would;
    # in this process, which has joined it):
    # starting a local one costs seconds, and docs/ray.md's example still starts its own.
    reader.env["RAY_ADDRESS"] = ray_cluster
    try:
        reader.run(Block(Path(__file__), 0, "sh", script + "\n", None))
    finally:
        reader.stop()
