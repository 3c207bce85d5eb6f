"""The answer cache through the CLI: reruns, --no-cache, --refresh, prompt edits, `cache`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.harness import PROMPTS_DIR, TaggerCLI, seed_texts


def _without_cached(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return [{k: v for k, v in row.items() if k != "cached"} for row in rows]


def _entries(cli: TaggerCLI, cache_dir: Path | None = None) -> int:
    result = cli.invoke(["cache", "stats", "--cache-dir", cache_dir or cli.cache_dir, "--json"])
    assert result.exit_code == 0, result.output
    entries: int = json.loads(result.stdout)["entries"]
    return entries


def test_rerun_is_served_from_cache(tagger_cli: TaggerCLI) -> None:
    first = tagger_cli.run()
    assert first.exit_code == 0, first.output
    first_rows = tagger_cli.rows()
    sent = len(tagger_cli.chats())
    assert sent == 57
    assert all(r["cached"] is False for r in first_rows)

    second = tagger_cli.run()
    assert second.exit_code == 0, second.output
    assert len(tagger_cli.chats()) == sent  # zero requests
    second_rows = tagger_cli.rows()
    assert all(r["cached"] is True for r in second_rows)
    assert _without_cached(second_rows) == _without_cached(first_rows)
    manifest = tagger_cli.manifest()
    assert (manifest["cached"], manifest["requests"], manifest["ok"]) == (57, 0, 57)
    assert manifest["status"] == "complete"


def test_no_cache_neither_reads_nor_writes(tagger_cli: TaggerCLI) -> None:
    assert tagger_cli.run().exit_code == 0
    assert len(tagger_cli.chats()) == 57
    result = tagger_cli.run("--no-cache")
    assert result.exit_code == 0, result.output
    assert len(tagger_cli.chats()) == 114  # sent again
    assert all(r["cached"] is False for r in tagger_cli.rows())
    assert tagger_cli.manifest()["cache"] is None

    fresh = tagger_cli.tmp / "fresh-cache"
    assert tagger_cli.run("--no-cache", cache_dir=fresh).exit_code == 0
    assert not fresh.exists() or _entries(tagger_cli, fresh) == 0


def test_refresh_asks_again_and_overwrites(tagger_cli: TaggerCLI) -> None:
    fake = tagger_cli.fake
    small = tagger_cli.small_input(4)
    # json_object mode: the fake answers from fake.areas, so a changed answer is visible.
    assert tagger_cli.run("--mode", "json_object", inputs=[small]).exit_code == 0
    before = tagger_cli.rows()
    assert len(fake.chats()) == 4

    fake.areas = ["other"]
    result = tagger_cli.run("--mode", "json_object", "--refresh", inputs=[small])
    assert result.exit_code == 0, result.output
    assert len(fake.chats()) == 8  # asked again
    refreshed = tagger_cli.rows()
    assert all(r["cached"] is False and r["task_area"] == "other" for r in refreshed)
    assert [r["task_area"] for r in before] != ["other"] * 4  # the refresh changed something

    again = tagger_cli.run("--mode", "json_object", inputs=[small])
    assert again.exit_code == 0, again.output
    assert len(fake.chats()) == 8  # from the cache ...
    rows = tagger_cli.rows()
    assert all(r["cached"] is True for r in rows)
    assert _without_cached(rows) == _without_cached(refreshed)  # ... holding the new answers
    assert _entries(tagger_cli) == 4


def test_edited_prompt_misses_cache(tagger_cli: TaggerCLI) -> None:
    small = tagger_cli.small_input(3)
    pinned = ("--prompt", "tag@v2")  # the version edited below, whatever the newest is
    assert tagger_cli.run(*pinned, inputs=[small]).exit_code == 0
    original_hash = tagger_cli.rows()[0]["prompt_hash"]
    assert len(tagger_cli.chats()) == 3

    edited = tagger_cli.tmp / "prompts"
    shutil.copytree(PROMPTS_DIR, edited)
    v2 = edited / "tag" / "v2.toml"
    text = v2.read_text(encoding="utf-8")
    assert "careful research librarian" in text
    v2.write_text(text.replace("careful research librarian", "meticulous research librarian"))

    result = tagger_cli.run(*pinned, inputs=[small], prompts_dir=edited)
    assert result.exit_code == 0, result.output
    assert len(tagger_cli.chats()) == 6  # cache miss for every abstract
    rows = tagger_cli.rows()
    assert all(r["cached"] is False and r["status"] == "ok" for r in rows)
    assert {r["prompt_hash"] for r in rows} != {original_hash}
    assert tagger_cli.manifest()["prompt_hash"] != original_hash
    system = (tagger_cli.chats()[-1].body or {})["messages"][0]["content"]
    assert "meticulous research librarian" in system


@pytest.mark.parametrize("cache", ["cache", "no-cache"])
def test_duplicate_abstracts_sent_once(tagger_cli: TaggerCLI, cache: str) -> None:
    text, other = seed_texts()[:2]
    path = tagger_cli.write_jsonl(
        "dupes.jsonl",
        [
            {"abstract": text},
            {"abstract": other},
            {"abstract": text},
            {"abstract": "  " + text.replace(" ", "  ")},  # the same, whitespace aside
        ],
    )
    extra = ["--no-cache"] if cache == "no-cache" else []
    result = tagger_cli.run(*extra, inputs=[path])
    assert result.exit_code == 0, result.output
    assert len(tagger_cli.chats()) == 2
    assert len(tagger_cli.chats_for(text[:80])) == 1
    rows = tagger_cli.rows()
    assert [r["index"] for r in rows] == [0, 1, 2, 3]
    assert all(r["status"] == "ok" for r in rows)
    assert rows[0]["id"] == rows[2]["id"] == rows[3]["id"] != rows[1]["id"]
    answer = ("summary", "task_area", "method_tags")
    assert [rows[0][k] for k in answer] == [rows[2][k] for k in answer]
    assert [rows[0][k] for k in answer] == [rows[3][k] for k in answer]
    assert tagger_cli.manifest()["unique_abstracts"] == 2


def test_cache_stats_and_clear(tagger_cli: TaggerCLI) -> None:
    assert tagger_cli.run().exit_code == 0
    stats = tagger_cli.invoke(["cache", "stats", "--cache-dir", tagger_cli.cache_dir])
    assert stats.exit_code == 0, stats.output
    assert stats.stdout.startswith("57 answers")
    assert _entries(tagger_cli) == 57

    refused = tagger_cli.invoke(["cache", "clear", "--cache-dir", tagger_cli.cache_dir], "n\n")
    assert "nothing cleared" in refused.output
    assert _entries(tagger_cli) == 57

    cleared = tagger_cli.invoke(["cache", "clear", "--yes", "--cache-dir", tagger_cli.cache_dir])
    assert cleared.exit_code == 0, cleared.output
    assert "removed 57" in cleared.stdout
    assert _entries(tagger_cli) == 0

    rerun = tagger_cli.run()
    assert rerun.exit_code == 0, rerun.output
    assert len(tagger_cli.chats()) == 114  # everything asked again
    assert _entries(tagger_cli) == 57


def test_looking_at_an_empty_cache_folder_creates_no_database(tagger_cli: TaggerCLI) -> None:
    folder = tagger_cli.tmp / "empty-cache"
    folder.mkdir()
    where = ["--cache-dir", folder]
    stats = tagger_cli.invoke(["cache", "stats", "--json", *where])
    assert stats.exit_code == 0, stats.output
    assert json.loads(stats.stdout)["entries"] == 0
    assert tagger_cli.invoke(["cache", "clear", "--yes", *where]).exit_code == 0
    dry = tagger_cli.run("--dry-run", *where, inputs=[tagger_cli.small_input(2)])
    assert dry.exit_code == 0, dry.output
    assert list(folder.iterdir()) == []
    # A file where the cache should be is still an error, not "0 answers".
    blocked = tagger_cli.tmp / "a-file"
    blocked.write_text("x")
    assert tagger_cli.invoke(["cache", "stats", "--cache-dir", blocked]).exit_code == 2
