"""Bad inputs and options fail before anything is sent: exit 2 and one clear line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from tests.conftest import SEEDS_DIR, TaggerCLI, one_line

GOOD = json.dumps({"abstract": "We study sparse attention for graph transformers."})


def _missing(d: Path) -> tuple[Path, int | None, str]:
    return d / "nope.txt", None, "no such file"


def _not_utf8(d: Path) -> tuple[Path, int | None, str]:
    path = d / "latin1.txt"
    path.write_bytes(b"NeurIPS 2024\n\nA first abstract.\n\nCaf\xe9 au lait abstract.\n")
    return path, 5, "UTF-8"


def _binary(d: Path) -> tuple[Path, int | None, str]:
    path = d / "image.txt"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00")
    return path, 3, "binary"


def _malformed_jsonl(d: Path) -> tuple[Path, int | None, str]:
    path = d / "broken.jsonl"
    path.write_text(f'{GOOD}\n{{"abstract": "unclosed\n{GOOD}\n', encoding="utf-8")
    return path, 2, "invalid JSON"


def _csv_without_abstract(d: Path) -> tuple[Path, int | None, str]:
    path = d / "papers.csv"
    path.write_text("title,year\nSparse attention,2024\n", encoding="utf-8")
    return path, 1, "no 'abstract' column"


def _no_abstracts(d: Path) -> tuple[Path, int | None, str]:
    path = d / "empty.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    return path, None, "no abstracts"


def _header_only(d: Path) -> tuple[Path, int | None, str]:
    path = d / "header.txt"
    path.write_text("ICML 2024\n", encoding="utf-8")
    return path, 1, "no abstracts"


def _empty_abstract(d: Path) -> tuple[Path, int | None, str]:
    path = d / "blank.jsonl"
    path.write_text(f'{GOOD}\n{GOOD}\n{{"abstract": "   "}}\n', encoding="utf-8")
    return path, 3, "empty abstract"


def _unsupported_type(d: Path) -> tuple[Path, int | None, str]:
    path = d / "paper.pdf"
    path.write_bytes(b"%PDF-1.7\n")
    return path, None, "unsupported file type"


CASES: dict[str, Callable[[Path], tuple[Path, int | None, str]]] = {
    "missing file": _missing,
    "non-UTF-8 file": _not_utf8,
    "binary file": _binary,
    "malformed JSONL line": _malformed_jsonl,
    "CSV without abstract column": _csv_without_abstract,
    "file with no abstracts": _no_abstracts,
    "header without abstracts": _header_only,
    "empty abstract": _empty_abstract,
    "unsupported file type": _unsupported_type,
}


def _error_line(result: Result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected a one-line error, got {len(lines)} lines:\n{result.stderr}"
    return lines[0]


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_fails_before_sending(tagger_cli: TaggerCLI, case: str) -> None:
    folder = tagger_cli.tmp / "inputs"
    folder.mkdir(parents=True, exist_ok=True)
    path, line, reason = CASES[case](folder)
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
