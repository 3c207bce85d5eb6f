"""A small XLSX cannot make gold import write (or hold) hundreds of MB through shared strings."""

from __future__ import annotations

import resource
import subprocess
import zipfile
from pathlib import Path

from tagger.files.sheets import SHEET_COLUMNS
from tests import harness
from tests.harness import PROMPTS_DIR

_NS = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG = "http://schemas.openxmlformats.org/package/2006"
_CT = "application/vnd.openxmlformats-officedocument.spreadsheetml"


def _letter(number: int) -> str:
    from openpyxl.utils import get_column_letter

    return str(get_column_letter(number))


def _shared_string_sheet(path: Path, rows: int, text: str) -> Path:
    """A review sheet whose every abstract cell names one shared string (index 0)."""
    column = {name: _letter(i) for i, name in enumerate(SHEET_COLUMNS, start=1)}
    header = "".join(
        f'<c r="{column[name]}1" t="inlineStr"><is><t>{name}</t></is></c>' for name in SHEET_COLUMNS
    )
    body = [f'<row r="1">{header}</row>']
    for n in range(2, rows + 2):
        values = {"reviewed": "y", "id": f"id{n}", "task_area": "other",
                  "method_tags": "transformer", "summary": "A summary."}  # fmt: skip
        cells = {
            name: f'<c r="{column[name]}{n}" t="inlineStr"><is><t>{value}</t></is></c>'
            for name, value in values.items()
        }
        cells["abstract"] = f'<c r="{column["abstract"]}{n}" t="s"><v>0</v></c>'
        ordered = "".join(cells[name] for name in SHEET_COLUMNS if name in cells)
        body.append(f'<row r="{n}">{ordered}</row>')
    parts = {
        "[Content_Types].xml": (
            f'<Types xmlns="{_PKG}/content-types">'
            f'<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
            'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
            f'<Override PartName="/xl/workbook.xml" ContentType="{_CT}.sheet.main+xml"/>'
            f'<Override PartName="/xl/worksheets/sheet1.xml" ContentType="{_CT}.worksheet+xml"/>'
            f'<Override PartName="/xl/sharedStrings.xml" ContentType="{_CT}.sharedStrings+xml"/>'
            "</Types>"
        ),
        "_rels/.rels": (
            f'<Relationships xmlns="{_PKG}/relationships"><Relationship Id="rId1" '
            f'Type="{_REL}/officeDocument" Target="xl/workbook.xml"/></Relationships>'
        ),
        "xl/workbook.xml": (
            f'<workbook {_NS} xmlns:r="{_REL}"><sheets>'
            '<sheet name="review" sheetId="1" r:id="rId1"/></sheets></workbook>'
        ),
        "xl/_rels/workbook.xml.rels": (
            f'<Relationships xmlns="{_PKG}/relationships"><Relationship Id="rId1" '
            f'Type="{_REL}/worksheet" Target="worksheets/sheet1.xml"/>'
            f'<Relationship Id="rId2" Type="{_REL}/sharedStrings" Target="sharedStrings.xml"/>'
            "</Relationships>"
        ),
        "xl/sharedStrings.xml": (
            f'<sst {_NS} count="1" uniqueCount="1"><si><t>{text}</t></si></sst>'
        ),
        "xl/worksheets/sheet1.xml": (
            f"<worksheet {_NS}><sheetData>{''.join(body)}</sheetData></worksheet>"
        ),
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, xml in parts.items():
            archive.writestr(name, xml)
    return path


def _gold_import_in_1_gib(sheet: Path, out: Path) -> subprocess.CompletedProcess[str]:
    args = ["gold", "import", str(sheet), "-o", str(out), "--prompts-dir", str(PROMPTS_DIR)]
    return subprocess.run(
        harness.subprocess_cmd(*args),
        capture_output=True,
        text=True,
        timeout=harness.SAFETY_TIMEOUT,
        cwd=out.parent,
        env=harness.clean_env(),
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)),
    )


def test_a_long_shared_string_repeated_in_every_row_is_refused(tmp_path: Path) -> None:
    sheet = _shared_string_sheet(tmp_path / "bomb.xlsx", 10_000, "amplified " * 3_000)
    assert sheet.stat().st_size < 300_000  # ~300 MB of text once every cell is expanded
    out = tmp_path / "gold.jsonl"
    done = _gold_import_in_1_gib(sheet, out)
    errors = [line for line in (done.stdout + done.stderr).splitlines() if "Error" in line]
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        len(errors) == 1 and "shared strings" in errors[0] and "save the sheet as .csv" in errors[0]
    )
    assert not out.exists()


def test_short_values_repeated_through_shared_strings_still_import(tmp_path: Path) -> None:
    sheet = _shared_string_sheet(tmp_path / "fine.xlsx", 2_000, "A short abstract, shared.")
    out = tmp_path / "gold.jsonl"
    done = _gold_import_in_1_gib(sheet, out)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(out.read_text().splitlines()) == 2_000
