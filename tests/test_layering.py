"""Layers import downwards only: the core never imports the CLI (not even inside a function),
the module-level imports form no cycle, and importing a module does no work (no thread, no
file, neither the openai SDK nor Ray: they are imported on first use)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.harness import REPO_ROOT, clean_env

PACKAGE = REPO_ROOT / "tagger"
# Modules the command line may be: the CLI itself, and `python -m tagger`, which runs it.
CLI = ("tagger.cli", "tagger.__main__")


def module_names(package: Path) -> dict[str, Path]:
    """Every module of the package below `package`, by dotted name (a package by its own)."""
    found: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _in(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def imported_names(tree: ast.Module, *, top_level_only: bool) -> list[str]:
    """The modules a source imports (absolute imports; `from a import b` names a and a.b).

    top_level_only: only what runs at import: not inside a function or class, nor under
    `if TYPE_CHECKING:`."""
    if top_level_only:
        nodes = list(_import_time(tree.body))
    else:
        nodes = [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]
    names: list[str] = []
    for node in nodes:
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _import_time(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            yield from _import_time(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _import_time(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                yield from _import_time(handler.body)
        elif isinstance(node, ast.With):
            yield from _import_time(node.body)


def cli_imports(package: Path) -> dict[str, list[str]]:
    """Each module outside the CLI that imports it anywhere (inside functions too), and what."""
    found: dict[str, list[str]] = {}
    for name, path in module_names(package).items():
        if _in(name, CLI):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        hits = [n for n in imported_names(tree, top_level_only=False) if _in(n, ("tagger.cli",))]
        if hits:
            found[name] = hits
    return found


def import_cycles(package: Path) -> list[list[str]]:
    """Cycles among the modules' import-time imports (a cycle means one import goes up)."""
    modules = module_names(package)
    graph = {
        name: sorted(
            {
                imported
                for imported in imported_names(
                    ast.parse(path.read_text(encoding="utf-8")), top_level_only=True
                )
                if imported in modules and imported != name
            }
        )
        for name, path in modules.items()
    }
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    path: list[str] = []

    def walk(name: str) -> None:
        state[name] = 1
        path.append(name)
        for child in graph[name]:
            if state.get(child) == 1:
                cycles.append([*path[path.index(child) :], child])
            elif child not in state:
                walk(child)
        path.pop()
        state[name] = 2

    for name in graph:
        if name not in state:
            walk(name)
    return cycles


def test_the_core_never_imports_the_cli() -> None:
    assert cli_imports(PACKAGE) == {}
    assert len(module_names(PACKAGE)) > 150  # the tree was read


def test_module_level_imports_go_downwards_only() -> None:
    assert import_cycles(PACKAGE) == []


def test_the_checks_catch_an_upward_import(tmp_path: Path) -> None:
    package = tmp_path / "tagger"
    (package / "cli").mkdir(parents=True)
    for name in ("__init__.py", "cli/__init__.py", "cli/app.py"):
        (package / name).write_text("", encoding="utf-8")
    (package / "low.py").write_text(
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tagger import high\n"  # not at import: no cycle
        "def run() -> None:\n    from tagger.cli.app import main\n",  # the CLI, lazily
        encoding="utf-8",
    )
    (package / "high.py").write_text("import tagger.low\n", encoding="utf-8")
    assert cli_imports(package) == {"tagger.low": ["tagger.cli.app", "tagger.cli.app.main"]}
    assert import_cycles(package) == []
    (package / "low.py").write_text("from tagger import high\n", encoding="utf-8")
    assert import_cycles(package) == [["tagger.high", "tagger.low", "tagger.high"]]


IMPORT_EACH = """
import importlib, json, sys, threading
names = json.loads(sys.argv[1])
pulled = {}
for name in names:
    before = set(sys.modules)
    importlib.import_module(name)
    for heavy in ("tagger.cli", "openai", "ray"):
        if heavy in sys.modules and heavy not in before:
            pulled[heavy] = name
print(json.dumps({"pulled": pulled, "threads": threading.active_count()}))
"""


def test_importing_every_module_does_no_work(tmp_path: Path) -> None:
    """In a fresh interpreter, from an empty folder: every module but the CLI's imported one
    by one; none pulls in the CLI, the openai SDK or Ray, starts a thread or writes a file."""
    names = [name for name in module_names(PACKAGE) if not _in(name, CLI)]
    env = clean_env() | {"HOME": str(tmp_path), "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, json.dumps(names)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"pulled": {}, "threads": 1}
    assert list(tmp_path.iterdir()) == []
