"""Where a run's settings and cache live: found from the current directory, wherever in the
project the user stands (`cd seeds && tagger run .` finds ../.env and ../cache)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["default_cache_dir", "find_dotenv", "project_root"]

APP_NAME = "tagger"
CACHE_NAME = "cache"


def find_dotenv(start: Path | None = None) -> Path | None:
    """The nearest `.env` file in the current directory or above it, as python-dotenv's
    find_dotenv(usecwd=True) finds it; None if there is none."""
    for folder in _upwards(start):
        candidate = folder / ".env"
        if candidate.is_file():
            return candidate
    return None


def project_root(start: Path | None = None) -> Path | None:
    """The nearest directory, here or above, that a `.env` file or a `prompts/` folder marks."""
    for folder in _upwards(start):
        if (folder / ".env").is_file() or (folder / "prompts").is_dir():
            return folder
    return None


def default_cache_dir(start: Path | None = None) -> Path:
    """The answer cache when none is named: the project's `cache/`, else the user's cache
    directory (platformdirs: ~/.cache/tagger on Linux, ~/Library/Caches/tagger on macOS,
    %LOCALAPPDATA%\\tagger\\Cache on Windows)."""
    root = project_root(start)
    if root is not None:
        return root / CACHE_NAME
    from platformdirs import user_cache_dir

    return Path(user_cache_dir(APP_NAME, appauthor=False))


def _upwards(start: Path | None) -> list[Path]:
    here = (start or Path.cwd()).absolute()
    return [here, *here.parents]
