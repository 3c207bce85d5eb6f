"""The layout: the CLI package's import graph, one owner per rule, one atomic writer."""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from tagger.cli.app import app
from tagger.files.atomic import write_atomic
from tagger.prompting.schema import SUMMARY_WORD_LIMIT, clean_summary
from tagger.review.gold import check_summary
from tests.harness import PROMPTS_DIR, REPO_ROOT, invoke
from tests.reviewsheets import review_row, write_review

PACKAGE = REPO_ROOT / "tagger"
CLI = PACKAGE / "cli"


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of the tree but those under `if TYPE_CHECKING:` (never imported at run time)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            continue
        yield node
        yield from _runtime_nodes(node)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import run in the file, at its top or inside a function."""
    found: list[tuple[str, list[str]]] = []
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [alias.name for alias in node.names]
            found.append((node.module, names))
            # `from tagger.cli import common` imports the module tagger.cli.common
            found += [(f"{node.module}.{name}", []) for name in names]
    return found


def _every_import(path: Path) -> list[tuple[str, str | None]]:
    """(module, name) of every import in a file: at its top, in a function, for typing."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [(node.module, alias.name) for alias in node.names]
    return found


def _package_graph() -> dict[str, set[str]]:
    """Module -> the tagger modules it imports. `from tagger import defaults` imports the
    module tagger.defaults; `from x import name` imports x. A package's parents are not
    counted: importing tagger.a.b runs tagger/__init__ first, which must import little."""
    modules = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported = set()
        for module, attribute in _every_import(path):
            if not (module == "tagger" or module.startswith("tagger.")):
                continue
            if attribute is not None and f"{module}.{attribute}" in modules:
                module = f"{module}.{attribute}"
            while module not in modules and "." in module:
                module = module.rpartition(".")[0]
            imported.add(module)
        graph[name] = imported - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle (Tarjan's strongly connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_anywhere_counting_imports_in_functions_and_for_typing() -> None:
    graph = _package_graph()
    assert _cycles(graph) == []
    # The check sees what it must: the imports inside functions and under TYPE_CHECKING.
    assert "tagger.pipeline.job" in graph["tagger.cli.job"]  # inside run_command
    assert "tagger.pipeline.stats" in graph["tagger.pipeline.progress"]  # for typing only
    assert "tagger.api" in graph["tagger"]  # tagger/__init__'s lazy names
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _cli_modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(CLI.glob("*.py"))}


def test_the_core_never_imports_the_cli() -> None:
    entry_point = PACKAGE / "__main__.py"  # `python -m tagger` runs the command line
    offenders = [
        f"{_module_name(path)} imports {module}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if CLI not in path.parents and path != entry_point
        for module, _ in _imports(path)
        if module == "tagger.cli" or module.startswith("tagger.cli.")
    ]
    assert offenders == []


def test_cli_modules_import_each_other_without_a_cycle() -> None:
    modules = _cli_modules()
    graph = {
        name: {m for m, _ in _imports(path) if m in modules and m != name}
        for name, path in modules.items()
    }
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, "import cycle: " + " -> ".join((*path, name))
        if name in done:
            return
        for imported in sorted(graph[name]):
            visit(imported, (*path, name))
        done.add(name)

    for name in sorted(graph):
        visit(name, ())
    assert graph["tagger.cli.app"] >= {"tagger.cli.cache", "tagger.cli.prompts"}


def test_no_cli_module_takes_another_ones_private_names() -> None:
    modules = _cli_modules()
    taken = [
        f"{name} takes {module}.{imported}"
        for name, path in modules.items()
        for module, names in _imports(path)
        if module in modules and module != name
        for imported in names
        if imported.startswith("_")
    ]
    assert taken == []


def test_every_rich_table_is_built_in_the_tables_modules() -> None:
    # tables.py holds run's and prompts'; reviewtables.py and errortables.py the review
    # commands' (split by the modules' size limit)
    building = sorted(
        name
        for name, path in _cli_modules().items()
        for module, names in _imports(path)
        if module == "rich.table" or (module == "rich" and "table" in names)
    )
    assert building == ["tagger.cli.errortables", "tagger.cli.reviewtables", "tagger.cli.tables"]


def test_shared_options_and_errors_have_one_module() -> None:
    assert importlib.util.find_spec("tagger.cli.options") is None
    for name, path in _cli_modules().items():
        declared = [
            node.targets[0].id
            for node in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in ("BaseUrlOpt", "ApiKeyOpt", "CacheDirOpt", "PathsArg")
        ]
        assert name == "tagger.cli.common" or declared == [], (name, declared)


def test_the_app_only_adds_commands_defined_elsewhere() -> None:
    callbacks = [info.callback for info in app.registered_commands]
    for group in app.registered_groups:
        assert group.typer_instance is not None and group.typer_instance.registered_callback
        callbacks.append(group.typer_instance.registered_callback.callback)
        callbacks += [info.callback for info in group.typer_instance.registered_commands]
    modules = {callback.__module__ for callback in callbacks if callback is not None}
    assert "tagger.cli.app" not in modules
    assert {"tagger.cli.cache", "tagger.cli.prompts", "tagger.cli.run"} <= modules


# --- one owner per rule ------------------------------------------------------------------------


@pytest.mark.parametrize("words", [0, SUMMARY_WORD_LIMIT, SUMMARY_WORD_LIMIT + 1, 80])
def test_gold_summary_check_is_the_answer_schemas(words: int) -> None:
    text = " ".join(["word"] * words)
    try:
        clean_summary(text)
        expected = None
    except ValueError as exc:
        expected = str(exc)
    assert check_summary(text) == expected


def test_gold_summary_must_still_be_one_line() -> None:
    assert check_summary("two\nlines") == "must be one line"


# --- one atomic writer -------------------------------------------------------------------------


def test_atomic_write_replaces_whole_or_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "gold.jsonl"
    target.write_text("old\n", encoding="utf-8")
    write_atomic(target, "new\n")
    assert target.read_text(encoding="utf-8") == "new\n"
    blocked = tmp_path / "a-directory"
    blocked.mkdir()
    with pytest.raises(Exception, match="cannot write"):
        write_atomic(blocked, "text\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-directory", "gold.jsonl"]


def test_gold_import_onto_a_directory_is_one_line_and_leaves_no_temporary(tmp_path: Path) -> None:
    sheet = tmp_path / "review.csv"
    write_review(sheet, [review_row("a", abstract="Abstract of a.", source="s.txt")])
    output = tmp_path / "gold"
    output.mkdir()
    result = invoke(["gold", "import", sheet, "-o", output, "--prompts-dir", PROMPTS_DIR])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 1, result.output
    assert len(lines) == 1 and lines[0].startswith(f"Error: cannot write {output}"), lines
    assert "unexpected" not in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gold", "review.csv"]


# --- the layout ships whole --------------------------------------------------------------------


def test_every_subpackage_ships_in_the_wheel() -> None:
    import tomllib

    listed = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "setuptools"
    ]["packages"]
    found = {_module_name(init.parent / "__init__.py") for init in PACKAGE.rglob("__init__.py")}
    assert found - set(listed) == set()
