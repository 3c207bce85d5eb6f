"""Tests for tagger.files.abstracts and its readers: formats, discovery, ids and error reporting."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tagger.errors import InputError, UsageError
from tagger.files import textlines
from tagger.files.abstracts import Abstract, iter_abstracts, scan, text_id
from tagger.files.inputfolders import SUPPORTED_SUFFIXES, discover
from tagger.files.inputformats import parse_header
from tests.harness import SEEDS_DIR

LONG = "x" * 250


def write(path: Path, text: str | bytes) -> Path:
    """Write text (UTF-8) or raw bytes to path and return it."""
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def read_all(*paths: Path | str) -> list[Abstract]:
    """Scan the paths, then stream them, returning the streamed abstracts."""
    result = scan(list(paths))
    items = list(iter_abstracts(result.files))
    assert len(items) == result.count
    return items


def raises_at(path: Path | str, line: int | None, *fragments: str) -> Any:
    """Assert scan(path) raises an InputError naming the file (and line) and the fragments."""
    with pytest.raises(InputError) as info:
        scan([path])
    err = info.value
    text = str(err)
    assert isinstance(err, UsageError)
    assert str(path) in text
    assert err.path == str(path)
    assert err.line == line
    if line is not None:
        assert f"{path}:{line}: " in text
    for fragment in fragments:
        assert fragment in text
    assert "\n" not in text
    return err


# --- seeds ----------------------------------------------------------------------------------


def test_seed_directory_has_57_abstracts() -> None:
    result = scan([SEEDS_DIR])
    assert result.count == 57
    assert result.unique == 57
    assert [p.name for p in result.files] == sorted(p.name for p in SEEDS_DIR.glob("*.txt"))
    assert list(result.per_file.values()) == [19, 19, 19]
    assert list(result.per_file) == [str(p) for p in result.files]


def test_seed_venues_years_and_positions() -> None:
    items = list(iter_abstracts(discover([SEEDS_DIR])))
    assert len(items) == 57
    assert {a.venue for a in items} == {"NeurIPS"}
    years = {a.source: a.year for a in items}
    assert list(years.values()) == [2026, 2025, 2025]
    assert [a.index for a in items] == list(range(57))
    first = items[0]
    assert first.line == 3
    assert first.source == str(SEEDS_DIR / "000_c957ce158ed6d14c.txt")
    assert first.text.startswith("Variance reduction techniques")
    assert first.id == text_id(first.text)
    assert all(a.text == a.text.strip() and "\n" not in a.text for a in items)
    assert all(a.title is None and a.extra == {} for a in items)


def test_seed_relative_source_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(SEEDS_DIR.parent)
    items = read_all("seeds")
    assert items[0].source == os.path.join("seeds", "000_c957ce158ed6d14c.txt")


# --- headers and paragraphs -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("NeurIPS 2026 Papers", ("NeurIPS", 2026)),
        ("NeurIPS 2025 论文列表", ("NeurIPS", 2025)),
        ("  ICML 1999 accepted  ", ("ICML", 1999)),
        ("CVPR (2023)", ("CVPR", 2023)),
        ("NeurIPS2024 list", ("NeurIPS", 2024)),
        ("My reading list", ("My reading list", None)),
        ("Top 12025 papers", ("Top 12025 papers", None)),
        ("2024 papers", (None, 2024)),
        ("", (None, None)),
    ],
)
def test_parse_header(header: str, expected: tuple[str | None, int | None]) -> None:
    assert parse_header(header) == expected


def test_paragraphs_are_joined_and_lines_reported(tmp_path: Path) -> None:
    path = write(
        tmp_path / "a.txt",
        "\n\nACL 2024 论文\n\nfirst line\n  second line  \n\n\n\n"
        "third para\r\nmore\r\n   \n last \n",
    )
    items = read_all(path)
    assert [a.text for a in items] == ["first line second line", "third para more", "last"]
    assert [a.line for a in items] == [5, 10, 13]
    assert {(a.venue, a.year) for a in items} == {("ACL", 2024)}


def test_seed_without_header(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", "one\ntwo\n\nthree\n")
    items = read_all(path)
    assert [a.text for a in items] == ["one two", "three"]
    assert [(a.venue, a.year, a.line) for a in items] == [(None, None, 1), (None, None, 4)]


def test_long_single_first_line_is_an_abstract(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", f"{LONG}\n\nsecond\n")
    assert [a.text for a in read_all(path)] == [LONG, "second"]


def test_seed_header_with_bom(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", b"\xef\xbb\xbfEMNLP 2023 list\n\nabc\n")
    [item] = read_all(path)
    assert (item.venue, item.year, item.text, item.line) == ("EMNLP", 2023, "abc", 3)


# --- JSONL ----------------------------------------------------------------------------------


def test_jsonl_ids_fields_and_extra(tmp_path: Path) -> None:
    rows = [
        {"id": "p1", "abstract": "  Alpha text. ", "title": "T", "venue": "ICLR", "year": 2024},
        {"id": 7, "abstract": "Beta", "year": "2023", "doi": "10.1/x", "tags": ["a"]},
        {"abstract": "Gamma", "id": None, "year": None, "title": ""},
    ]
    lines = [json.dumps(rows[0]), "", "   ", json.dumps(rows[1]), json.dumps(rows[2])]
    path = write(tmp_path / "a.jsonl", "\n".join(lines) + "\n")
    a, b, c = read_all(path)
    assert (a.id, a.text, a.title, a.venue, a.year, a.line) == (
        "p1",
        "Alpha text.",
        "T",
        "ICLR",
        2024,
        1,
    )
    assert a.extra == {}
    assert (b.id, b.year, b.venue, b.title, b.line) == ("7", 2023, None, None, 4)
    assert b.extra == {"doi": "10.1/x", "tags": ["a"]}
    assert (c.id, c.year, c.title, c.line) == (text_id("Gamma"), None, None, 5)
    assert [x.index for x in (a, b, c)] == [0, 1, 2]
    assert all(x.source == str(path) for x in (a, b, c))


def test_jsonl_with_bom_and_crlf(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", b'\xef\xbb\xbf{"abstract": "x"}\r\n{"abstract": "y"}\r\n')
    assert [(a.text, a.line) for a in read_all(path)] == [("x", 1), ("y", 2)]


# --- CSV ------------------------------------------------------------------------------------


def test_csv_bom_quotes_newlines_and_lines(tmp_path: Path) -> None:
    text = (
        "\ufeff ID ,Title, Abstract ,YEAR,Venue,notes\r\n"
        'a1,"Hello, world","first, with comma",2024,ICML,n1\r\n'
        "\r\n"
        'a2,T2,"multi\r\nline\r\n""quoted""",,,\r\n'
        ",T3,third,2021,,\r\n"
    )
    path = write(tmp_path / "a.csv", text)
    a, b, c = read_all(path)
    assert (a.id, a.title, a.text, a.year, a.venue, a.line) == (
        "a1",
        "Hello, world",
        "first, with comma",
        2024,
        "ICML",
        2,
    )
    assert a.extra == {"notes": "n1"}
    assert (b.id, b.text, b.year, b.venue, b.line) == (
        "a2",
        'multi\r\nline\r\n"quoted"',
        None,
        None,
        4,
    )
    assert (c.id, c.text, c.year, c.line) == (text_id("third"), "third", 2021, 7)


def test_csv_short_rows_and_empty_rows(tmp_path: Path) -> None:
    path = write(tmp_path / "a.csv", "abstract,extra1,\nonly abstract\n,,\nsecond,e,z\n")
    a, b = read_all(path)
    assert (a.text, a.extra, a.line) == ("only abstract", {"extra1": "", "column3": ""}, 2)
    assert (b.text, b.extra, b.line) == ("second", {"extra1": "e", "column3": "z"}, 4)


# --- discovery ------------------------------------------------------------------------------


def test_supported_suffixes() -> None:
    assert SUPPORTED_SUFFIXES == (".txt", ".jsonl", ".csv", ".json")


def test_directory_discovery_order_and_skips(tmp_path: Path) -> None:
    write(tmp_path / "b.jsonl", '{"abstract": "b"}\n')
    write(tmp_path / "a.txt", "List\n\na\n")
    write(tmp_path / "c.csv", "abstract\nc\n")
    write(tmp_path / "10.txt", "List\n\nten\n")
    write(tmp_path / ".hidden.txt", "hidden\n")
    write(tmp_path / "notes.md", "no\n")
    write(tmp_path / "paper.pdf", b"%PDF\x00")
    (tmp_path / "sub.txt").mkdir()
    write(tmp_path / "sub.txt" / "inner.txt", "inner\n")
    files = discover([tmp_path])
    assert [p.name for p in files] == ["10.txt", "a.txt", "b.jsonl", "c.csv"]
    assert files[0] == tmp_path / "10.txt"
    items = read_all(tmp_path)
    assert [(a.text, a.index) for a in items] == [("ten", 0), ("a", 1), ("b", 2), ("c", 3)]


def test_discover_keeps_argument_order_and_dedupes(tmp_path: Path) -> None:
    one = write(tmp_path / "z.txt", "List\n\nz\n")
    two = write(tmp_path / "a.jsonl", '{"abstract": "a"}\n')
    assert discover([one, str(two), one, tmp_path]) == [one, two]
    result = scan([one, two, one])
    assert (result.count, result.per_file) == (2, {str(one): 1, str(two): 1})


def test_explicit_unsupported_file(tmp_path: Path) -> None:
    path = write(tmp_path / "paper.pdf", "x")
    raises_at(path, None, "unsupported file type '.pdf': use .txt, .jsonl, .csv or .json")


def test_explicit_hidden_file_is_allowed(tmp_path: Path) -> None:
    path = write(tmp_path / ".mine.txt", "List\n\nhello\n")
    assert [a.text for a in read_all(path)] == ["hello"]


def test_directory_without_supported_files(tmp_path: Path) -> None:
    write(tmp_path / "x.md", "x")
    write(tmp_path / ".y.txt", "y")
    raises_at(tmp_path, None, "no .txt, .jsonl, .csv or .json files")


def test_missing_path(tmp_path: Path) -> None:
    raises_at(tmp_path / "nope.txt", None, "no such file or directory")


# --- ids ------------------------------------------------------------------------------------


def test_text_id_is_stable_under_whitespace() -> None:
    expected = hashlib.sha256(b"a b c").hexdigest()[:24]
    assert text_id("a b c") == expected
    assert text_id("  a\n b\t\tc \r\n") == expected
    assert len(expected) == 24
    assert text_id("a b d") != expected


def test_whitespace_variants_get_same_id_across_files(tmp_path: Path) -> None:
    write(tmp_path / "a.txt", "Deep  nets\nwork.\n")
    write(tmp_path / "b.jsonl", json.dumps({"abstract": "Deep nets\twork."}) + "\n")
    items = read_all(tmp_path)
    assert items[0].id == items[1].id == text_id("Deep nets work.")


def test_duplicate_text_is_allowed(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", "List\n\nsame text\n\nsame   text\n\nother\n")
    result = scan([path])
    assert (result.count, result.unique) == (3, 2)


def test_same_explicit_id_with_same_text_is_allowed(tmp_path: Path) -> None:
    path = write(
        tmp_path / "a.jsonl", '{"id": "x", "abstract": "t"}\n{"id": "x", "abstract": " t "}\n'
    )
    assert (scan([path]).count, scan([path]).unique) == (2, 1)


def test_conflicting_duplicate_id_is_rejected(tmp_path: Path) -> None:
    first = write(tmp_path / "a.jsonl", '{"id": "x", "abstract": "one"}\n')
    second = write(tmp_path / "b.csv", "id,abstract\ny,zzz\nx,two\n")
    with pytest.raises(InputError) as info:
        scan([tmp_path])
    err = info.value
    assert (err.path, err.line) == (str(second), 3)
    assert str(err) == (
        f"{second}:3: duplicate id 'x' with different text (first at {first}:1): make ids unique"
    )


# --- errors ---------------------------------------------------------------------------------


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "a.txt", "hello\n")

    def denied(*args: object, **kwargs: object) -> Any:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(textlines, "open", denied, raising=False)
    raises_at(path, None, "permission denied")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads anything")
def test_unreadable_file_chmod(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", "hello\n")
    path.chmod(0)
    try:
        raises_at(path, None, "permission denied")
    finally:
        path.chmod(0o644)


def test_binary_file(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", b"ok\nok\nbad\x00bytes\n")
    raises_at(path, 3, "binary file, not text: give a .txt, .jsonl or .csv file")


def test_nul_after_sniff_window(tmp_path: Path) -> None:
    body = ("para\n\n" * 3000).encode() + b"late\x00nul\n"
    path = write(tmp_path / "a.txt", body)
    raises_at(path, 6001, "binary file")


def test_utf16_file(tmp_path: Path) -> None:
    path = write(tmp_path / "a.csv", "abstract\nx\n".encode("utf-16"))
    raises_at(path, 1, "UTF-16", "re-save the file as UTF-8")


@pytest.mark.parametrize("name", ["a.txt", "a.jsonl", "a.csv"])
def test_invalid_utf8(tmp_path: Path, name: str) -> None:
    lines = {
        "a.txt": b"head 2020\n\nfine\ncaf\xe9\n",
        "a.jsonl": b'{"abstract": "fine"}\n\n{"abstract": "caf\xe9"}\n',
        "a.csv": b'abstract\nfine\n"caf\xe9"\n',
    }[name]
    path = write(tmp_path / name, lines)
    line = lines[: lines.index(b"\xe9")].count(b"\n") + 1
    offset = lines.index(b"\xe9")
    raises_at(path, line, f"not valid UTF-8 (byte offset {offset}): re-save the file as UTF-8")


def test_invalid_utf8_offset_counts_bom(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", b"\xef\xbb\xbfab\xffc\n")
    raises_at(path, 1, "byte offset 5")


def test_invalid_json(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", '{"abstract": "ok"}\n{"abstract": "x",}\n')
    raises_at(path, 2, "invalid JSON: ")


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ('["abstract"]', "expected a JSON object, got array"),
        ('"text"', "expected a JSON object, got string"),
        ('{"title": "x"}', "no 'abstract' field"),
        ('{"abstract": ""}', "empty abstract"),
        ('{"abstract": "  \\n "}', "empty abstract"),
        ('{"abstract": null}', "empty abstract"),
        ('{"abstract": 5}', "'abstract' must be a string, got number"),
        ('{"abstract": ["x"]}', "'abstract' must be a string, got array"),
        ('{"abstract": "x", "id": 1.5}', "'id' must be a string or integer"),
        ('{"abstract": "x", "id": true}', "'id' must be a string or integer, got boolean"),
        ('{"abstract": "x", "year": "soon"}', "'year' must be a whole number"),
        ('{"abstract": "x", "title": 3}', "'title' must be a string"),
    ],
)
def test_bad_jsonl_records(tmp_path: Path, line: str, fragment: str) -> None:
    path = write(tmp_path / "a.jsonl", '{"abstract": "fine"}\n\n' + line + "\n")
    raises_at(path, 3, fragment)


def test_csv_without_abstract_column(tmp_path: Path) -> None:
    path = write(tmp_path / "a.csv", "\nid, Title ,body\n1,t,b\n")
    raises_at(path, 2, "no 'abstract' column (columns: id, Title, body)")


def test_csv_tab_hint(tmp_path: Path) -> None:
    path = write(tmp_path / "a.csv", "id\tabstract\n1\tx\n")
    raises_at(path, 1, "no 'abstract' column", "not '\\t'")


def test_csv_empty_abstract_cell(tmp_path: Path) -> None:
    path = write(tmp_path / "a.csv", 'id,abstract\n1,"a\nb"\n2,  \n')
    raises_at(path, 4, "empty abstract")


def test_csv_too_many_cells(tmp_path: Path) -> None:
    path = write(tmp_path / "a.csv", "id,abstract\n1,ok\n2,has, a comma\n")
    raises_at(path, 3, "row has 3 cells but the header has 2")


def test_csv_unterminated_quote(tmp_path: Path) -> None:
    path = write(tmp_path / "a.csv", 'abstract\nok\n"never closed\nmore\n')
    raises_at(path, 3, "invalid CSV")


def test_csv_duplicate_column(tmp_path: Path) -> None:
    path = write(tmp_path / "a.csv", "abstract,Abstract\nx,y\n")
    raises_at(path, 1, "duplicate column 'Abstract'")


def test_csv_bad_year(tmp_path: Path) -> None:
    path = write(tmp_path / "a.csv", "abstract,year\nx,2024\ny,20x4\n")
    raises_at(path, 3, "'year' must be a whole number like 2025, got '20x4'")


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("a.txt", ""),
        ("a.txt", "\n  \n\n"),
        ("a.jsonl", ""),
        ("a.jsonl", "\n \n"),
        ("a.csv", ""),
        ("a.csv", "abstract,id\n"),
        ("a.csv", "abstract,id\n,\n"),
    ],
)
def test_no_abstracts_found(tmp_path: Path, name: str, content: str) -> None:
    raises_at(write(tmp_path / name, content), None, "no abstracts found")


def test_seed_file_with_only_header(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", "\n\nNeurIPS 2026 Papers\n\n\n")
    raises_at(path, 3, "only a header line, no abstracts")


def test_error_in_second_file_names_that_file(tmp_path: Path) -> None:
    write(tmp_path / "a.txt", "List\n\nfine\n")
    bad = write(tmp_path / "b.jsonl", '{"abstract": "ok"}\nnot json\n')
    err = raises_at_dir(tmp_path)
    assert (err.path, err.line) == (str(bad), 2)


def raises_at_dir(path: Path) -> InputError:
    """Return the InputError scan raises for a directory."""
    with pytest.raises(InputError) as info:
        scan([path])
    return info.value


# --- streaming ------------------------------------------------------------------------------


def test_iter_abstracts_matches_scan(tmp_path: Path) -> None:
    write(tmp_path / "a.txt", "Head 2020\n\none\n\ntwo\n")
    write(tmp_path / "b.jsonl", '{"id": "k", "abstract": "three"}\n{"abstract": "one"}\n')
    write(tmp_path / "c.csv", "abstract\nfour\n")
    result = scan([tmp_path])
    items = list(iter_abstracts(result.files))
    assert result.count == len(items) == 5
    assert result.unique == len({a.id for a in items}) == 4
    assert [a.index for a in items] == [0, 1, 2, 3, 4]
    assert [a.id for a in items] == [
        text_id("one"),
        text_id("two"),
        "k",
        text_id("one"),
        text_id("four"),
    ]
    per_file: dict[str, int] = {}
    for item in items:
        per_file[item.source] = per_file.get(item.source, 0) + 1
    assert per_file == result.per_file


def test_iter_abstracts_is_lazy(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", '{"abstract": "first"}\n{broken\n')
    stream = iter_abstracts([path])
    assert next(stream).text == "first"
    with pytest.raises(InputError, match=r"a\.jsonl:2: invalid JSON"):
        next(stream)


def test_abstract_is_frozen() -> None:
    item = Abstract(id="i", text="t", source="s", index=0, line=1)
    with pytest.raises(AttributeError):
        item.text = "u"  # type: ignore[misc]
    assert (item.venue, item.year, item.title, item.extra) == (None, None, None, {})


def test_a_folder_of_pdfs_says_what_was_skipped_and_what_tagger_reads(tmp_path: Path) -> None:
    for name in ("a.pdf", "b.pdf", "c.PDF", "notes.docx", "README"):
        write(tmp_path / name, "%PDF-1.4")
    (tmp_path / "more").mkdir()
    err = raises_at_dir(tmp_path)
    text = str(err)
    assert "skipped 5 files: 3 .pdf, 1 .docx, 1 no suffix" in text
    assert "1 subfolder not searched" in text
    assert "extract the abstracts to one of these first" in text
    assert "tagger reads abstracts from .txt (one per line), .jsonl, .csv or .json" in text
    assert "own output" not in text  # a PDF is nobody's output


def test_a_folder_of_only_tagger_files_says_so_and_asks_no_extraction(tmp_path: Path) -> None:
    row = {"id": "x", "abstract": "a", "prompt_hash": "h", "taxonomy_version": "v1"}
    write(tmp_path / "one.jsonl", json.dumps(row) + "\n")
    write(tmp_path / "two.jsonl", json.dumps(row) + "\n")
    write(tmp_path / "run.lock", "")
    text = str(raises_at_dir(tmp_path))
    assert "skipped 3 files: 2 run outputs tagger wrote, 1 run lock file tagger wrote" in text
    assert "extract" not in text


def test_an_empty_folder_says_it_is_empty(tmp_path: Path) -> None:
    assert "this directory (it is empty)" in str(raises_at_dir(tmp_path))


def test_a_folder_of_a_thousand_kinds_is_said_in_one_short_line(tmp_path: Path) -> None:
    for i in range(30):
        write(tmp_path / f"f{i}.x{i}", "x")
    text = str(raises_at_dir(tmp_path))
    assert "skipped 30 files:" in text and "24 files of 24 other kinds" in text
    assert len(text) < 400
