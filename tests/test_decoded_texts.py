"""What a server or a file spells with escapes is judged once decoded: a key written as
`\\u0073k-...` is the key, a 5,000-digit number or a lone surrogate is an invalid answer (never a
crash, never an answer that cannot be stored and is paid for again on every rerun)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tagger
from tagger.errors import InputError, UsageError
from tagger.sending.params import RequestRules
from tests.batchhelpers import batch_run
from tests.fakebatch_objects import RawJSON
from tests.fakepack import edit_answers
from tests.harness import TEST_KEY, TaggerCLI, one_line

Hook = Callable[[str, dict[str, Any]], dict[str, Any] | RawJSON]


def _escaped(text: str) -> str:
    """Every character as a JSON \\u escape: no fragment of the text is left in clear."""
    return "".join(f"\\u{ord(char):04x}" for char in text)


def _summary_hook(spelled: str, *, in_answer: bool, first_only: str | None = None) -> Hook:
    """Replies whose summary is `spelled`, raw JSON text: in the reply body's own JSON
    (in_answer=False) or inside the answer's JSON that the content carries (in_answer=True).
    first_only: only the first reply for the abstract holding that snippet."""
    done: list[bool] = []

    def hook(user: str, body: dict[str, Any]) -> dict[str, Any] | RawJSON:
        if first_only is not None and (first_only not in user or done):
            return body
        done.append(True)
        message = body["choices"][0]["message"]
        content = edit_answers(message["content"], lambda answer: answer.update(summary="MARK"))
        if in_answer:  # the content's text itself holds the escape or the number
            message["content"] = content.replace('"MARK"', spelled)
            return body
        message["content"] = content
        return RawJSON(json.dumps(body).replace('\\"MARK\\"', spelled.replace('"', '\\"')).encode())

    return hook


def _run(cli: TaggerCLI, path: str, count: int = 3) -> Any:
    small = cli.small_input(count)
    return batch_run(cli, inputs=[small]) if path == "batch" else cli.run(inputs=[small])


def _files_written(cli: TaggerCLI) -> list[Path]:
    inputs = cli.tmp / "inputs"
    return [p for p in cli.tmp.rglob("*") if p.is_file() and not p.is_relative_to(inputs)]


# -- the key, redacted after decoding ------------------------------------------------------------


@pytest.mark.parametrize("in_answer", [False, True], ids=["reply-escape", "answer-escape"])
@pytest.mark.parametrize("path", ["live", "batch"])
def test_a_key_echoed_in_json_escapes_is_redacted(
    tagger_cli: TaggerCLI, path: str, in_answer: bool
) -> None:
    spelled = f'"echo {_escaped(TEST_KEY)} end"'
    tagger_cli.fake.reply_hook = _summary_hook(spelled, in_answer=in_answer)
    result = _run(tagger_cli, path)
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows()
    assert all(row["summary"] == "echo *** end" for row in rows), rows
    files = _files_written(tagger_cli)
    assert any(p.is_relative_to(tagger_cli.cache_dir) for p in files)
    for file in files:
        data = file.read_bytes()
        for fragment in (TEST_KEY, TEST_KEY[:12], TEST_KEY[-8:]):
            assert fragment.encode() not in data, f"the key leaked into {file}"
    assert TEST_KEY[-8:] not in result.output


def test_a_batch_line_refusal_is_redacted_once_decoded() -> None:
    from tagger.batch.collect import _error_of, read_output_line

    line = (
        '{"custom_id": "k", "response": {"status_code": 400, "body": {"error": {"message": '
        f"\"Unsupported parameter: 'temperature' for key {_escaped(TEST_KEY)} \\udfff\", "
        '"code": "unsupported_parameter"}}}}'
    )
    decoded, _ = read_output_line(line)
    message, code = _error_of(decoded["response"]["body"], TEST_KEY)
    assert message == "Unsupported parameter: 'temperature' for key *** \ufffd"
    assert code == "unsupported_parameter"


# -- numbers and surrogates in an answer ---------------------------------------------------------


@pytest.mark.parametrize(
    ("spelled", "in_answer"),
    [
        ("1" * 5000, True),  # past Python's 4,300-digit limit for int()
        ('"lone \\ud800 half"', True),  # the answer's JSON escape decodes to a lone surrogate
        ('"lone \\udfff half"', False),  # the reply's JSON escape: the content holds one
    ],
    ids=["5000-digits", "surrogate-in-answer", "surrogate-in-reply"],
)
@pytest.mark.parametrize("path", ["live", "batch"])
def test_an_unstorable_answer_gets_the_repair_turn_and_is_cached_once_repaired(
    tagger_cli: TaggerCLI, path: str, spelled: str, in_answer: bool
) -> None:
    snippet = json.loads(tagger_cli.small_input(3).read_text().splitlines()[1])["abstract"][:50]
    tagger_cli.fake.reply_hook = _summary_hook(spelled, in_answer=in_answer, first_only=snippet)
    result = _run(tagger_cli, path)
    assert result.exit_code == 0, result.output
    assert "unexpected" not in result.output
    rows = tagger_cli.rows()
    assert [row["status"] for row in rows] == ["ok"] * 3, rows
    if path == "live":
        assert len(tagger_cli.chats_for(snippet)) == 2  # the answer, then its repair
    sent = len(tagger_cli.chats())
    again = tagger_cli.run(inputs=[tagger_cli.small_input(3)])
    assert again.exit_code == 0, again.output
    assert len(tagger_cli.chats()) == sent  # cached: nothing paid again


def test_an_answer_that_stays_unstorable_fails_its_own_row(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.reply_hook = _summary_hook('"\\ud800"', in_answer=True)
    result = _run(tagger_cli, "live", 2)
    assert result.exit_code == 1, result.output
    assert "unexpected" not in result.output
    rows = tagger_cli.rows()
    assert len(rows) == 2 and all(row["status"] == "error" for row in rows)
    assert all("lone surrogate (\\ud800)" in row["error"] for row in rows), rows


# -- input lines ---------------------------------------------------------------------------------


def test_a_lone_surrogate_in_an_input_line_is_exit_2_naming_file_and_line(
    tagger_cli: TaggerCLI,
) -> None:
    path = tagger_cli.tmp / "inputs" / "bad.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    fine = json.dumps({"abstract": "A fine abstract about parsing."})
    pair = json.dumps({"abstract": "An emoji \U0001f600 is a surrogate pair.", "note": "x"})
    path.write_text(f'{fine}\n{pair}\n{{"abstract": "ok", "extra": ["\\udbff"]}}\n')
    result = tagger_cli.run(inputs=[path])
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert f"{path}:3:" in message and "lone surrogate (\\udbff)" in message, message
    assert not tagger_cli.chats()
    array = path.with_suffix(".json")
    array.write_text(f'[{fine}, {{"abstract": "x", "title": "\\ud800"}}]')
    assert f"{array}:2:" in one_line(tagger_cli.run(inputs=[array]).stderr)
    with pytest.raises(InputError, match="lone surrogate"):
        tagger.tag([{"abstract": "bad \ud800"}], base_url="http://127.0.0.1:9/v1", api_key="x")


# -- read_run ------------------------------------------------------------------------------------


def _run_file(tmp_path: Path, manifest: str) -> Path:
    out = tmp_path / "tagged.jsonl"
    row = {"id": "a", "source": "s", "index": 0, "line": 1, "abstract": "x", "status": "ok",
           "model": "m", "prompt": "tag", "prompt_version": "v1", "prompt_hash": "h",
           "taxonomy_version": "t", "synonyms_version": "s"}  # fmt: skip
    out.write_text(json.dumps(row) + "\n")
    out.with_name("tagged.manifest.json").write_text(manifest)
    return out


def test_read_run_refuses_a_manifest_nested_too_deep(tmp_path: Path) -> None:
    out = _run_file(tmp_path, '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(UsageError, match=r"tagged\.manifest\.json is no tagger manifest.*nested"):
        tagger.read_run(out)


@pytest.mark.parametrize("cost", ["NaN", "Infinity", "-Infinity", "-0.5", '"1.0"', "1e999"])
def test_read_run_refuses_a_cost_that_is_no_cost(tmp_path: Path, cost: str) -> None:
    out = _run_file(tmp_path, f'{{"status": "complete", "estimated_cost_usd": {cost}}}')
    with pytest.raises(UsageError, match=r"estimated_cost_usd .* not a cost"):
        tagger.read_run(out)
    good = _run_file(tmp_path, '{"status": "complete", "estimated_cost_usd": 0.25}')
    assert tagger.read_run(good).stats.cost == 0.25


def test_read_run_refuses_a_manifest_that_is_no_file(tmp_path: Path) -> None:
    out = _run_file(tmp_path, "{}")
    manifest = out.with_name("tagged.manifest.json")
    manifest.unlink()
    manifest.symlink_to("/dev/zero")  # would be read forever
    with pytest.raises(UsageError, match="is not a file"):
        tagger.read_run(out)


def test_every_json_file_tagger_writes_is_utf8_even_with_a_lone_surrogate() -> None:
    from tagger import jsondata

    text = jsondata.dumps({"error": "HTTP 400: bad \ud800 value", "ok": "caf\u00e9"})
    text.encode("utf-8")  # writable
    assert json.loads(text) == {"error": "HTTP 400: bad \ud800 value", "ok": "caf\u00e9"}


# -- adaptations in a job file -------------------------------------------------------------------


def _rules(model: str = "gpt-5-mini", **kwargs: Any) -> RequestRules:
    params = {"max_tokens": 400, "temperature": 0, "seed": 7}
    return RequestRules.for_model(model, logprobs=True, prompt_params=params, **kwargs)


@pytest.mark.parametrize(
    "line",
    [
        "max_tokens no longer sent",
        "max_completion_tokens no longer sent",
        "reasoning_effort=xhigh, the cheapest the server listed",
        "reasoning_effort=high",
        "reasoning_effort=medium",
        "reasoning_effort no longer sent",
        "response_format no longer sent",
        "messages no longer sent",
        "stop no longer sent",  # not a parameter this run sends
        "max_tokens sent as max_tokens",
        "service_tier sent as nothing",
        "run rm -rf /",
    ],
)
def test_a_job_file_cannot_teach_what_no_server_would(line: str) -> None:
    rules = _rules()
    before = rules.body_params({"max_tokens": 400, "temperature": 0, "seed": 7})
    refused = rules.replay([f"{line} (the server said: trust me)"])
    assert len(refused) == 1 and line[:40] in refused[0], refused
    assert rules.body_params({"max_tokens": 400, "temperature": 0, "seed": 7}) == before
    assert rules.learned == []


def test_a_job_file_replays_what_a_server_teaches() -> None:
    rules = _rules("gpt-4o-mini")  # no reasoning: max_tokens, temperature and logprobs sent
    learned = [
        "max_tokens sent as max_completion_tokens (the server said: use max_completion_tokens)",
        "temperature no longer sent (the server said: unsupported)",
        "seed no longer sent (the server said: unsupported)",
        "logprobs no longer asked for (rows get no task_area_confidence)",
    ]
    assert rules.replay(learned) == []
    body = rules.body_params({"max_tokens": 400, "temperature": 0, "seed": 7})
    assert body == {"max_completion_tokens": 400}
    lowered = _rules(reasoning_effort="medium")
    assert lowered.replay(["reasoning_effort=low, the cheapest the server listed"]) == []
    assert lowered.reasoning_effort == "low"


def test_an_edited_job_is_run_without_what_it_cannot_teach(
    tagger_cli: TaggerCLI, caplog: pytest.LogCaptureFixture
) -> None:
    fake = tagger_cli.fake
    assert fake.batches is not None
    fake.batches.script("hold")
    small = tagger_cli.small_input(2)
    started = batch_run(tagger_cli, "--detach", "--model", "gpt-5-mini", inputs=[small])
    assert started.exit_code == 0, started.output
    [job] = sorted((tagger_cli.cache_dir / "batches").glob("*.json"))
    state = json.loads(job.read_text())
    state["adaptations"] = [
        "max_completion_tokens no longer sent (the server said: x)",
        "reasoning_effort=xhigh, the cheapest the server listed (the server said: x)",
    ]
    job.write_text(json.dumps(state))
    fake.batches.created[0].status = "expired"  # nothing ran: round 2 builds every line again
    with caplog.at_level(logging.WARNING, logger="tagger"):
        again = batch_run(tagger_cli, "--model", "gpt-5-mini", inputs=[small])
    assert again.exit_code == 0, again.output
    said = [r.getMessage() for r in caplog.records if "ignoring the adaptation" in r.getMessage()]
    assert len(said) == 2, said
    # Round 2: a second batch, or (a few lines left after an expiry) the same lines live.
    bodies = [line["body"] for batch in fake.batches.created[1:] for line in batch.parsed()]
    bodies += [request.body or {} for request in tagger_cli.chats()]
    assert len(bodies) >= 2
    assert all(body["max_completion_tokens"] > 0 for body in bodies), bodies
    assert all(body["reasoning_effort"] == "minimal" for body in bodies), bodies
