"""The Python API against the fake server: tag(), atag(), Run, and the CLI's identical rows."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tagger
from tagger.errors import ConfigError, InputError
from tests.fakeserver import FakeLLM
from tests.harness import PROMPTS_DIR, SEEDS_DIR, TEST_KEY, TaggerCLI, seed_texts


def _options(fake: FakeLLM, tmp_path: Path, **more: Any) -> dict[str, Any]:
    return {
        "base_url": fake.base_url,
        "api_key": TEST_KEY,
        "cache_dir": tmp_path / "cache",
        "prompts_dir": PROMPTS_DIR,
        "progress": False,
        **more,
    }


def _chats(fake: FakeLLM) -> int:
    return sum(1 for r in list(fake.history) if r.path.endswith("/chat/completions"))


def test_tag_returns_one_row_per_abstract_in_order_and_a_rerun_sends_nothing(
    llm: FakeLLM, tmp_path: Path
) -> None:
    texts = seed_texts()
    run = tagger.tag(texts, **_options(llm, tmp_path))
    assert [row.abstract for row in run.rows] == texts
    assert all(isinstance(row, tagger.Row) and row.ok for row in run.rows)
    assert run.stats.ok == len(texts) == 57 and run.stats.requests == _chats(llm) == 57
    again = tagger.tag(texts, **_options(llm, tmp_path))
    assert _chats(llm) == 57 and again.stats.requests == 0 and again.stats.cached == 57
    assert [row.task_area for row in again.rows] == [row.task_area for row in run.rows]


def test_mappings_and_objects_carry_title_and_id(llm: FakeLLM, tmp_path: Path) -> None:
    @dataclass
    class Paper:
        abstract: str
        title: str
        id: str

    first, second = seed_texts()[:2]
    items: list[object] = [{"abstract": first, "id": "p1"}, Paper(second, "A title", "p2")]
    run = tagger.tag(items, **_options(llm, tmp_path))
    assert [(r.id, r.title, r.status) for r in run.rows] == [
        ("p1", None, "ok"),
        ("p2", "A title", "ok"),
    ]


def test_tag_inside_a_running_event_loop(llm: FakeLLM, tmp_path: Path) -> None:
    async def notebook_cell() -> tagger.Run:
        return tagger.tag(seed_texts()[:3], **_options(llm, tmp_path))

    run = asyncio.run(notebook_cell())
    assert [row.status for row in run.rows] == ["ok"] * 3

    async def awaited() -> tagger.Run:
        return await tagger.atag(seed_texts()[:4], **_options(llm, tmp_path))

    assert asyncio.run(awaited()).stats.cached == 3


def test_a_failed_abstract_is_a_row_not_an_exception(llm: FakeLLM, tmp_path: Path) -> None:
    texts = seed_texts()[:3]
    llm.script(["400"], match=texts[1][:80])
    run = tagger.tag(texts, **_options(llm, tmp_path))
    assert [row.status for row in run.rows] == ["ok", "error", "ok"]
    assert run.rows[1].error and "HTTP 400" in run.rows[1].error
    assert run.stats.failed == 1


def test_configuration_errors_are_typed(
    llm: FakeLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no .env here
    with pytest.raises(ConfigError, match="No API key"):
        tagger.tag(["An abstract."], progress=False, prompts_dir=PROMPTS_DIR)
    with pytest.raises(ConfigError, match="prompt"):
        tagger.tag(["An abstract."], **_options(llm, tmp_path, prompt="no-such@v9"))
    with pytest.raises(ConfigError, match="--concurrency"):
        tagger.tag(["An abstract."], **_options(llm, tmp_path, concurrency=0))
    with pytest.raises(TypeError, match="modle"):
        tagger.tag(["An abstract."], **_options(llm, tmp_path, modle="x"))
    with pytest.raises(InputError, match=r"<items>:2: no 'abstract'"):
        tagger.tag(["An abstract.", {"title": "only"}], **_options(llm, tmp_path))
    assert _chats(llm) == 0


def test_options_come_from_the_environment_and_dotenv_like_the_cli(
    llm: FakeLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(
        f"OPENAI_API_KEY={TEST_KEY}\nOPENAI_BASE_URL={llm.base_url}\nTAGGER_MODEL=from-dotenv\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("TAGGER_MODEL", "from-environment")
    run = tagger.tag(["An abstract."], progress=False, prompts_dir=PROMPTS_DIR)
    assert run.rows[0].model == "from-environment" and run.rows[0].ok
    import os

    assert "OPENAI_BASE_URL" not in os.environ  # read, not loaded: no process-wide change


def test_cli_and_api_write_the_same_rows(
    tagger_cli: TaggerCLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = tagger_cli.run()
    assert result.exit_code == 0, result.output
    fresh = tmp_path / "api-cache"  # a cache of its own: the rows say cached=false in both
    run = tagger.tag(SEEDS_DIR, **_options(tagger_cli.fake, tmp_path, cache_dir=fresh))
    out = run.write_jsonl(tmp_path / "api" / "tagged.jsonl")
    assert out.read_bytes() == tagger_cli.out.read_bytes()
    ours = json.loads(out.with_name("tagged.manifest.json").read_text(encoding="utf-8"))
    theirs = tagger_cli.manifest()
    timings = {"started_at", "finished_at", "duration", "output", "cache"}
    assert {k: v for k, v in ours.items() if k not in timings} == {
        k: v for k, v in theirs.items() if k not in timings
    }


def test_every_written_line_is_a_row_and_rows_are_built_as_validated(
    tagger_cli: TaggerCLI,
) -> None:
    source = tagger_cli.write_jsonl(
        "extra.jsonl", [{"abstract": seed_texts()[0], "doi": "10.1/x", "status": "draft"}]
    )
    result = tagger_cli.run(inputs=[source])
    assert result.exit_code == 0, result.output
    (line,) = tagger_cli.out.read_text(encoding="utf-8").splitlines()
    row = tagger.Row.model_validate_json(line)
    assert row.ok and row.doi == "10.1/x" and row.input_status == "draft"  # type: ignore[attr-defined]
    assert json.dumps(row.fields(), ensure_ascii=False) == line
    assert tagger.Row.of(row.fields()) == row
