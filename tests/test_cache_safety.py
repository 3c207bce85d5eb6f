"""A cache other people can write, or that cannot be used: nothing outside it is touched."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.harness import SEEDS_DIR, TaggerCLI, one_line


def _plant(cache_dir: Path, sql: str, *params: Any) -> None:
    """Change the cache database behind tagger's back, as another user could."""
    db = sqlite3.connect(cache_dir / "cache.db")
    try:
        db.execute(sql, params)
        db.commit()
    finally:
        db.close()


def _entries(cli: TaggerCLI) -> int:
    result = cli.invoke(["cache", "stats", "--cache-dir", cli.cache_dir, "--json"])
    assert result.exit_code == 0, result.output
    entries: int = json.loads(result.stdout)["entries"]
    return entries


def _precious(tmp: Path) -> tuple[Path, Path]:
    """Two files outside the cache, each alone in its folder (emptied folders get removed)."""
    first = tmp / "outside" / "a" / "precious.txt"
    second = tmp / "outside" / "b" / "precious.txt"
    for path in (first, second):
        path.parent.mkdir(parents=True)
        path.write_text("not tagger's to delete\n")
    return first, second


def test_planted_filenames_delete_nothing(tagger_cli: TaggerCLI) -> None:
    small = tagger_cli.small_input(4)
    assert tagger_cli.run(inputs=[small]).exit_code == 0
    absolute, relative = _precious(tagger_cli.tmp)
    cache_dir = tagger_cli.cache_dir

    def plant() -> None:
        # One row names a file by absolute path, the others climb out of the cache directory.
        _plant(cache_dir, "UPDATE Cache SET filename = ?", "../outside/b/precious.txt")
        _plant(cache_dir, "UPDATE Cache SET filename = ? WHERE rowid = 1", str(absolute))

    plant()
    # --refresh overwrites every entry: diskcache deletes the old row's file first.
    refreshed = tagger_cli.run("--refresh", inputs=[small])
    assert refreshed.exit_code == 0, refreshed.output
    assert len(tagger_cli.chats()) == 8
    assert absolute.is_file() and relative.is_file()

    plant()
    cleared = tagger_cli.invoke(["cache", "clear", "--yes", "--cache-dir", cache_dir])
    assert cleared.exit_code == 0, cleared.output
    assert "removed 4" in cleared.stdout
    assert absolute.is_file() and relative.is_file()
    assert _entries(tagger_cli) == 0


def test_planted_rows_are_misses_not_files_read(tagger_cli: TaggerCLI) -> None:
    small = tagger_cli.small_input(3)
    assert tagger_cli.run(inputs=[small]).exit_code == 0
    absolute, _ = _precious(tagger_cli.tmp)
    # A row claiming its value lives in a side file (diskcache's text mode) is a miss: asked
    # again and overwritten, and the named file is neither read nor deleted.
    _plant(
        tagger_cli.cache_dir, "UPDATE Cache SET mode = 3, value = NULL, filename = ?", str(absolute)
    )
    result = tagger_cli.run(inputs=[small])
    assert result.exit_code == 0, result.output
    assert len(tagger_cli.chats()) == 6
    assert all(r["status"] == "ok" and r["cached"] is False for r in tagger_cli.rows())
    assert absolute.read_text() == "not tagger's to delete\n"
    again = tagger_cli.run(inputs=[small])
    assert again.exit_code == 0 and len(tagger_cli.chats()) == 6  # the rewrite is good


def test_planted_settings_cannot_move_the_cache(tagger_cli: TaggerCLI) -> None:
    small = tagger_cli.small_input(3)
    assert tagger_cli.run(inputs=[small]).exit_code == 0
    elsewhere = tagger_cli.tmp / "elsewhere"
    elsewhere.mkdir()
    # diskcache setattr()s every Settings row on the cache and runs sqlite_* rows as PRAGMAs.
    _plant(tagger_cli.cache_dir, "INSERT INTO Settings VALUES ('_directory', ?)", str(elsewhere))
    _plant(tagger_cli.cache_dir, "INSERT INTO Settings VALUES ('disk_unheard_of', 1)")
    _plant(
        tagger_cli.cache_dir,
        "INSERT INTO Settings VALUES ('sqlite_temp_store_directory', ?)",
        f"'{elsewhere}'",
    )
    try:
        result = tagger_cli.run("--refresh", inputs=[small])
        assert result.exit_code == 0, result.output
        temp_dir = sqlite3.connect(":memory:").execute("PRAGMA temp_store_directory").fetchall()
    finally:
        sqlite3.connect(":memory:").execute("PRAGMA temp_store_directory = ''")  # process-wide
    assert list(elsewhere.iterdir()) == []
    assert temp_dir in ([], [("",)])
    assert _entries(tagger_cli) == 3


# --- a cache that fails to take writes during a run -----------------------------------------


def test_failing_cache_write_keeps_the_answer_and_stops_sending(
    tagger_cli: TaggerCLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tagger.pipeline.job as execute

    open_cache = execute.open_cache

    def full_disk_cache(config: Any) -> Any:
        cache = open_cache(config)
        # A real SQLite "database or disk is full": the file may not grow by a single page.
        sql = cache._cache._sql
        ((pages,),) = sql("PRAGMA page_count").fetchall()
        sql(f"PRAGMA max_page_count = {pages}")
        return cache

    monkeypatch.setattr(execute, "open_cache", full_disk_cache)
    result = tagger_cli.run("--concurrency", "1")
    assert result.exit_code == 1, result.output

    answered = [r for r in tagger_cli.chats() if r.status == 200]
    rows = tagger_cli.rows()
    assert len(rows) == 57
    # Every answer the server gave is in the output, though not all could be cached.
    assert sum(r["status"] == "ok" for r in rows) == len(answered)
    assert not [r for r in rows if str(r["error"]).startswith("failed")]
    # Sending stopped at the first failed write: with one request at a time, right after it.
    cached = _entries(tagger_cli)
    assert len(answered) == cached + 1, (len(answered), cached)
    not_run = [r for r in rows if r["status"] == "error"]
    assert len(not_run) == 57 - len(answered) > 0
    message = one_line(result.stderr)
    assert str(tagger_cli.cache_dir) in message and "database or disk is full" in message
    assert "Traceback" not in result.output
    assert tagger_cli.manifest()["status"] == "stopped"


# --- unusable caches are configuration errors ------------------------------------------------


def _broken_cache(kind: str, cli: TaggerCLI, make_read_only: Callable[[Path], None]) -> None:
    cache_dir = cli.cache_dir
    if kind == "a file":
        cache_dir.write_text("I am not a directory\n")
    elif kind == "not a database":
        cache_dir.mkdir()
        (cache_dir / "cache.db").write_text("this is no SQLite database\n" * 100)
    else:  # read-only, after a full run: the rerun would need no write at all
        assert cli.run().exit_code == 0
        make_read_only(cache_dir / "cache.db")


@pytest.mark.parametrize("kind", ["a file", "not a database", "read-only"])
@pytest.mark.parametrize("command", ["run", "stats", "clear"])
def test_unusable_cache_is_one_line_exit_2(
    tagger_cli: TaggerCLI, make_read_only: Callable[[Path], None], kind: str, command: str
) -> None:
    _broken_cache(kind, tagger_cli, make_read_only)
    sent = len(tagger_cli.chats())
    if command == "run":
        result = tagger_cli.run(out=tagger_cli.tmp / "again.jsonl")
    else:
        args = ["cache", command, "--cache-dir", tagger_cli.cache_dir]
        result = tagger_cli.invoke([*args, "--yes"] if command == "clear" else args)
    assert result.exit_code == 2, result.output
    # One error line (`run` may have drawn its progress line before opening the cache).
    lines = [line for line in result.stderr.splitlines() if not line.startswith("tagging ")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert str(tagger_cli.cache_dir) in lines[0]
    assert "Traceback" not in result.output
    assert len(tagger_cli.chats()) == sent  # nothing was asked
    assert not (tagger_cli.tmp / "again.jsonl").exists()


# --- looking at a cache does not create one; an empty --cache-dir is refused ------------------


def test_stats_and_dry_run_do_not_create_a_cache(tagger_cli: TaggerCLI) -> None:
    missing = tagger_cli.tmp / "no-cache-here"
    stats = tagger_cli.invoke(["cache", "stats", "--cache-dir", missing])
    assert stats.exit_code == 0, stats.output
    assert stats.stdout.startswith("0 answers")
    cleared = tagger_cli.invoke(["cache", "clear", "--yes", "--cache-dir", missing])
    assert cleared.exit_code == 0, cleared.output
    assert "removed 0" in cleared.stdout
    dry = tagger_cli.run("--dry-run", cache_dir=missing)
    assert dry.exit_code == 0, dry.output
    assert not missing.exists()


@pytest.mark.parametrize("command", ["run", "dry-run", "stats", "clear"])
def test_empty_cache_dir_is_refused(tagger_cli: TaggerCLI, command: str) -> None:
    if command in ("run", "dry-run"):
        extra = ["--dry-run"] if command == "dry-run" else []
        args: list[object] = ["run", SEEDS_DIR, "-o", tagger_cli.out, "--cache-dir", "", *extra]
        args += ["--base-url", tagger_cli.fake.base_url, "--api-key", "sk-test"]
    else:
        args = ["cache", command, "--cache-dir", "", *(["--yes"] if command == "clear" else [])]
    result = tagger_cli.invoke(args)
    assert result.exit_code == 2, result.output
    assert "--cache-dir" in result.output
    assert not tagger_cli.fake.history
    assert not (Path.cwd() / "cache.db").exists()
