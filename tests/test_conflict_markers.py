"""No tracked file keeps a merge-conflict marker: CI fails on the first one left behind.

Git writes a conflict as `<<<<<<< ours`, `=======`, `>>>>>>> theirs` (and `||||||| base` in the
diff3 style), each at the start of a line and exactly seven characters long. A Markdown setext
heading underlined with exactly seven `=` would look the same, so the docs use `#` headings.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.harness import REPO_ROOT

# Seven characters exactly: `<<<<<<<<` or a longer `========` rule is not a marker.
_MARKER = re.compile(r"^(?:(?:<{7}|>{7}|\|{7})(?: .*)?|={7})\r?$", re.M)
# Folders a tree walk skips when there is no git to say what is tracked: tools' own output.
_UNTRACKED_DIRS = {
    ".git",
    ".venv",
    "venv",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    "__pycache__",
    "site",
    "build",
    "dist",
    "cache",
    "node_modules",
}


def conflict_markers(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every conflict-marker line in `text`."""
    return [
        (text.count("\n", 0, match.start()) + 1, match.group().rstrip("\r"))
        for match in _MARKER.finditer(text)
    ]


def _tracked_files(root: Path) -> Iterator[Path]:
    """The files git tracks under `root`; outside a git checkout, every file of the tree."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        listed = None
    if listed:
        for name in listed.decode("utf-8", "surrogateescape").split("\0"):
            if name:
                yield root / name
        return
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _UNTRACKED_DIRS and not d.endswith(".egg-info")]
        for name in files:
            yield Path(folder) / name


def _markers_in_tree(root: Path) -> list[str]:
    found = []
    for path in _tracked_files(root):
        if path.is_symlink():  # git keeps the link, not what it points to (maybe /dev/zero)
            continue
        try:
            data = path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):  # deleted, not yet staged; a submodule
            continue
        if b"\0" in data[:8192]:  # binary: git does not write markers into it
            continue
        text = data.decode("utf-8", "replace")
        found += [f"{path.relative_to(root)}:{n}: {line}" for n, line in conflict_markers(text)]
    return found


def test_no_tracked_file_holds_a_conflict_marker() -> None:
    found = _markers_in_tree(REPO_ROOT)
    assert found == [], "resolve these merge conflicts:\n" + "\n".join(found)


def test_every_marker_form_is_found_and_nothing_else() -> None:
    ours, sep, base, theirs = "<" * 7, "=" * 7, "|" * 7, ">" * 7
    text = "\n".join(
        [
            "Title",
            "=" * 8,  # a longer setext underline is a heading, not a marker
            f"{ours} HEAD",
            "a",
            f"{base} merged common ancestors",
            sep + "\r",  # a CRLF file
            "b",
            f"{theirs} main",
            "<" * 8 + " not git's",
            f" {ours} indented",
            f"{ours}x",
            ours,
            "",
        ]
    )
    assert [n for n, _ in conflict_markers(text)] == [3, 5, 6, 8, 12]
    assert conflict_markers(text)[2] == (6, sep)


def test_outside_git_the_tree_is_walked(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("ok\n" + "=" * 7 + "\nmore\n", encoding="utf-8")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "lib.py").write_text(">" * 7 + " theirs\n", encoding="utf-8")
    (tmp_path / "blob.bin").write_bytes(b"\0" + b"\n" + b"<" * 7 + b" HEAD\n")
    (tmp_path / "endless").symlink_to("/dev/zero")  # a planted link is not read through
    assert _markers_in_tree(tmp_path) == [f"{Path('docs') / 'page.md'}:2: " + "=" * 7]
