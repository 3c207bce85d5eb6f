"""Importing a module does no work: each module imported alone in a fresh interpreter pulls in
neither the CLI (the core never imports it), the openai SDK nor Ray (imported on first use),
starts no thread and writes no file. The import graph itself (no cycle, the CLI imported by
nothing outside it) is tests/test_cli_package.py's."""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness import REPO_ROOT, clean_env, python_json

# Modules the command line may be: the CLI itself, and `python -m tagger`, which runs it.
CLI = ("tagger.cli", "tagger.__main__")
HEAVY = ("tagger.cli", "openai", "ray")

IMPORT_EACH = """
import importlib, json, sys, threading
names, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
pulled = {}
for name in names:
    before = set(sys.modules)
    importlib.import_module(name)
    for module in heavy:
        if module in sys.modules and module not in before:
            pulled[module] = name
print(json.dumps({"pulled": pulled, "threads": threading.active_count()}))
"""


def module_names(package: Path) -> list[str]:
    """Every module of the package at `package`, by dotted name, but the CLI's."""
    names = []
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if not any(name == cli or name.startswith(cli + ".") for cli in CLI):
            names.append(name)
    return names


def import_each(root: Path, names: list[str], folder: Path) -> dict[str, object]:
    """Import `names` one by one from `root` in a fresh interpreter working in `folder`."""
    env = clean_env() | {"HOME": str(folder), "PYTHONPATH": str(root)}
    return python_json(IMPORT_EACH, json.dumps(names), json.dumps(HEAVY), cwd=folder, env=env)


def test_importing_every_module_does_no_work(tmp_path: Path) -> None:
    names = module_names(REPO_ROOT / "tagger")
    assert len(names) > 150 and "tagger.sending.client" in names
    assert import_each(REPO_ROOT, names, tmp_path) == {"pulled": {}, "threads": 1}
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran, nor in HOME


def test_the_check_sees_a_module_that_works_at_import(tmp_path: Path) -> None:
    package = tmp_path / "planted" / "tagger"
    (package / "cli").mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "cli" / "__init__.py").write_text("", encoding="utf-8")
    (package / "low.py").write_text(
        "import threading, time\nimport tagger.cli\n"
        "threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n"
        "open('written', 'w').close()\n",
        encoding="utf-8",
    )
    folder = tmp_path / "run"
    folder.mkdir()
    names = module_names(package)
    assert names == ["tagger", "tagger.low"]
    result = import_each(package.parent, names, folder)
    assert result == {"pulled": {"tagger.cli": "tagger.low"}, "threads": 2}
    assert [path.name for path in folder.iterdir()] == ["written"]
