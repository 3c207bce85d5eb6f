"""Importable on Windows: no module needs what only POSIX has (CI cannot run Windows itself)."""

from __future__ import annotations

from tests.harness import python_json

# Standard modules that exist on POSIX only.
POSIX_ONLY = ("fcntl", "termios", "pty", "resource", "grp")

IMPORT_EVERYTHING = """
import importlib, importlib.abc, json, pkgutil, sys

class NoPosixOnly(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

for name in BLOCKED:
    sys.modules.pop(name, None)
sys.meta_path.insert(0, NoPosixOnly())
import tagger
failed = {}
modules = pkgutil.walk_packages(tagger.__path__, "tagger.")
# __main__ modules run the command line when imported: their imports are app's.
names = ["tagger"] + [m.name for m in modules if not m.name.endswith("__main__")]
for name in names:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = repr(exc)
for name in tagger.__all__:
    try:
        getattr(tagger, name)
    except Exception as exc:
        failed[f"tagger.{name}"] = repr(exc)
print(json.dumps({"imported": len(names), "failed": failed,
                  "blocked": [b for b in BLOCKED if b in sys.modules]}))
"""


def _import_all(blocked: tuple[str, ...]) -> dict[str, object]:
    return python_json(f"BLOCKED = {blocked!r}\n{IMPORT_EVERYTHING}")


def test_every_module_imports_without_posix_only_modules() -> None:
    result = _import_all(POSIX_ONLY)
    assert result["failed"] == {}
    assert result["blocked"] == []  # nothing got them some other way
    assert isinstance(result["imported"], int) and result["imported"] > 80


def test_the_check_catches_a_module_that_needs_one() -> None:
    result = _import_all(("diskcache",))  # the answer cache needs this one at import
    failed = result["failed"]
    assert isinstance(failed, dict) and "tagger.pipeline.cache" in failed
