"""The Python API against the fake server: tag(), atag(), Run, and the CLI's identical rows."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tagger
from tagger.errors import ConfigError, InputError, UsageError
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
    with pytest.raises(ConfigError, match="No API key") as no_key:
        tagger.tag(["An abstract."], progress=False, prompts_dir=PROMPTS_DIR)
    assert str(no_key.value).endswith("or pass api_key=")  # the keyword, not `--api-key`
    with pytest.raises(ConfigError, match="prompt"):
        tagger.tag(["An abstract."], **_options(llm, tmp_path, prompt="no-such@v9"))
    with pytest.raises(ConfigError, match="concurrency=: "):
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


def test_write_jsonl_says_where_the_rows_are_when_it_keeps_a_better_file(
    llm: FakeLLM, tmp_path: Path
) -> None:
    texts = seed_texts()[:4]
    whole = tagger.tag(texts, **_options(llm, tmp_path))
    out = whole.write_jsonl(tmp_path / "tagged.jsonl")
    assert out == tmp_path / "tagged.jsonl"
    part = tagger.tag(texts, **_options(llm, tmp_path, cache_dir=tmp_path / "c2", max_requests=2))
    assert part.manifest["status"] != "complete" and part.stats.ok == 2
    kept = part.write_jsonl(out)
    assert kept != out and kept.name == "tagged.jsonl.partial"
    assert len(kept.read_text().splitlines()) == 4
    assert out.read_bytes().count(b'"status": "ok"') == 4  # the better file stayed


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


def test_the_cli_and_the_api_take_the_same_options_by_name_default_and_variable() -> None:
    import typer.main

    from tagger.cli.app import app
    from tagger.options import ENVIRONMENT, RunOptions

    command = typer.main.get_command(app).commands["run"]
    cli = {param.name: param for param in command.params}
    only_cli = {"paths", "output", "dry_run", "verbose", "quiet"}
    assert set(cli) - only_cli == set(RunOptions.model_fields)
    from tagger.options import CLI_ONLY

    assert set(CLI_ONLY) == only_cli  # each says what to use in Python instead
    for name, field in RunOptions.model_fields.items():
        param = cli[name]
        assert param.envvar == ENVIRONMENT.get(name), name
        default = field.get_default(call_default_factory=True)
        given = param.default
        assert (str(given) if given is not None else None) == (
            str(default.value if hasattr(default, "value") else default)
            if default is not None
            else None
        ), name


NOTEBOOK_INTERRUPT = """
import asyncio, os, signal, sys, threading, time
sys.path.insert(0, {root!r})
import tagger
from tagger.pipeline.cache import cache_stats
from tests.fakeserver import FakeLLM
from tests.harness import seed_texts, taxonomy_ids

fake = FakeLLM(areas=taxonomy_ids(), latency=0.2).start()
options = dict(base_url=fake.base_url, api_key="sk-test", cache_dir={cache!r},
               prompts_dir={prompts!r}, progress=False, concurrency=4)

def interrupt_once_answers_come():
    while len(fake.history) < 12:  # the run is well under way
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGINT)  # what Jupyter's "interrupt the kernel" sends

async def cell():  # a notebook cell: the kernel's event loop is running
    threading.Thread(target=interrupt_once_answers_come, daemon=True).start()
    try:
        tagger.tag(seed_texts(), **options)
    except KeyboardInterrupt:
        print("interrupted")
    kept = cache_stats({cache!r})["entries"]
    sent = len(fake.history)
    fake.latency = 0.0  # slow answers were for the interrupt to land mid-run: the rest, at once
    again = tagger.tag(seed_texts(), **options)
    print(kept, sent, again.stats.requests, again.stats.ok, again.stats.cached)

loop = asyncio.new_event_loop()  # as ipykernel: Python's own Ctrl-C handler stays
loop.run_until_complete(cell())
fake.stop()
"""


def test_interrupting_a_notebook_keeps_the_answers_and_tag_resumes(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.harness import REPO_ROOT, clean_env

    code = NOTEBOOK_INTERRUPT.format(
        root=str(REPO_ROOT), cache=str(tmp_path / "cache"), prompts=str(PROMPTS_DIR)
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=clean_env(), capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert lines[0] == "interrupted", done.stdout
    kept, sent, resent, ok, cached = map(int, lines[1].split())  # resent: the client's count
    assert 0 < kept < 57 and sent < 57  # stopped sending; what was answered is on disk
    assert resent == 57 - kept and ok == 57 and cached == kept  # the rest, and only the rest


def test_batch_runs_through_the_batch_api_and_waits(llm: FakeLLM, tmp_path: Path) -> None:
    assert llm.batches is not None
    llm.batches.auto_after = 2
    texts = seed_texts()[:6]
    run = tagger.tag(texts, batch=True, batch_poll=0.01, **_options(llm, tmp_path))
    assert [row.status for row in run.rows] == ["ok"] * 6
    # One live request: the batch's first line sent as a test before uploading (its canary),
    # whose answer is kept: the other 5 go into the batch.
    assert run.rows[0].batch_id is None and all(row.batch_id for row in run.rows[1:])
    assert _chats(llm) == 1
    assert run.manifest["batch"]["requests"] == 5 and run.manifest["batch"]["canary_requests"] == 1
    with pytest.raises(tagger.errors.UsageError, match="detach"):
        tagger.tag(texts, batch=True, detach=True, **_options(llm, tmp_path))


IN_A_RUNNING_LOOP = """
import asyncio
async def notebook_cell():
    exec(compile(EXAMPLE, "docs/python-api.md", "exec"), {})
asyncio.run(notebook_cell())
"""


def test_the_docs_notebook_example_runs_in_a_script_and_in_a_running_loop(
    llm: FakeLLM, tmp_path: Path
) -> None:
    import re
    import shutil
    import subprocess
    import sys

    from tests.harness import REPO_ROOT, clean_env

    page = (REPO_ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    example = re.search(r"^```python\n(.*?)^```", page, re.S | re.M)
    assert example is not None
    code = example.group(1)
    assert len([line for line in code.splitlines() if line.strip()]) == 5  # tag, look, evaluate
    shutil.copytree(REPO_ROOT / "examples", tmp_path / "examples")
    env = clean_env() | {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": TEST_KEY}
    wrapped = f"EXAMPLE = {code!r}\n{IN_A_RUNNING_LOOP}"
    sent = []
    # In a script; in a running loop with a cache of its own (so it sends too); in a script again.
    for script, cache in ((code, "cache"), (wrapped, "loop-cache"), (code, "cache")):
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=tmp_path, env=env | {"TAGGER_CACHE_DIR": cache},
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert 0 < float(done.stdout.strip().splitlines()[-1]) <= 1  # the accuracy
        sent.append(_chats(llm))
    gold = (tmp_path / "examples" / "gold-seeds.jsonl").read_text(encoding="utf-8")
    count = len(gold.splitlines())
    assert sent == [count, 2 * count, 2 * count]  # the last run: everything from the cache


@pytest.mark.parametrize("mistake", ["refused key", "model typo", "wrong URL"])
def test_expected_errors_are_raised_from_the_callers_frame_with_the_cli_line(
    fake_server: Any, tmp_path: Path, mistake: str
) -> None:
    import traceback

    from tagger.errors import FatalAPIError

    fake = fake_server(areas=["other"], models=["gpt-5.4-nano"], api_key=TEST_KEY)
    options = _options(fake, tmp_path, no_cache=True)
    expected = {"refused key": "refused the API key", "model typo": "'gpt-5.4-nanoo' was not"}
    if mistake == "refused key":
        options["api_key"] = "sk-not-the-right-one-000000"
    elif mistake == "model typo":
        options["model"] = "gpt-5.4-nanoo"
    else:
        options["base_url"] = fake.base_url.removesuffix("/v1") + "/nothing/v1"
    with pytest.raises(FatalAPIError) as raised:
        tagger.tag(seed_texts()[:2], **options)
    message = str(raised.value)
    assert "\n" not in message and len(message) < 400, message
    assert expected.get(mistake, "") in message, message
    # The options are named as tag() takes them (`base_url=`), not as the CLI's flags.
    named = {"refused key": "api_key=", "model typo": "model=", "wrong URL": "base_url="}
    assert "--" not in message and named[mistake] in message, message
    frames = traceback.extract_tb(raised.value.__traceback__)
    files = [Path(frame.filename).name for frame in frames]
    assert len(frames) <= 3 and "base_events.py" not in files, files
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_errors_name_the_options_as_python_passes_them(llm: FakeLLM, tmp_path: Path) -> None:
    from tagger.calling import python_names

    mistakes = [
        ({"cascade": "a,b"}, "cascade= needs target=: ", "e.g. target=0.95"),
        ({"cascade": "a", "target": 0.9}, "cascade='a': ", "e.g. cascade='gpt-5.4-nano,"),
        ({"cascade": "a,b", "target": 0.9, "no_logprobs": True}, "drop no_logprobs=True", ""),
        ({"detach": True}, "detach=True only applies to a batch run: add batch=True", ""),
        ({"base_url": "not a url"}, "invalid option: base_url=: ", ""),
    ]
    for options, said, also in mistakes:
        with pytest.raises(UsageError) as raised:
            tagger.tag(["x"], **{**_options(llm, tmp_path), **options})
        assert said in str(raised.value) and also in str(raised.value), raised.value
        assert "--" not in str(raised.value), raised.value
    assert not llm.history
    # A command in backticks stays a command; a flag tag() has no keyword for stays a flag.
    kept = "see `tagger run --ray -o FILE`, or tagger run --dry-run; --max-cost 2.5."
    assert python_names(kept) == kept.replace("--max-cost 2.5", "max_cost=2.5")
    path = "/data/--model/in.jsonl: no such file (--model.txt, a--model, --models)"
    assert python_names(path) == path
    url = "use --base-url http://127.0.0.1:8000/v1, or --model gpt-5.4-mini."
    assert python_names(url) == "use base_url='http://127.0.0.1:8000/v1', or model='gpt-5.4-mini'."


def test_a_cli_only_option_says_what_to_use_in_python(llm: FakeLLM, tmp_path: Path) -> None:
    from tagger.options import CLI_ONLY

    for name in ("dry_run", "output", "quiet", "verbose"):
        with pytest.raises(TypeError, match=f"'{name}' is `tagger run`'s; in Python, ") as raised:
            tagger.tag(["x"], **{name: True}, **_options(llm, tmp_path))
        assert CLI_ONLY[name] in str(raised.value)
    assert not llm.history  # refused before anything was read or sent
    with pytest.raises(TypeError, match="unknown option 'modle'"):
        tagger.tag(["x"], modle="m")


def test_estimate_is_the_cli_dry_run_from_python(llm: FakeLLM, tmp_path: Path) -> None:
    from tagger.pipeline.forecast import DryRunReport
    from tests.harness import invoke

    texts = seed_texts()[:5]
    options = _options(llm, tmp_path)
    options.pop("progress")
    options.pop("api_key")  # a dry run needs no key
    before = tagger.estimate([*texts, texts[0]], **options)
    assert isinstance(before, DryRunReport)
    assert (before.items, before.unique, before.cached) == (6, 5, 0)
    assert before.usage.prompt_tokens > 0 and before.cost is not None and before.cost > 0
    assert texts[0] in before.first_messages[-1]["content"]
    assert not llm.history and not (tmp_path / "cache" / "cache.db").exists()
    tagger.tag(texts[:2], **_options(llm, tmp_path))
    after = tagger.estimate(texts, **options)
    assert after.cached == 2 and after.usage.prompt_tokens < before.usage.prompt_tokens
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("".join(json.dumps({"abstract": t}) + "\n" for t in texts))
    where = ["--cache-dir", tmp_path / "cache", "--prompts-dir", PROMPTS_DIR]
    cli = invoke(["run", inputs, "--dry-run", "--model", after.model, *where,
                  "--base-url", llm.base_url])  # fmt: skip
    assert cli.exit_code == 0, cli.output
    assert f"${after.cost:.4f}" in cli.stderr and f"{after.usage.prompt_tokens} in" in cli.stderr
