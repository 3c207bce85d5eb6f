"""Shared pytest fixtures: fake servers, the isolated CLI, read-only paths.

Plain helpers (paths, seed data, the CLI harness) live in tests/harness.py: import them there.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakeserver import FakeLLM
from tests.harness import StartFake, StartTagger, TaggerCLI, popen, taxonomy_ids

_ENV_NAMES = (
    "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID",
    "TAGGER_PROMPTS_DIR", "TAGGER_CACHE_DIR", "TAGGER_MODEL", "TAGGER_PROMPT", "TAGGER_MODE",
    "TAGGER_CONCURRENCY", "TAGGER_RPM", "TAGGER_TPM", "TAGGER_TIMEOUT", "TAGGER_MAX_ATTEMPTS",
    "TAGGER_MAX_COST", "TAGGER_MAX_REQUESTS", "TAGGER_PRICES", "TAGGER_HTTP",
    "TAGGER_BATCH_MAX_BYTES", "TAGGER_BATCH_MAX_REQUESTS", "TAGGER_BATCH_POLL",
    "COLUMNS", "LINES",
)  # fmt: skip


# --- fake servers: one factory, and the usual servers built with it --------------------------


@pytest.fixture(autouse=True)
def outside_the_checkout(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Every test starts in an empty folder of its own, without the OPENAI_*/TAGGER_* variables
    of the shell that runs the suite: a `.env`, a `cache/` or settings the developer keeps in the
    checkout or the shell are never read, written or sent to by a test that names none."""
    for name in [n for n in os.environ if n.startswith(("OPENAI_", "TAGGER_"))]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))  # beside tmp_path, which tests list


@pytest.fixture(autouse=True)
def user_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The user's cache directory (platformdirs reads XDG_CACHE_HOME), one per test: a run
    outside any project caches there, never in the real home, and no test sees another's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    return tmp_path / "user-cache"


@pytest.fixture
def fake_server() -> Iterator[StartFake]:
    """Start fake servers: fake_server(**FakeLLM options) -> a started FakeLLM.

    Every server it started is stopped after the test, whatever the test did with it.
    """
    started: list[FakeLLM] = []

    def start(**options: Any) -> FakeLLM:
        server = FakeLLM(**options).start()
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.stop()


@pytest.fixture
def fake_llm(fake_server: StartFake) -> FakeLLM:
    """A fake server with FakeLLM's defaults (every task area is "other")."""
    return fake_server()


@pytest.fixture
def llm(fake_server: StartFake) -> FakeLLM:
    """A fake server answering with the shipped taxonomy's task areas."""
    return fake_server(areas=taxonomy_ids())


@pytest.fixture
def tagger_fake(llm: FakeLLM) -> FakeLLM:
    """The fake `tagger_cli` talks to: `llm`, unless a test module overrides this fixture."""
    return llm


# --- the CLI in-process, isolated from the environment ---------------------------------------


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
def tagger_cli(cli_env: Path, tagger_fake: FakeLLM, tmp_path: Path) -> TaggerCLI:
    """The CLI harness in an isolated environment, pointed at tagger_fake."""
    return TaggerCLI(tagger_fake, tmp_path)


# --- the CLI as a process ------------------------------------------------------------------


@pytest.fixture
def tagger_process() -> Iterator[StartTagger]:
    """Start `tagger` processes (harness.popen's arguments); any still running after the test is
    killed, so a failed test leaves no run behind."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: Any, **options: Any) -> subprocess.Popen[bytes]:
        proc = popen(*args, **options)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


# --- Ray: one local Ray for the whole session, on one xdist worker, never the user's ------

# Every test that starts or joins Ray runs on the same xdist worker (`--dist loadgroup`), one at
# a time: tests there find the tagging actors by their process title, and two Rays side by side
# on 2 cores starve each other.
RAY_GROUP = "ray"


def pytest_configure(config: pytest.Config) -> None:
    """Keep the suite's Rays apart from the user's (in this process and its children):
    - Ray's files in a folder of this run's own (RAY_TMPDIR), where no `ray start` wrote the
      `ray_current_cluster` that `ray.init()` would join;
    - RAY_ADDRESS=local: a Ray started with no address (`tagger run --ray`) starts its own
      rather than join the user's cluster or RAY_ADDRESS (an address given explicitly, such as
      `--ray-address` or `ray_cluster`'s, still wins);
    - a token of this run's own (RAY_AUTH_TOKEN): a local Ray writes none into ~/.ray, and a
      cluster of the user's would refuse it."""
    wanted: dict[str, str | None] = {
        # Short: Ray's socket paths under it must stay within the 107 bytes a Unix socket takes
        # (so /tmp on macOS, as Ray's own default, not its long per-user TMPDIR).
        "RAY_TMPDIR": tempfile.mkdtemp(prefix="tgr-ray-", dir=_SHORT_TMP.get(sys.platform)),
        "RAY_ADDRESS": "local",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_AUTH_TOKEN_PATH": None,
    }
    config.stash[_RAY_ENV] = {name: os.environ.get(name) for name in wanted}
    _set_env(wanted)


def pytest_unconfigure(config: pytest.Config) -> None:
    saved = config.stash.get(_RAY_ENV, None)
    if saved is not None:
        shutil.rmtree(os.environ["RAY_TMPDIR"], ignore_errors=True)
        _set_env(saved)


def _set_env(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


_RAY_ENV = pytest.StashKey[dict[str, str | None]]()
_SHORT_TMP = {"darwin": "/tmp"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put every test that starts or joins Ray (the `ray` marker, or the `ray_cluster` fixture)
    in one xdist group: under `pytest -n 2 --dist loadgroup` they share one worker and its Ray."""
    for item in items:
        if item.get_closest_marker("ray") or "ray_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(RAY_GROUP))


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """One local Ray (2 CPUs) for every test that needs one (starting one costs ~4 s, stopping
    it ~1.5 s); its GCS address, for drivers started as processes (`--ray-address`,
    RAY_ADDRESS). Always a Ray of its own (`address="local"`), never a cluster the user started.
    Skips the test when Ray is not installed."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        from tagger.ray.cluster import WORKER_NICENESS

        # Its workers at the niceness a Ray started by tagger gives them (tagger.ray.cluster):
        # at Ray's 15, beside a loaded machine's work, the actors wake late and bunch requests.
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            _system_config={"worker_niceness": WORKER_NICENESS},
        )
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        if started:
            ray.shutdown()


# --- Read-only files and directories, also when the tests run as root (chmod does not bind
# --- root: then `chattr +i`), undone at teardown so tmp_path can be removed.


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
