"""Bad inputs and options fail before anything is sent: exit 2 and one clear line."""

from __future__ import annotations

import json

import pytest
from typer.testing import Result

from tests.harness import SEEDS_DIR, TaggerCLI, one_line

GOOD = json.dumps({"abstract": "We study sparse attention for graph transformers."})


# case -> (file name, its bytes (None: no such file), the line the error names, the reason)
CASES: dict[str, tuple[str, bytes | None, int | None, str]] = {
    "missing file": ("nope.txt", None, None, "no such file"),
    "non-UTF-8 file": (
        "latin1.txt", b"NeurIPS 2024\n\nA first abstract.\n\n" b"Caf\xe9 au lait abstract.\n",
        5, "UTF-8"
    ),
    "binary file": ("image.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", 3, "binary"),
    "malformed JSONL line": (
        "broken.jsonl", f'{GOOD}\n{{"abstract": "unclosed\n{GOOD}\n'.encode(), 2, "invalid JSON"
    ),
    "CSV without abstract column": (
        "papers.csv", b"title,year\nSparse attention,2024\n", 1, "no 'abstract' column"
    ),
    "file with no abstracts": ("empty.jsonl", b"\n\n", None, "no abstracts"),
    "header without abstracts": ("header.txt", b"ICML 2024\n", 1, "no abstracts"),
    "empty abstract": (
        "blank.jsonl", f'{GOOD}\n{GOOD}\n{{"abstract": "   "}}\n'.encode(), 3, "empty abstract"
    ),
    "unsupported file type": ("paper.pdf", b"%PDF-1.7\n", None, "unsupported file type"),
    "lone surrogate": (
        "split.jsonl", f'{GOOD}\n{{"abstract": "x \\ud83d y"}}\n'.encode(), 2, "surrogate"
    ),
}  # fmt: skip


def test_a_lone_surrogate_in_any_field_given_from_python_names_the_item() -> None:
    from tagger.errors import InputError
    from tagger.items import read_items

    for item in (
        {"abstract": "x\ud800"},
        {"abstract": "ok", "title": "\udfff"},
        {"abstract": "ok", "note": "\udc80"},
    ):
        with pytest.raises(InputError, match="surrogate"):
            read_items([{"abstract": "fine"}, item])
    kept = read_items([{"abstract": "caf\u00e9 \U0001f600", "note": "\u00e9"}]).abstracts()
    assert [a.text for a in kept] == ["caf\u00e9 \U0001f600"]  # real characters pass


def _error_line(result: Result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected a one-line error, got {len(lines)} lines:\n{result.stderr}"
    return lines[0]


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_fails_before_sending(tagger_cli: TaggerCLI, case: str) -> None:
    folder = tagger_cli.tmp / "inputs"
    folder.mkdir(parents=True, exist_ok=True)
    name, content, line, reason = CASES[case]
    path = folder / name
    if content is not None:
        path.write_bytes(content)
    # A good seed directory first: the run must not start sending before checking everything.
    result = tagger_cli.run(inputs=[SEEDS_DIR, path])
    assert result.exit_code == 2, result.output
    assert tagger_cli.fake.history == []
    assert not tagger_cli.out.exists()
    assert "Traceback" not in result.output
    message = _error_line(result)
    assert message.startswith("Error:"), message
    where = f"{path}:{line}:" if line else f"{path}:"
    assert where in message, message
    assert reason in message, message


def test_no_key_with_default_base_url(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run(key=None, base_url=None)
    assert result.exit_code == 2, result.output
    assert _error_line(result) == "Error: No API key: set OPENAI_API_KEY in .env or pass --api-key"
    assert tagger_cli.fake.history == []
    assert not tagger_cli.out.exists()


@pytest.mark.parametrize(
    "option",
    [
        ["--concurrency", "0"],
        ["--max-attempts", "0"],
        ["--timeout", "0"],
        ["--repair-turns", "-1"],
        ["--mode", "yaml"],
        ["--rpm", "0"],
    ],
    ids=lambda o: " ".join(o),
)
def test_bad_option_values(tagger_cli: TaggerCLI, option: list[str]) -> None:
    result = tagger_cli.run(*option)
    assert result.exit_code == 2, result.output
    assert tagger_cli.fake.history == []
    assert option[0] in one_line(result.stderr)  # the message names the option to fix
    assert not tagger_cli.out.exists()
