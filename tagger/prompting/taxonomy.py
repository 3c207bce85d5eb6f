"""Task-area taxonomy and tag synonym tables loaded from prompts/taxonomy and prompts/synonyms."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from tagger.errors import ConfigError
from tagger.prompting.prompts import read_toml, require_str, version_number, versioned_files

OTHER_AREA = "other"
_ID_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def area_key(value: str) -> str:
    """Fold an id or label so case, spaces, hyphens and punctuation do not matter."""
    return "_".join(re.findall(r"[0-9a-z]+", value.casefold().replace("&", " and ")))


def synonym_key(tag: str) -> str:
    """Fold a tag for synonym lookup: casefold; whitespace, hyphens, underscores → one space."""
    return " ".join(re.split(r"[\s_\-]+", tag.casefold())).strip()


@dataclass(frozen=True)
class Area:
    """One task area the model can choose."""

    id: str
    label: str
    description: str


@dataclass(frozen=True)
class Taxonomy:
    """A versioned list of task areas."""

    version: str
    areas: tuple[Area, ...]
    hash: str
    labels_in_prompt: bool = True  # False: "- id: description", for short prompts

    # Cached: validation resolves an area and rendering lists them for every abstract.
    @cached_property
    def ids(self) -> tuple[str, ...]:
        """Area ids in file order."""
        return tuple(area.id for area in self.areas)

    @cached_property
    def _by_key(self) -> dict[str, str]:
        keys = {area_key(area.label): area.id for area in self.areas}
        return keys | {area.id: area.id for area in self.areas}

    def resolve(self, value: str) -> str | None:
        """Map an id or label (case/space/hyphen-insensitive) to its id, else None."""
        if value in self._by_key:
            return self._by_key[value]
        return self._by_key.get(area_key(value))

    @cached_property
    def _rendered(self) -> str:
        if not self.labels_in_prompt:
            return "\n".join(f"- {a.id}: {a.description}" for a in self.areas)
        return "\n".join(f"- {a.id}: {a.label} — {a.description}" for a in self.areas)

    def render(self) -> str:
        """The "- id: label — description" lines substituted for $areas."""
        return self._rendered


def _pick_file(directory: Path, version: str | None, kind: str) -> tuple[str, Path]:
    """Return (vN, path) for the requested version or the newest one."""
    if not directory.is_dir():
        raise ConfigError(f"{kind} directory not found: {directory}")
    files = dict(versioned_files(directory))
    if not files:
        raise ConfigError(f"no {kind} files in {directory} (expected v1.toml)")
    if version is None:
        number: int | None = max(files)
    else:
        number = version_number(version)
    if number is None or number not in files:
        available = ", ".join(f"v{n}" for n in sorted(files))
        raise ConfigError(f"unknown {kind} version {version!r}; available: {available}")
    return f"v{number}", files[number]


def _check_version(data: dict[str, Any], version: str, path: Path) -> None:
    declared = data.get("version", version)
    if not isinstance(declared, str) or version_number(declared) != version_number(version):
        raise ConfigError(f"{path}: version {declared!r} does not match file name {version!r}")


def load_taxonomy(prompts_dir: Path, version: str | None = None) -> Taxonomy:
    """Load prompts/taxonomy/<version>.toml (newest if None)."""
    version, path = _pick_file(prompts_dir / "taxonomy", version, "taxonomy")
    data, digest = read_toml(path)
    _check_version(data, version, path)
    raw_areas = data.get("areas")
    if not isinstance(raw_areas, list) or not raw_areas:
        raise ConfigError(f"{path}: needs a non-empty list of [[areas]]")
    areas: list[Area] = []
    keys: dict[str, str] = {}
    for index, raw in enumerate(raw_areas, start=1):
        where = f"{path} (area {index})"
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: each [[areas]] entry must be a table")
        area = Area(
            id=require_str(raw, "id", where).strip(),
            label=require_str(raw, "label", where).strip(),
            description=" ".join(require_str(raw, "description", where).split()),
        )
        if not _ID_RE.match(area.id):
            raise ConfigError(f"{where}: id {area.id!r} must be snake_case")
        # resolve() must be unambiguous, so no id or label may fold onto another area's.
        for key in {area.id, area_key(area.label)}:
            if keys.get(key, area.id) != area.id:
                raise ConfigError(f"{where}: {area.id!r} clashes with {keys[key]!r}")
            keys[key] = area.id
        if area.id in (a.id for a in areas):
            raise ConfigError(f"{where}: duplicate id {area.id!r}")
        areas.append(area)
    if OTHER_AREA not in (a.id for a in areas):
        raise ConfigError(f"{path}: must include an area with id {OTHER_AREA!r}")
    labels_in_prompt = data.get("labels_in_prompt", True)
    if not isinstance(labels_in_prompt, bool):
        raise ConfigError(f"{path}: 'labels_in_prompt' must be true or false")
    return Taxonomy(
        version=version, areas=tuple(areas), hash=digest, labels_in_prompt=labels_in_prompt
    )


@dataclass(frozen=True)
class Synonyms:
    """Variant → canonical tag spellings; keys are stored folded by synonym_key."""

    version: str
    mapping: dict[str, str]
    hash: str

    def canonical(self, tag: str) -> str:
        """The canonical spelling of tag, or tag itself when it has no entry."""
        return self.mapping.get(synonym_key(tag), tag)


EMPTY_SYNONYMS_VERSION = "none"


def empty_synonyms() -> Synonyms:
    """A synonym table that maps nothing (used when prompts/synonyms is absent)."""
    return Synonyms(version=EMPTY_SYNONYMS_VERSION, mapping={}, hash=EMPTY_SYNONYMS_VERSION)


def load_synonyms(prompts_dir: Path, version: str | None = None) -> Synonyms:
    """Load prompts/synonyms/<version>.toml (newest if None); empty if the directory is absent."""
    directory = prompts_dir / "synonyms"
    if not directory.is_dir() and version is None:
        return empty_synonyms()
    version, path = _pick_file(directory, version, "synonyms")
    data, digest = read_toml(path)
    _check_version(data, version, path)
    raw = data.get("map", {})
    if not isinstance(raw, dict):
        raise ConfigError(f'{path}: [map] must be a table of "variant" = "canonical"')
    mapping: dict[str, str] = {}
    for variant, canonical in raw.items():
        if not isinstance(canonical, str) or not canonical.strip() or not synonym_key(variant):
            raise ConfigError(f"{path}: map entry {variant!r} must map to a non-empty string")
        key, value = synonym_key(variant), " ".join(canonical.split())
        if mapping.get(key, value) != value:
            raise ConfigError(f"{path}: {variant!r} maps to both {mapping[key]!r} and {value!r}")
        mapping[key] = value
    # Chains (a → b, b → c) would make canonical() depend on how many times it runs.
    for key, value in mapping.items():
        target = mapping.get(synonym_key(value), value)
        if target != value:
            raise ConfigError(
                f"{path}: {key!r} maps to {value!r}, which itself maps to {target!r}; "
                "map straight to the final spelling"
            )
    return Synonyms(version=version, mapping=mapping, hash=digest)
