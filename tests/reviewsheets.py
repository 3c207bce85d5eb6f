"""Reviewed sheets as a person saves them, and XLSX files zipped by hand, for the tests of
`tagger gold import`."""

from __future__ import annotations

import csv
import resource
import subprocess
import zipfile
from pathlib import Path

from tagger.files.sheets import SHEET_COLUMNS
from tests import harness

_NS = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG = "http://schemas.openxmlformats.org/package/2006"
_CT = "application/vnd.openxmlformats-officedocument.spreadsheetml"


def review_row(ident: str, **cells: str) -> dict[str, str]:
    """The cells of one reviewed row (no abstract, no source), `cells` replacing any of them."""
    row = {
        "reviewed": "y",
        "id": ident,
        "task_area": "optimization",
        "method_tags": "SGD; momentum",
        "summary": "Proves a faster rate for momentum SGD.",
        "taxonomy_version": "v1",
    }
    return row | cells


def write_review(path: Path, rows: list[dict[str, str]]) -> None:
    """A reviewed CSV sheet as Excel saves it (BOM, \\r\\n), every review column present."""
    with path.open("w", encoding="utf-8-sig", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=SHEET_COLUMNS, lineterminator="\r\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({column: row.get(column, "") for column in SHEET_COLUMNS})


def column_letter(number: int) -> str:
    from openpyxl.utils import get_column_letter

    return str(get_column_letter(number))


def inline_cell(ref: str, text: str) -> str:
    """One <c> element holding text inline."""
    return f'<c r="{ref}" t="inlineStr"><is><t>{text}</t></is></c>'


def zip_xlsx(
    path: Path, rows_xml: str, *, dimension: str | None = None, shared: str | None = None
) -> Path:
    """A minimal .xlsx zipped by hand: one sheet whose <sheetData> holds rows_xml, with a
    <dimension> if given, and one shared string (index 0) if given."""
    strings = shared is not None
    head = f'<dimension ref="{dimension}"/>' if dimension else ""
    parts = {
        "[Content_Types].xml": (
            f'<Types xmlns="{_PKG}/content-types">'
            f'<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
            'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
            f'<Override PartName="/xl/workbook.xml" ContentType="{_CT}.sheet.main+xml"/>'
            f'<Override PartName="/xl/worksheets/sheet1.xml" ContentType="{_CT}.worksheet+xml"/>'
            + (
                f'<Override PartName="/xl/sharedStrings.xml" '
                f'ContentType="{_CT}.sharedStrings+xml"/>'
                if strings
                else ""
            )
            + "</Types>"
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
            + (
                f'<Relationship Id="rId2" Type="{_REL}/sharedStrings" Target="sharedStrings.xml"/>'
                if strings
                else ""
            )
            + "</Relationships>"
        ),
        "xl/worksheets/sheet1.xml": (
            f"<worksheet {_NS}>{head}<sheetData>{rows_xml}</sheetData></worksheet>"
        ),
    }
    if strings:
        parts["xl/sharedStrings.xml"] = (
            f'<sst {_NS} count="1" uniqueCount="1"><si><t>{shared}</t></si></sst>'
        )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, xml in parts.items():
            archive.writestr(name, xml)
    return path


def gold_import_in_1_gib(sheet: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """`tagger gold import` in a subprocess limited to 1 GiB of address space.

    Enough for tagger; far too little for a sheet padded to its forged dimension or expanded
    from its shared strings, so a regression fails here instead of eating the machine's memory.
    """
    args = ["gold", "import", str(sheet), "-o", str(out), "--prompts-dir", str(harness.PROMPTS_DIR)]
    return subprocess.run(
        harness.subprocess_cmd(*args),
        capture_output=True,
        text=True,
        timeout=harness.SAFETY_TIMEOUT,
        cwd=out.parent,
        env=harness.clean_env(),
        preexec_fn=_limit_address_space,
    )


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
