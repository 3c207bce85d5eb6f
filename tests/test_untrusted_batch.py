"""Batch job files and batch servers are data: no path, id, text or number in them reaches out."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.batchhelpers import FAST, batch_run
from tests.fakebatch_objects import RawJSON
from tests.fakepack import edit_answers
from tests.harness import TEST_KEY, TaggerCLI, one_line


def _jobs(cli: TaggerCLI) -> list[Path]:
    return sorted((cli.cache_dir / "batches").glob("*.json"))


def _submitted(cli: TaggerCLI, count: int = 3) -> tuple[Path, Path]:
    """A batch job submitted and left running (--detach); its input and job file."""
    assert cli.fake.batches is not None
    cli.fake.batches.script("hold")
    small = cli.small_input(count)
    result = cli.run(*FAST, "--detach", inputs=[small])
    assert result.exit_code == 0, result.output
    [job] = _jobs(cli)
    return small, job


def _edit(job: Path, change: Callable[[dict[str, Any]], None]) -> None:
    state = json.loads(job.read_text())
    change(state)
    job.write_text(json.dumps(state))


def _sent(cli: TaggerCLI) -> int:
    """Requests that carry work (uploads, batches, chats), not the model list a run checks."""
    return sum(1 for r in cli.fake.history if not r.path.endswith("/models"))


def _refused(cli: TaggerCLI, result: Any, sent_before: int) -> str:
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    assert "unexpected" not in result.stderr
    assert _sent(cli) == sent_before  # nothing sent, not even a look at a batch
    return one_line(errors[0])


@pytest.mark.parametrize(
    "field, value",
    [
        ("job_id", "../../outside"),
        ("job_id", "0123456789abcdef"),  # a valid shape, but not this file's job
        ("batches.0.batch_id", "../files/file-x/content"),
        ("batches.0.name", "../../../outside/precious"),
        ("items", {"../x": {}}),
        ("mode", "json_schema; rm -rf ~"),
    ],
)
def test_a_job_file_that_does_not_check_out_is_refused(
    tagger_cli: TaggerCLI, field: str, value: object
) -> None:
    small, job = _submitted(tagger_cli)
    outside = tagger_cli.tmp / "outside"
    (outside / "precious").mkdir(parents=True)

    def change(state: dict[str, Any]) -> None:
        where, *rest = field.split(".")
        if rest:
            state[where][int(rest[0])][rest[1]] = value
        else:
            state[where] = value

    _edit(job, change)
    sent = _sent(tagger_cli)
    result = tagger_cli.run(*FAST, inputs=[small])
    message = _refused(tagger_cli, result, sent)
    assert str(job) in message and "remove it" in message
    assert (outside / "precious").is_dir()  # nothing deleted
    listed = tagger_cli.invoke(["batch", "list", "--cache-dir", tagger_cli.cache_dir])
    assert listed.exit_code == 2 and "cannot use batch job" in one_line(listed.stderr)


def _built_not_uploaded(cli: TaggerCLI) -> tuple[Path, Path, Path, Path]:
    """A job whose input file was written but whose upload failed; and a secret file."""
    assert cli.fake.batches is not None
    secret = cli.tmp / "home" / ".ssh" / "id_rsa"
    secret.parent.mkdir(parents=True)
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY----- not for any server\n")
    small = cli.small_input(3)
    # The upload and the SDK's 3 retries fail, the server asking for them 1 ms apart.
    cli.fake.batches.fault_http("502", "502", "502", "502", match="/v1/files", retry_after_ms=1)
    failed = cli.run(*FAST, inputs=[small])
    assert failed.exit_code != 0, failed.output
    [job] = _jobs(cli)
    [built] = (cli.cache_dir / "batches" / job.stem).glob("*.jsonl")
    return small, job, built, secret


def test_no_path_is_read_from_a_job_file(tagger_cli: TaggerCLI) -> None:
    small, job, _, secret = _built_not_uploaded(tagger_cli)

    def point_at_secret(state: dict[str, Any]) -> None:
        state["batches"][0]["input_path"] = str(secret)

    _edit(job, point_at_secret)
    result = batch_run(tagger_cli, inputs=[small])
    assert result.exit_code == 0, result.output
    assert tagger_cli.fake.batches is not None
    uploads = [f.data for f in tagger_cli.fake.batches.uploads]
    assert uploads and not any(b"PRIVATE KEY" in data for data in uploads)
    assert all(row["status"] == "ok" for row in tagger_cli.rows())


def test_a_planted_input_file_is_not_uploaded(tagger_cli: TaggerCLI) -> None:
    small, _, built, secret = _built_not_uploaded(tagger_cli)
    built.unlink()
    built.symlink_to(secret)
    sent = _sent(tagger_cli)
    result = tagger_cli.run(*FAST, inputs=[small])
    message = _refused(tagger_cli, result, sent)
    assert "not the one tagger wrote" in message and str(built) in message
    built.unlink()
    built.write_text('{"custom_id": "not-ours"}\n')  # a regular file, edited
    result = tagger_cli.run(*FAST, inputs=[small])
    assert "not the one tagger wrote" in _refused(tagger_cli, result, sent)


def test_status_and_list_show_job_and_server_text_escaped(tagger_cli: TaggerCLI) -> None:
    assert tagger_cli.fake.batches is not None
    _, job = _submitted(tagger_cli)
    title = "\x1b]0;owned\x07\x1b[2J\x9b31m"

    def plant(state: dict[str, Any]) -> None:
        state["output"] = f"out{title}.jsonl"
        state["command"] = f"tagger run{title}"

    _edit(job, plant)
    tagger_cli.fake.batches.created[0].status = f"in_progress{title}"
    for args in (["batch", "list"], ["batch", "status", "--api-key", TEST_KEY]):
        result = tagger_cli.invoke([*args, "--cache-dir", tagger_cli.cache_dir])
        assert result.exit_code == 0, result.output
        assert "out" in result.stdout
        for raw in ("\x1b", "\x07", "\x9b"):
            assert raw not in result.output, args
        assert "\\x1b" in result.stdout


def _key_echo(user: str, body: dict[str, Any]) -> dict[str, Any]:
    """A server that echoes the key into its answer's text."""
    message = body["choices"][0]["message"]

    def echo(answer: dict[str, Any]) -> None:
        answer["summary"] = f"{answer['summary']} (key {TEST_KEY})"

    message["content"] = edit_answers(message["content"], echo)
    return body


def _assert_no_key(cli: TaggerCLI, *texts: str, batch: bool) -> None:
    """Not in any file written (output, manifest, cache, job file), nor in what was printed."""
    files = [p for p in cli.tmp.rglob("*") if p.is_file()]
    assert any(p.is_relative_to(cli.cache_dir) for p in files)  # the search covers the cache
    assert any(p.is_relative_to(cli.cache_dir / "batches") for p in files) == batch
    for path in files:
        data = path.read_bytes()
        if path.is_relative_to(cli.tmp / "inputs"):
            continue
        for fragment in (TEST_KEY, TEST_KEY[:12], TEST_KEY[-8:]):
            assert fragment.encode() not in data, f"the key leaked into {path}"
    for text in texts:
        assert TEST_KEY[-8:] not in text


@pytest.mark.parametrize("path", ["live", "batch"])
def test_a_server_echoing_the_key_leaves_it_nowhere(tagger_cli: TaggerCLI, path: str) -> None:
    fake = tagger_cli.fake
    assert fake.batches is not None
    fake.reply_hook = _key_echo
    small = tagger_cli.small_input(4)
    if path == "batch":
        fake.batches.script("complete", f"fail:{TEST_KEY}")
        # The last abstract's line fails (the first one's is also sent live, as the canary).
        fake.script(["400"], match=small.read_text().splitlines()[-1].split('"')[3][:40])
        result = batch_run(tagger_cli, inputs=[small])
    else:
        result = tagger_cli.run(inputs=[small])
    assert result.exit_code in (0, 1), result.output
    rows = tagger_cli.rows()
    assert any("***" in (row["summary"] or "") for row in rows)
    _assert_no_key(tagger_cli, result.output, batch=path == "batch")
    for row in rows:
        assert TEST_KEY[-8:] not in json.dumps(row)
    assert TEST_KEY[-8:] not in result.output


def _deep_once(
    snippet: str, depth: int
) -> Callable[[str, dict[str, Any]], dict[str, Any] | RawJSON]:
    """The first answer for one abstract carries an array nested `depth` deep."""
    done: list[bool] = []

    def hook(user: str, body: dict[str, Any]) -> dict[str, Any] | RawJSON:
        if snippet not in user or done:
            return body
        done.append(True)
        text = json.dumps({**body, "junk": "JUNK"})
        return RawJSON(text.replace('"JUNK"', "[" * depth + "]" * depth).encode())

    return hook


@pytest.mark.parametrize("path", ["live", "batch"])
def test_a_reply_nested_too_deep_gets_the_repair_turn(tagger_cli: TaggerCLI, path: str) -> None:
    small = tagger_cli.small_input(5)
    snippet = json.loads(small.read_text().splitlines()[2])["abstract"][:50]
    tagger_cli.fake.reply_hook = _deep_once(snippet, 100_000)
    result = (
        batch_run(tagger_cli, inputs=[small]) if path == "batch" else tagger_cli.run(inputs=[small])
    )
    assert result.exit_code == 0, result.output
    assert "unexpected" not in result.output
    rows = tagger_cli.rows()
    assert len(rows) == 5 and all(row["status"] == "ok" for row in rows), rows
    if path == "batch":
        assert tagger_cli.fake.batches is not None
        assert len(tagger_cli.fake.batches.created) == 2  # the repair turn went in round 2
        job = json.loads(_jobs(tagger_cli)[0].read_text())
        assert all(b.get("collected") for b in job["batches"])
        assert job["repairs"] == 1
    else:
        assert len(tagger_cli.chats_for(snippet)) == 2


def test_an_answer_always_nested_too_deep_fails_in_plain_words(tagger_cli: TaggerCLI) -> None:
    small = tagger_cli.small_input(2)
    deep = "[" * 60_000 + "]" * 60_000
    tagger_cli.fake.reply_hook = lambda user, body: RawJSON(
        json.dumps({**body, "x": "X"}).replace('"X"', deep).encode()
    )
    result = tagger_cli.run(inputs=[small])
    assert result.exit_code == 1, result.output
    for row in tagger_cli.rows():
        assert row["status"] == "error"
        assert "nested 60,001 levels deep" in row["error"]  # the body is one deeper
        assert "repair turn" in row["error"] and "Recursion" not in row["error"]


@pytest.mark.parametrize("path", ["live", "batch"])
def test_a_huge_integer_logprob_keeps_the_paid_answer_and_its_tokens(
    tagger_cli: TaggerCLI, path: str
) -> None:
    def huge_logprob(user: str, body: dict[str, Any]) -> RawJSON:
        # The fake's own tokens, which spell the answer, each with a 400-digit logprob.
        tokens = body["choices"][0]["logprobs"]["content"]
        assert tokens, "the fake sent no logprobs to spoil"
        for token in tokens:
            token["logprob"] = "HUGE"
        return RawJSON(json.dumps(body).replace('"HUGE"', "-1" + "0" * 400).encode())

    tagger_cli.fake.reply_hook = huge_logprob
    small = tagger_cli.small_input(3)
    result = (
        batch_run(tagger_cli, inputs=[small]) if path == "batch" else tagger_cli.run(inputs=[small])
    )
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows()
    assert all(row["status"] == "ok" and row["task_area_confidence"] is None for row in rows)
    assert all(row["prompt_tokens"] > 0 and row["completion_tokens"] > 0 for row in rows)
    manifest = tagger_cli.manifest()
    if path == "batch":  # its live test answered the first abstract: that row carries its tokens
        assert rows[0]["batch_id"] is None and manifest["batch"]["canary_requests"] == 1
        assert manifest["batch"]["canary_tokens"]["prompt_tokens"] == rows[0]["prompt_tokens"]
    assert manifest["prompt_tokens"] == sum(row["prompt_tokens"] for row in rows)


def test_a_batch_answer_with_a_unicode_line_separator_is_kept_once(tagger_cli: TaggerCLI) -> None:
    def separators(user: str, body: dict[str, Any]) -> RawJSON:
        message = body["choices"][0]["message"]

        def separate(answer: dict[str, Any]) -> None:
            answer["summary"] = f"first\u2028second\u2029third\u0085fourth {answer['summary']}"

        message["content"] = edit_answers(message["content"], separate, ensure_ascii=False)
        return RawJSON(json.dumps(body, ensure_ascii=False).encode())

    tagger_cli.fake.reply_hook = separators
    result = batch_run(tagger_cli, inputs=[tagger_cli.small_input(4)])
    assert result.exit_code == 0, result.output
    assert tagger_cli.fake.batches is not None
    assert len(tagger_cli.fake.batches.created) == 1  # nothing resubmitted
    assert tagger_cli.fake.batches.custom_id_counts().most_common(1)[0][1] == 1
    assert all(row["status"] == "ok" for row in tagger_cli.rows())
