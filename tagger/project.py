"""Where a run's settings, prompts and cache live: found from the current directory, wherever in
the project the user stands (`cd seeds && tagger run .` finds ../.env and ../cache), and only
among the user's own files.

The search climbs from the current directory and stops at the first boundary: a repository
root (a folder holding `.git`), $HOME, or the last folder that is the user's own. A folder that
someone else owns, or that others can write (the system temporary folder, a shared scratch
folder), is never looked in, nor anything above it. A `.env`, `prompts/` or default `cache/`
found but not the user's own (the folder one stands in is shared, the file belongs to someone
else or others can write it) is refused in one line naming it: it is never used.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tagger.errors import ConfigError

__all__ = [
    "Places",
    "default_cache_dir",
    "find_dotenv",
    "not_own",
    "places",
    "project_prompts_dir",
    "project_root",
    "read_dotenv",
]

APP_NAME = "tagger"
CACHE_NAME = "cache"
DOTENV_NAME = ".env"
PROMPTS_NAME = "prompts"
# A settings file is a few lines; one larger than this is no settings file.
MAX_DOTENV_BYTES = 1 << 20
# Entries of prompts/ (and of each prompt's folder) checked for their owner: a few are normal.
MAX_PROMPT_ENTRIES = 200


@dataclass(frozen=True)
class Places:
    """Where tagger finds things from one directory (`tagger where`)."""

    dotenv: Path | None  # the .env read, None: none
    project: Path | None  # the folder a .env or prompts/ marks
    cache_dir: Path  # the default cache
    stopped_at: Path  # the last folder the search looked in
    why_stopped: str  # "a repository root", "$HOME", ...


def find_dotenv(start: Path | None = None) -> Path | None:
    """The nearest `.env` file, in the current directory or a folder above it inside the
    boundary; None if there is none. ConfigError if the one found is not the user's own."""
    for folder, problem in _search(start):
        candidate = folder / DOTENV_NAME
        if candidate.is_file():
            if problem is not None:
                raise _refused(candidate, folder, problem)
            return candidate
    return None


def read_dotenv(path: Path) -> dict[str, str]:
    """The settings in a `.env` file, never interpolated (`${VAR}` stays as written) and never
    put into the process environment; {} if there is no such file.

    ConfigError if the file is someone else's, others can write it, or it is no settings file.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())  # the file read, not whatever the name points to later
        if not stat.S_ISREG(info.st_mode):
            return {}
        problem = not_own(info)
        if problem is not None:
            raise _refused(path, path, problem)
        data = handle.read(MAX_DOTENV_BYTES + 1)
    if len(data) > MAX_DOTENV_BYTES:
        raise ConfigError(f"{path} is over 1 MiB: not a settings file; remove it or fix it")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start + 1}): fix it") from None
    from dotenv import dotenv_values

    # No interpolation: a value such as OPENAI_BASE_URL=http://x/${OPENAI_API_KEY} must not pull
    # another secret out of the environment into a URL or a path.
    values = dotenv_values(stream=io.StringIO(text), interpolate=False)
    return {name: value for name, value in values.items() if value is not None}


def project_root(start: Path | None = None) -> Path | None:
    """The nearest folder inside the boundary that a `.env` file or a `prompts/` folder marks;
    ConfigError if that folder, or its prompts/, is not the user's own."""
    for folder, problem in _search(start):
        prompts = folder / PROMPTS_NAME
        if (folder / DOTENV_NAME).is_file() or prompts.is_dir():
            if problem is not None:
                raise _refused(folder, folder, problem)
            if prompts.is_dir():
                _check_prompts(prompts)
            return folder
    return None


def project_prompts_dir(start: Path | None = None) -> Path | None:
    """The project's `prompts/` folder, if the project has one (checked: the user's own)."""
    root = project_root(start)
    prompts = root / PROMPTS_NAME if root is not None else None
    return prompts if prompts is not None and prompts.is_dir() else None


def default_cache_dir(start: Path | None = None) -> Path:
    """The answer cache when none is named: the project's `cache/`, else the user's cache
    directory (platformdirs: ~/.cache/tagger on Linux, ~/Library/Caches/tagger on macOS,
    %LOCALAPPDATA%\\tagger\\Cache on Windows). ConfigError if it exists and others can write
    it or it is someone else's: answers planted there would be served as the user's."""
    root = project_root(start)
    if root is not None:
        cache = root / CACHE_NAME
    else:
        from platformdirs import user_cache_dir

        cache = Path(user_cache_dir(APP_NAME, appauthor=False))
    _check_own(cache, "the default cache")
    return cache


def places(start: Path | None = None) -> Places:
    """Where tagger finds its settings, project and cache from `start` (the current directory)."""
    searched = list(_search(start))
    last, _ = searched[-1]
    return Places(
        dotenv=find_dotenv(start),
        project=project_root(start),
        cache_dir=default_cache_dir(start),
        stopped_at=last,
        why_stopped=_why_stopped(last),
    )


def not_own(info: os.stat_result) -> str | None:
    """Why a file or folder is not the user's own (owned by someone else, or others can write
    it); None if it is. A group of the user's alone (Debian's user private groups) is theirs."""
    if not hasattr(os, "geteuid"):  # Windows: no owners or modes of this kind
        return None
    uid = os.geteuid()
    if info.st_uid != uid:
        return f"it belongs to {_user_name(info.st_uid)}, not to you"
    mode = stat.S_IMODE(info.st_mode)
    if mode & stat.S_IWOTH:
        return f"anyone can write to it (mode {mode:o})"
    if mode & stat.S_IWGRP and not _only_yours(info.st_gid, uid):
        return f"group {_group_name(info.st_gid)} can write to it (mode {mode:o})"
    return None


# --- the search ------------------------------------------------------------------------------


def _search(start: Path | None) -> Iterator[tuple[Path, str | None]]:
    """The folders to look in, nearest first, each with why it is not the user's own (None:
    it is). The first is where one stands, whoever owns it (what is found there is refused if
    it is not theirs); an ancestor that is not the user's own ends the search unlooked-in."""
    here = (start or Path.cwd()).absolute()
    home = _home()
    for index, folder in enumerate((here, *here.parents)):
        problem = _folder_problem(folder)
        if problem is not None and index > 0:
            return
        yield folder, problem
        if problem is not None or folder == home or (folder / ".git").exists():
            return


def _why_stopped(folder: Path) -> str:
    if _folder_problem(folder) is not None:
        return f"you stand in a folder that is not yours alone ({_folder_problem(folder)})"
    if folder == _home():
        return "$HOME: folders above it are never searched"
    if (folder / ".git").exists():
        return "a repository root (it holds .git)"
    if folder.parent == folder:
        return "the top of the file system"
    problem = _folder_problem(folder.parent) or "it is not yours"
    return f"{folder.parent} is not searched: {problem}"


def _folder_problem(folder: Path) -> str | None:
    try:
        return not_own(folder.stat())
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"


def _check_own(path: Path, what: str) -> None:
    """ConfigError if path exists and is not the user's own (a link is judged by its target)."""
    try:
        info = path.stat()
    except OSError:
        return  # not there yet: created by tagger, the user's own
    problem = not_own(info)
    if problem is not None:
        raise _refused(path, path, problem, what=what)


def _check_prompts(prompts: Path) -> None:
    """The project's prompts/, its folders and their files: the user's own, every one (a
    planted `v9.toml` in a folder others can write would be the newest prompt)."""
    _check_own(prompts, "the project's prompts")
    try:
        entries = [entry for entry in prompts.iterdir() if not entry.name.startswith(".")]
        for entry in entries[:MAX_PROMPT_ENTRIES]:
            _check_own(entry, "the project's prompts")
            if entry.is_dir():
                for inner in list(entry.iterdir())[:MAX_PROMPT_ENTRIES]:
                    _check_own(inner, "the project's prompts")
    except OSError:
        return  # unreadable: the prompt loader says so


def _refused(path: Path, judged: Path, problem: str, *, what: str | None = None) -> ConfigError:
    subject = f"{what} {path}" if what else str(path)
    where = "" if judged == path else f"{judged} (where it is): "
    fix = (
        "pass --cache-dir with a folder of your own"
        if what == "the default cache"
        else "remove it, or move it to a folder of your own and run tagger from there"
    )
    return ConfigError(f"not using {subject}: {where}{problem}; {fix} (`tagger where` shows more)")


def _home() -> Path | None:
    try:
        return Path.home().absolute()
    except (KeyError, RuntimeError):  # no $HOME and no password entry
        return None


def _only_yours(gid: int, uid: int) -> bool:
    """A user private group: named as the user, its only member the user."""
    try:
        import grp
        import pwd

        user = pwd.getpwuid(uid).pw_name
        group = grp.getgrgid(gid)
    except (ImportError, KeyError):
        return False
    return group.gr_name == user and set(group.gr_mem) <= {user}


def _user_name(uid: int) -> str:
    try:
        import pwd

        return f"user {pwd.getpwuid(uid).pw_name}"
    except (ImportError, KeyError):
        return f"user id {uid}"


def _group_name(gid: int) -> str:
    try:
        import grp

        return grp.getgrgid(gid).gr_name
    except (ImportError, KeyError):
        return f"id {gid}"
