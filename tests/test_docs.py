"""The README and the docs site: short README, one test command, a current CLI reference."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.harness import REPO_ROOT

DOCS = REPO_ROOT / "docs"
README = REPO_ROOT / "README.md"
# The one command that regenerates docs/cli.md (written in docs/development.md too).
CLI_REFERENCE_COMMAND = ["-m", "typer", "tagger.cli.app", "utils", "docs", "--name", "tagger"]


def _fenced_commands(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def test_readme_is_short() -> None:
    assert len(README.read_bytes()) <= 10_240


def test_readme_test_command_is_what_ci_runs() -> None:
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci.startswith("pip install -e '.[dev]' && ")
    assert "mkdocs build --strict" in ci
    blocks = _fenced_commands(README.read_text(encoding="utf-8"))
    assert any(block.strip() == ci for block in blocks), ci
    for page in [README, *DOCS.glob("*.md")]:
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith("pip install -e '.[dev]' && "):
                assert line == ci, f"{page.name}: the test command differs from .ci/run's"


def test_readme_links_reach_existing_docs_pages() -> None:
    links = re.findall(r"\]\((docs/[^)#]+)", README.read_text(encoding="utf-8"))
    assert len(links) >= 10
    missing = [link for link in links if not (REPO_ROOT / link).is_file()]
    assert missing == []


def test_readme_first_screen_reaches_review_python_api_and_local_models() -> None:
    first_screen = "\n".join(README.read_text(encoding="utf-8").splitlines()[:30])
    for page in ("docs/review.md", "docs/python-api.md", "docs/local-models.md"):
        assert f"]({page})" in first_screen, page


def test_cli_reference_is_current(tmp_path: Path) -> None:
    generated = tmp_path / "cli.md"
    subprocess.run(
        [sys.executable, *CLI_REFERENCE_COMMAND, "--output", str(generated)],
        check=True,
        capture_output=True,
        cwd=REPO_ROOT,
    )
    committed = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert committed == generated.read_text(encoding="utf-8"), (
        "docs/cli.md is out of date: run "
        f"python {' '.join(CLI_REFERENCE_COMMAND)} --output docs/cli.md"
    )


def _module_map() -> list[str]:
    page = (DOCS / "development.md").read_text(encoding="utf-8")
    section = page.split("## Module map", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^- `([\w/]+\.py)`:", section, flags=re.M)


def test_module_map_lists_every_module_once_and_nothing_else() -> None:
    mapped = _module_map()
    package = REPO_ROOT / "tagger"
    tree = sorted(
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
    )
    unlisted = sorted(set(tree) - set(mapped))
    gone = sorted(set(mapped) - set(tree))
    assert (unlisted, gone) == ([], []), (
        "docs/development.md's module map is out of date: add a line "
        "'- `path.py`: its one job;' in data-flow order for each module in the first list, "
        "remove those in the second"
    )
    assert len(mapped) == len(set(mapped)), "a module is listed twice"


def test_output_page_has_one_row_per_field_of_the_row_model_in_order() -> None:
    from tagger import Row

    page = (DOCS / "output.md").read_text(encoding="utf-8")
    documented = re.findall(r"^\| `(\w+)` \|", page.split("## ", 1)[0], flags=re.M)
    assert documented == list(Row.model_fields), (
        "docs/output.md's field table must list every field of tagger.Row, one per row, in order"
    )
