"""The files the docs' walkthrough writes in a checkout stay out of `git status`."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tagger.cli.sample import design_path
from tagger.files.outfile import lock_path
from tagger.files.rows import manifest_path, partial_path
from tagger.ray.parts import parts_dir
from tests.harness import REPO_ROOT

_PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
_OUTPUT = re.compile(r"(?:^|\s)(?:-o|--output)\s+(\S+)")


def walkthrough_outputs() -> set[str]:
    """Every file a fenced `sh` example of the README or the docs writes in the checkout, and
    the files tagger writes beside each (manifest, rows while running, lock, Ray's parts)."""
    names = {"tagged.jsonl"}  # tagger run's default -o
    for page in _PAGES:
        for block in re.findall(r"```sh\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            found = {m.group(1) for m in _OUTPUT.finditer(block)}
            names |= found - {"-", "docs/cli.md"}  # stdout; the generated reference, tracked
    beside: set[Path] = set()
    for name in map(Path, names):
        if name.suffix == ".jsonl":
            beside |= {manifest_path(name), partial_path(name), lock_path(name)}
            beside.add(parts_dir(name) / "part-1.jsonl")
        else:  # a sheet: a sample's design is written beside it
            beside.add(design_path(name))
    return names | {str(path) for path in beside}


def test_every_file_the_walkthrough_writes_is_ignored() -> None:
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to keep out of git status")
    names = sorted(walkthrough_outputs())
    assert {"v1.jsonl", "gold.jsonl", "review.xlsx", "tagged.manifest.json"} <= set(names)
    checked = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        input="\n".join(names) + "\n",
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    ignored = set(checked.stdout.split())
    assert [name for name in names if name not in ignored] == []


def test_the_project_s_own_files_are_not_ignored() -> None:
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(
        ["git", "ls-files", "-ci", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert tracked == []  # a pattern that hides a tracked file would hide its next version too
