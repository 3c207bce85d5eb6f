"""Inputs and review sheets that are odd or hostile: long cells, CR-only lines, `;` CSV,
forged XLSX dimensions, wrong field types, formulas behind control characters, ids, titles."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openpyxl import load_workbook

from tagger.errors import InputError
from tagger.files import csvrows, xlsxread
from tagger.files.abstracts import iter_abstracts, scan, text_id
from tagger.files.sheets import SHEET_COLUMNS, read_sheet
from tests import harness
from tests.harness import PROMPTS_DIR, TaggerCLI
from tests.reviewsheets import (
    column_letter,
    gold_import_in_1_gib,
    inline_cell,
    review_row,
    write_review,
    zip_xlsx,
)

FORMULA_CHARS = ("=", "+", "-", "@")
C0 = [chr(code) for code in range(32)]


@pytest.fixture(autouse=True)
def _restore_csv_limit() -> Iterator[None]:
    """csv.field_size_limit is process-wide: leave it as the test found it."""
    limit = csv.field_size_limit()
    yield
    csv.field_size_limit(limit)


def invoke(*args: object) -> tuple[int, str]:
    result = harness.invoke(args)
    return result.exit_code, result.output


def one_error_line(output: str) -> str:
    """The output is exactly one `Error: ...` line (no traceback); return it."""
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith("Error: "), output
    assert "Traceback" not in output
    return lines[0]


# --- 1. long CSV cells ----------------------------------------------------------------------


def test_run_reads_a_csv_abstract_longer_than_the_csv_default(tmp_path: Path) -> None:
    long_text = "word " * 40_000  # 200,000 characters: over csv's default 131,072
    path = tmp_path / "long.csv"
    path.write_text(f'id,abstract\n1,"{long_text}"\n2,short\n', encoding="utf-8")
    items = list(iter_abstracts(scan([path]).files))
    assert [len(a.text) for a in items] == [len(long_text.strip()), 5]


def test_gold_import_reads_a_long_abstractinline_cell(tmp_path: Path) -> None:
    sheet = tmp_path / "review.csv"
    long_text = "word " * 40_000
    write_review(sheet, [review_row("a", abstract=long_text)])
    code, output = invoke(
        "gold", "import", sheet, "-o", tmp_path / "g.jsonl", "--prompts-dir", PROMPTS_DIR
    )
    assert code == 0, output
    gold = json.loads((tmp_path / "g.jsonl").read_text(encoding="utf-8"))
    assert gold["abstract"] == long_text


def test_a_cell_over_the_bound_is_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(csvrows, "MAX_CELL_CHARS", 1_000)
    path = tmp_path / "big.csv"
    path.write_text('abstract\nok\n"' + "x" * 2_000 + '"\n', encoding="utf-8")
    with pytest.raises(InputError) as info:
        scan([path])
    assert str(info.value) == (
        f"{path}:3: a cell is longer than 1,000 characters: check for a quote that is never closed"
    )
    sheet = tmp_path / "review.csv"
    write_review(sheet, [review_row("a", abstract="x" * 2_000)])
    code, output = invoke("gold", "import", sheet, "-o", tmp_path / "g.jsonl")
    assert code == 2
    assert "a cell is longer than 1,000 characters" in one_error_line(output)


# --- 2. CR-only line endings ----------------------------------------------------------------


def test_txt_with_cr_only_line_endings(tmp_path: Path) -> None:
    path = tmp_path / "mac.txt"
    path.write_bytes(b"ICML 2024\r\rFirst abstract, line one\rand line two.\r\rSecond one.\r")
    items = list(iter_abstracts(scan([path]).files))
    assert [(a.text, a.line, a.venue, a.year) for a in items] == [
        ("First abstract, line one and line two.", 3, "ICML", 2024),
        ("Second one.", 6, "ICML", 2024),
    ]


def test_cr_only_jsonl_and_csv(tmp_path: Path) -> None:
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_bytes(b'{"abstract": "one"}\r{"abstract": "two"}\r')
    csv_path = tmp_path / "b.csv"
    csv_path.write_bytes(b'abstract,title\r"three\rlines\rhere",t\rfour,u\r')
    items = list(iter_abstracts(scan([jsonl, csv_path]).files))
    assert [(a.text, a.line) for a in items] == [
        ("one", 1),
        ("two", 2),
        ("three\rlines\rhere", 2),  # a quoted cell keeps its line breaks
        ("four", 5),
    ]


def test_doubled_cr_before_lf_is_one_line_break(tmp_path: Path) -> None:
    path = tmp_path / "twice.txt"
    path.write_bytes(b"Venue 2023\r\r\n\r\r\nLine one\r\r\nline two.\r\r\n")
    items = list(iter_abstracts(scan([path]).files))
    assert [(a.text, a.line) for a in items] == [("Line one line two.", 3)]


def test_stray_cr_in_a_crlf_csv_is_not_a_new_row(tmp_path: Path) -> None:
    path = tmp_path / "stray.csv"
    path.write_bytes(b"id,abstract,title\r\n1,Some text\rmore text,T\r\n")
    with pytest.raises(InputError) as info:
        scan([path])
    assert str(info.value) == (
        f"{path}:2: a line break inside a cell that is not quoted: quote the cell"
    )


# --- 3. `;`-separated CSV in `tagger run` ----------------------------------------------------


def test_run_reads_semicolon_separated_csv(tmp_path: Path) -> None:
    path = tmp_path / "excel-de.csv"
    path.write_bytes(
        b'\xef\xbb\xbf\r\nid;Abstract;year\r\n7;"Uses a; b, and c.";2024\r\n8;Plain;\r\n'
    )
    items = list(iter_abstracts(scan([path]).files))
    assert [(a.id, a.text, a.year, a.line) for a in items] == [
        ("7", "Uses a; b, and c.", 2024, 3),
        ("8", "Plain", None, 4),
    ]


# --- 4. hostile XLSX ------------------------------------------------------------------------


def write_xlsx(
    path: Path, rows: dict[int, str], dimension: str = "A1:S2", *, in_order: bool = True
) -> Path:
    """A minimal .xlsx zipped by hand: rows are row number -> the row's <c> elements, written
    in row order, or (in_order=False) in the dict's order."""
    ordered = sorted(rows.items()) if in_order else list(rows.items())
    body = "".join(f'<row r="{n}">{cells}</row>' for n, cells in ordered)
    return zip_xlsx(path, body, dimension=dimension)


def data_row(number: int, ident: str) -> str:
    """The <c> elements of one reviewed row."""
    values = review_row(ident)
    columns = enumerate(SHEET_COLUMNS, start=1)
    return "".join(
        inline_cell(f"{column_letter(i)}{number}", values[c]) for i, c in columns if c in values
    )


def header_and_row(ident: str = "a") -> dict[int, str]:
    """Row 1: the review columns; row 2: one reviewed row."""
    header = "".join(
        inline_cell(f"{column_letter(i)}1", c) for i, c in enumerate(SHEET_COLUMNS, start=1)
    )
    return {1: header, 2: data_row(2, ident)}


def test_hand_made_xlsx_imports(tmp_path: Path) -> None:
    sheet = write_xlsx(tmp_path / "review.xlsx", header_and_row())
    code, output = invoke("gold", "import", sheet, "-o", tmp_path / "g.jsonl")
    assert code == 0, output
    assert json.loads((tmp_path / "g.jsonl").read_text())["id"] == "a"


def _import_refused(tmp_path: Path, rows: dict[int, str], *, in_order: bool = True) -> str:
    sheet = write_xlsx(tmp_path / "review.xlsx", rows, in_order=in_order)
    code, output = invoke("gold", "import", sheet, "-o", tmp_path / "g.jsonl")
    assert code == 2, output
    assert not (tmp_path / "g.jsonl").exists()
    return one_error_line(output)


def test_rows_out_of_order_are_refused_not_one_of_them_lost(tmp_path: Path) -> None:
    # openpyxl's streaming reader yields row 3, then drops row 2 without a word.
    rows = {1: header_and_row()[1], 3: data_row(3, "b"), 2: data_row(2, "a")}
    assert "row 2 comes after row 3" in _import_refused(tmp_path, rows, in_order=False)


def test_cells_out_of_order_or_twice_are_refused_not_overwritten(tmp_path: Path) -> None:
    header = header_and_row()[1]
    cells = data_row(2, "a")
    first, rest = cells[: cells.index("</c>") + 4], cells[cells.index("</c>") + 4 :]
    # The row's first cell last: the reader sizes the row by its last cell and drops the rest.
    said = _import_refused(tmp_path, {1: header, 2: rest + first})
    assert "cell A2 comes after a cell to its right" in said
    # The id's cell twice: the second would replace the first.
    twice = first + first.replace(">a<", ">b<") + rest
    assert "cell A2 is given twice" in _import_refused(tmp_path, {1: header, 2: twice})
    huge = {1: header, 2: cells.replace('r="A2"', f'r="A{"9" * 5000}"', 1)}
    assert "is not a cell of row 2" in _import_refused(tmp_path, huge)


def test_forged_dimension_with_a_far_cell_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    rows = header_and_row() | {1_048_576: inline_cell("XFD1048576", "boom")}
    sheet = write_xlsx(tmp_path / "bomb.xlsx", rows, dimension="A1:XFD1048576")
    assert sheet.stat().st_size < 4_000
    out = tmp_path / "g.jsonl"
    done = gold_import_in_1_gib(sheet, out)
    line = one_error_line(done.stdout + done.stderr)
    assert done.returncode == 2, line
    assert "cell XFD1048576 is beyond column IV" in line
    assert "at most 256 columns" in line
    assert not out.exists()


def test_styled_empty_far_cells_and_gaps_are_ignored(tmp_path: Path) -> None:
    rows = header_and_row()
    rows[2] += '<c r="XFD2" s="0"/>'  # formatting only, no value
    rows[900_000] = '<c r="XFD900000" s="0"/>'
    sheet = write_xlsx(tmp_path / "styled.xlsx", rows, dimension="A1:XFD900000")
    out = tmp_path / "g.jsonl"
    done = gold_import_in_1_gib(sheet, out)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["a"]


@pytest.mark.parametrize(
    ("bound", "value", "fragment"),
    [
        ("MAX_ROWS", 3, "has rows after row 3, more than tagger reads: delete them"),
        ("MAX_CELLS", 30, "more than 30 filled cells"),
        ("MAX_UNPACKED_BYTES", 1_000, "more than tagger reads (1,000)"),
    ],
)
def test_sheet_bounds_are_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound: str, value: int, fragment: str
) -> None:
    monkeypatch.setattr(xlsxread, bound, value)
    rows = header_and_row("a") | {3: data_row(3, "b"), 4: data_row(4, "c")}
    sheet = write_xlsx(tmp_path / "review.xlsx", rows)
    code, output = invoke("gold", "import", sheet, "-o", tmp_path / "g.jsonl")
    assert code == 2
    assert fragment in one_error_line(output)


def test_a_far_row_is_refused_before_the_gap_is_walked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(xlsxread, "MAX_ROWS", 3)
    rows = header_and_row() | {50_000_000: data_row(50_000_000, "far")}
    sheet = write_xlsx(tmp_path / "far.xlsx", rows)
    code, output = invoke("gold", "import", sheet, "-o", tmp_path / "g.jsonl")
    assert code == 2
    assert "has rows after row 3" in one_error_line(output)


# --- 5. wrong field types in run files and inputs -------------------------------------------


def run_row(ident: str, **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": ident,
        "index": 0,
        "year": 2025,
        "title": None,
        "abstract": "Text.",
        "summary": "A summary.",
        "task_area": "optimization",
        "method_tags": ["SGD"],
        "status": "ok",
        "error": None,
        "cached": False,
    }
    return row | fields


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        (
            '{"id": "b", "method_tags": 5}',
            "'method_tags' must be a list of text or null, got a number",
        ),
        ('{"id": "b", "method_tags": [1, 2]}', "'method_tags' must be a list of text or null"),
        ('{"id": "b", "task_area": ["x"]}', "'task_area' must be text or null, got a list"),
        ('{"id": "b", "summary": {"a": 1}}', "'summary' must be text or null, got an object"),
        ('{"id": "b", "year": 2025.5}', "'year' must be a whole number or null, got a number"),
        ('{"id": "b", "year": ' + "9" * 5_000 + "}", "a number with 5,000 digits (at most 100)"),
        ('{"id": "b", "cached": "yes"}', "'cached' must be true, false or null, got text"),
    ],
)
def test_run_rows_with_wrong_types_are_one_line(tmp_path: Path, line: str, fragment: str) -> None:
    run = tmp_path / "run.jsonl"
    run.write_text(json.dumps(run_row("a")) + "\n" + line + "\n", encoding="utf-8")
    for args in (
        ("export", run, "-o", tmp_path / "r.csv"),
        ("export", run, "-o", tmp_path / "r.xlsx"),
        ("compare", run, run),
        ("tags", run),
    ):
        code, output = invoke(*args)
        message = one_error_line(output)
        assert code == 2, message
        assert f"{run}:2: " in message and fragment in message


def test_gold_rows_with_wrong_types_are_reported(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    run.write_text(json.dumps(run_row("a")) + "\n", encoding="utf-8")
    gold = tmp_path / "gold.jsonl"
    bad = {"id": "a", "task_area": "optimization", "method_tags": 7, "summary": 12}
    gold.write_text(json.dumps(bad) + "\n", encoding="utf-8")
    code, output = invoke("eval", run, "--gold", gold, "--prompts-dir", PROMPTS_DIR)
    assert code == 2
    assert "Traceback" not in output
    assert "method_tags: must be a list of tags or 'a; b' text, got a number" in output
    assert "summary: must be text, got a number" in output


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("a.jsonl", '{"abstract": "x", "year": ' + "2" * 5_000 + "}\n", "5,000 digits"),
        ("b.jsonl", '{"abstract": "x", "id": ' + "1" * 5_000 + "}\n", "write it as a string"),
        ("c.csv", "abstract,year\nx," + "2" * 5_000 + "\n", "got 5,000 characters"),
        ("d.csv", "abstract,year\nx,20250\n", "got '20250'"),
    ],
)
def test_huge_numbers_in_run_inputs_are_one_line(
    tmp_path: Path, name: str, content: str, fragment: str
) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as info:
        scan([path])
    assert str(info.value).startswith(f"{path}:")
    assert fragment in str(info.value)
    assert len(str(info.value)) < 200


# --- 6. formulas behind control characters --------------------------------------------------

TRICKY_VALUES = [c + f + 'HYPERLINK("http://x","y")' for c in C0 for f in FORMULA_CHARS]


def _live(text: str) -> bool:
    """Would a spreadsheet (that drops control characters) see a formula here?"""
    return text.lstrip("".join(C0)).startswith(FORMULA_CHARS)


@pytest.mark.parametrize("suffix", [".csv", ".xlsx"])
def test_no_formula_survives_behind_a_control_character(tmp_path: Path, suffix: str) -> None:
    run = tmp_path / "run.jsonl"
    rows = [
        run_row(f"r{i}", summary=value, title=value, method_tags=[value])
        for i, value in enumerate(TRICKY_VALUES)
    ]
    run.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    sheet = tmp_path / f"review{suffix}"
    code, output = invoke("export", run, "-o", sheet)
    assert code == 0, output
    if suffix == ".csv":
        with sheet.open(encoding="utf-8-sig", newline="") as stream:
            written = [cell for row in csv.reader(stream) for cell in row]
    else:
        book = load_workbook(sheet)
        written = [str(c.value) for ws in book.worksheets for row in ws.iter_rows() for c in row]
        assert all(c.data_type != "f" for ws in book.worksheets for r in ws.iter_rows() for c in r)
    assert not [text for text in written if _live(text)]
    # gold import's reader removes exactly the added quote again.
    _, back = read_sheet(sheet)
    summaries = [values["summary"] for _, values in back]
    if suffix == ".csv":
        assert summaries == TRICKY_VALUES  # lossless
    else:  # XML cannot hold most control characters: only those are lost
        assert summaries == [_xml_text(v) for v in TRICKY_VALUES]


def _xml_text(text: str) -> str:
    kept = "".join(ch for ch in text if ch in "\t\n\r" or ch >= " ")
    return kept.replace("\r", "\n")


def test_text_longer_than_an_xlsx_cell_is_cut_visibly_and_a_long_id_refused(
    tmp_path: Path,
) -> None:
    # Excel holds 32,767 characters in a cell; openpyxl cut beyond that without a word.
    abstract = "=" + "word " * 9_000  # a formula start too: the quote stays in front
    run = tmp_path / "run.jsonl"
    run.write_text(json.dumps(run_row("a", abstract=abstract)) + "\n", encoding="utf-8")
    sheet = tmp_path / "review.xlsx"
    code, output = invoke("export", run, "-o", sheet)
    assert code == 0, output
    (_, values), *_ = read_sheet(sheet, raw=True)[1]
    written = values["abstract"]
    assert len(written) == 32_767 and written.startswith("'=word")
    kept = written.index(" … [cut: ")
    said = int(written[kept:].split("cut: ")[1].split(" ")[0].replace(",", ""))
    assert said == len("'" + abstract) - kept  # exactly what is left out
    run.write_text(json.dumps(run_row("i" * 40_000)) + "\n", encoding="utf-8")
    code, output = invoke("export", run, "-o", tmp_path / "ids.xlsx")
    assert code == 2 and "an id of 40,000 characters" in one_error_line(output), output
    assert not (tmp_path / "ids.xlsx").exists()
    code, output = invoke("export", run, "-o", tmp_path / "ids.csv")  # a CSV keeps it whole
    assert code == 0, output


# --- 7. ids ---------------------------------------------------------------------------------


def test_old_twelve_digit_ids_still_match(tmp_path: Path) -> None:
    texts = ["First abstract.", "Second abstract.", "Third abstract."]
    new_run = [run_row(text_id(t), abstract=t) for t in texts]
    old_run = [run_row(text_id(t)[:12], abstract=t) for t in texts]
    assert all(len(text_id(t)) == 24 for t in texts)
    old_gold = [
        {"id": text_id(t)[:12], "task_area": "optimization", "method_tags": ["SGD"],
         "summary": "A summary.", "taxonomy_version": "v1"}
        for t in texts
    ]  # fmt: skip
    files = {}
    for name, rows in (("new", new_run), ("old", old_run), ("gold", old_gold)):
        files[name] = tmp_path / f"{name}.jsonl"
        files[name].write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    code, output = invoke("eval", files["new"], "--gold", files["gold"], "--json")
    assert code == 0, output
    report = json.loads(output)
    assert report["coverage"]["found"] == 3 and report["task_area"]["correct"] == 3
    for a, b in ((files["old"], files["new"]), (files["new"], files["old"])):
        code, output = invoke("compare", a, b, "--gold", files["gold"], "--json")
        assert code == 0, output
        totals = json.loads(output)["totals"]
        assert (totals["compared"], totals["only_a"], totals["only_b"]) == (3, 0, 0)


# --- 8. same abstract, different titles -----------------------------------------------------


def test_same_abstract_with_other_titles_is_asked_per_title(tagger_cli: TaggerCLI) -> None:
    text = "A shared abstract about optimisation of transformers with second-order methods."
    records = [
        {"title": "Title one", "abstract": text},
        {"title": "Title two", "abstract": text},
        {"title": "Title one", "abstract": text},
    ]
    path = tagger_cli.write_jsonl("titles.jsonl", records)
    result = tagger_cli.run(inputs=[path])
    assert result.exit_code == 0, result.output
    assert len(tagger_cli.chats()) == 2
    first = tagger_cli.rows()
    assert len({row["id"] for row in first}) == 1  # the id names the abstract
    tagger_cli.fake.history.clear()
    result = tagger_cli.run(inputs=[path])
    assert result.exit_code == 0, result.output
    assert tagger_cli.chats() == []  # the rerun sends nothing
    again = tagger_cli.rows()
    strip = ("cached", "prompt_tokens", "completion_tokens", "cached_input_tokens")
    assert [{k: v for k, v in r.items() if k not in strip} for r in again] == [
        {k: v for k, v in r.items() if k not in strip} for r in first
    ]
    assert all(row["cached"] for row in again)
    assert scan([path]).unique == 2  # what --dry-run counts as distinct questions
