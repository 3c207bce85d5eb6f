"""Versioned prompt files: discovery, loading, validation and rendering."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tagger.errors import ConfigError
from tagger.prompting.packs import render_items
from tagger.prompting.templates import check_template, template_parts

# Directories under prompts/ that hold data the prompts use, not prompts.
RESERVED_DIRS = frozenset({"taxonomy", "synonyms"})
DEFAULT_PROMPT_NAME = "tag"
MAX_TOML_BYTES = 4 << 20  # a prompt, taxonomy or synonyms file is kilobytes

_VERSION_RE = re.compile(r"^v?(\d+)$", re.IGNORECASE)


def version_number(version: str) -> int | None:
    """Return N for "vN" or "N", else None."""
    match = _VERSION_RE.match(version.strip())
    return int(match.group(1)) if match else None


def read_toml(path: Path) -> tuple[dict[str, Any], str]:
    """Parse a TOML file; return its data and the first 12 hex of its sha256."""
    try:
        # Non-blocking: a FIFO named v2.toml opens at once (then is refused), never hangs.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ConfigError(f"{path}: not a regular file: replace it with a TOML file")
        raw = handle.read(MAX_TOML_BYTES + 1)
    if len(raw) > MAX_TOML_BYTES:
        raise ConfigError(f"{path}: over {MAX_TOML_BYTES >> 20} MiB: not a prompt or table file")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid UTF-8 ({exc.reason})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    return data, hashlib.sha256(raw).hexdigest()[:12]


def versioned_files(directory: Path) -> list[tuple[int, Path]]:
    """List a directory's vN.toml files as (N, path), oldest first."""
    found: list[tuple[int, Path]] = []
    for path in directory.glob("*.toml"):
        number = version_number(path.stem) if path.stem.startswith("v") else None
        if number is None:
            # A stray draft.toml would otherwise be silently ignored and confuse users.
            raise ConfigError(f"{path}: versioned files must be named v<N>.toml (e.g. v1.toml)")
        found.append((number, path))
    return sorted(found)


def require_str(
    data: dict[str, Any], key: str, where: Path | str, *, optional: bool = False
) -> str:
    """Return data[key] as a non-empty string or raise ConfigError naming where it came from."""
    value = data.get(key)
    if value is None and optional:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: '{key}' must be a non-empty string")
    return value


@dataclass(frozen=True)
class Prompt:
    """One prompt version loaded from prompts/<name>/<version>.toml."""

    name: str
    version: str
    description: str
    system: str
    user: str
    params: dict[str, Any]
    taxonomy_version: str | None
    hash: str
    path: Path
    # Several abstracts per request (tagger.prompting.packs): every request has the pack's
    # shape, one abstract or many.
    packs: bool = False

    @property
    def ref(self) -> str:
        """The reference users type, e.g. "tag@v1"."""
        return f"{self.name}@{self.version}"

    def render(
        self, *, abstract: str, title: str | None, areas: str, format_instructions: str
    ) -> list[dict[str, str]]:
        """Build the chat messages for one abstract (a packing prompt: a pack of one)."""
        if self.packs:
            return self.render_pack(
                [(abstract, title)], areas=areas, format_instructions=format_instructions
            )
        clean_title = " ".join(title.split()) if title else ""
        values = {
            "title_line": f"Title: {clean_title}" if clean_title else "",
            "abstract": abstract.strip(),
            "areas": areas,
            "format_instructions": format_instructions,
        }
        empty = frozenset(
            name for name in ("title_line", "format_instructions") if not values[name]
        )
        # Values are spliced in, never re-scanned, so $ and {} in the abstract survive.
        user = "".join(values[part[1:]] if part[:1] == "\0" else part
                       for part in template_parts(self.user, empty))  # fmt: skip
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]

    def render_pack(
        self,
        items: Sequence[tuple[str, str | None]],
        *,
        areas: str,
        format_instructions: str,
    ) -> list[dict[str, str]]:
        """Build the chat messages for several abstracts, (text, title) each, numbered from 1."""
        if not self.packs:
            raise ValueError(f"{self.ref} does not pack abstracts")
        values = {
            "abstracts": render_items(items),
            "areas": areas,
            "format_instructions": format_instructions,
        }
        empty = frozenset(() if format_instructions else ("format_instructions",))
        user = "".join(values[part[1:]] if part[:1] == "\0" else part
                       for part in template_parts(self.user, empty))  # fmt: skip
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]


def default_prompts_dir() -> Path:
    """$TAGGER_PROMPTS_DIR, else the project's prompts/ (tagger.project: the nearest, of the
    user's own), else the checkout's or the installed copy."""
    from tagger.project import project_prompts_dir

    env = os.environ.get("TAGGER_PROMPTS_DIR", "").strip()
    if env:
        return Path(env).expanduser()
    local = project_prompts_dir()
    if local is not None:
        return local
    package = Path(__file__).resolve().parent.parent
    checkout = package.parent / "prompts"  # an editable install of a clone
    return checkout if checkout.is_dir() else package / "bundled_prompts"  # a wheel


def _check_dir(prompts_dir: Path) -> None:
    if not prompts_dir.is_dir():
        raise ConfigError(
            f"prompts directory not found: {prompts_dir} (set TAGGER_PROMPTS_DIR or --prompts-dir)"
        )


def _discover(prompts_dir: Path) -> dict[str, list[tuple[int, Path]]]:
    """Map prompt name to its (version number, path) list without parsing any file."""
    _check_dir(prompts_dir)
    found: dict[str, list[tuple[int, Path]]] = {}
    for sub in sorted(prompts_dir.iterdir()):
        if not sub.is_dir() or sub.name in RESERVED_DIRS or sub.name.startswith((".", "_")):
            continue
        files = versioned_files(sub)
        if files:
            found[sub.name] = files
    return found


def _parse_prompt(name: str, number: int, path: Path) -> Prompt:
    data, digest = read_toml(path)
    version = f"v{number}"
    if data.get("name", name) != name:
        raise ConfigError(f"{path}: name {data.get('name')!r} does not match directory {name!r}")
    if version_number(str(data.get("version", version))) != number:
        raise ConfigError(
            f"{path}: version {data.get('version')!r} does not match file name {version!r}"
        )
    system = require_str(data, "system", path)
    user = require_str(data, "user", path)
    packs = data.get("packs", False)
    if not isinstance(packs, bool):
        raise ConfigError(f"{path}: 'packs' must be true or false")
    check_template(user, path, packs=packs)
    params = data.get("params", {})
    if not isinstance(params, dict):
        raise ConfigError(f"{path}: [params] must be a table")
    for key, value in params.items():
        if not isinstance(value, str | int | float | bool):
            raise ConfigError(f"{path}: params.{key} must be a string, number or boolean")
    taxonomy = data.get("taxonomy")
    if taxonomy is not None:
        number_t = version_number(taxonomy) if isinstance(taxonomy, str) else None
        if number_t is None:
            raise ConfigError(f"{path}: 'taxonomy' must be a version like \"v1\"")
        taxonomy = f"v{number_t}"
    return Prompt(
        name=name,
        version=version,
        description=require_str(data, "description", path, optional=True).strip(),
        system=system.strip(),
        user=user.rstrip(),
        params=dict(params),
        taxonomy_version=taxonomy,
        hash=digest,
        path=path,
        packs=packs,
    )


def list_prompts(prompts_dir: Path) -> list[Prompt]:
    """Load every prompt, sorted by name then version number."""
    return [
        _parse_prompt(name, number, path)
        for name, files in sorted(_discover(prompts_dir).items())
        for number, path in files
    ]


def load_prompt(prompts_dir: Path, ref: str | None, *, packs: bool | None = None) -> Prompt:
    """Load a prompt by "name@vN", "name@N", "name" (newest) or None (the default prompt).

    The default prompt is the newest version of `tag` (or of the only prompt there is); with
    `packs` given, the newest of those versions whose `packs` is the same (a run that sends
    one abstract per request gets a prompt that asks about one), else the newest.
    """
    found = _discover(prompts_dir)
    if not found:
        raise ConfigError(f"no prompts found in {prompts_dir} (expected <name>/v1.toml)")
    available = ", ".join(f"{n}@v{v}" for n, files in sorted(found.items()) for v, _ in files)
    if ref is None or not ref.strip():
        if DEFAULT_PROMPT_NAME in found:
            name = DEFAULT_PROMPT_NAME
        elif len(found) == 1:
            name = next(iter(found))
        else:
            raise ConfigError(f"several prompts exist; choose one with --prompt: {available}")
        return _newest(name, found[name], packs)
    name, sep, version = ref.strip().partition("@")
    files = dict(found.get(name, []))
    wanted = version_number(version) if sep else max(files, default=None)
    if wanted is None or wanted not in files:
        raise ConfigError(
            f"unknown prompt {ref.strip()!r}; available: {available} (see `tagger prompts`)"
        )
    return _parse_prompt(name, wanted, files[wanted])


def _newest(name: str, files: list[tuple[int, Path]], packs: bool | None) -> Prompt:
    """The newest of a prompt's versions whose `packs` is `packs` (None: any), else the newest."""
    newest = _parse_prompt(name, *files[-1])
    if packs is None or newest.packs == packs:
        return newest
    for number, path in reversed(files[:-1]):
        prompt = _parse_prompt(name, number, path)
        if prompt.packs == packs:
            return prompt
    return newest
