"""A prompt's `user` template: checked once when loaded, split once into parts to fill."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from string import Template

from tagger.errors import ConfigError

__all__ = ["PACK_PLACEHOLDERS", "PLACEHOLDERS", "check_template", "template_parts"]

PLACEHOLDERS = frozenset({"title_line", "abstract", "areas", "format_instructions"})
# A packing prompt (`packs = true`) ends with the numbered abstracts instead of one abstract.
PACK_PLACEHOLDERS = frozenset({"abstracts", "areas", "format_instructions"})
_LONE_PLACEHOLDER_RE = re.compile(r"^\s*\$\{?(title_line|format_instructions)\}?\s*$")


@functools.lru_cache(maxsize=64)
def template_parts(user: str, empty: frozenset[str]) -> tuple[str, ...]:
    """The user template as literal parts and "\0name" placeholders, parsed once per variant.

    Lines holding only a placeholder that is empty this time are dropped (they would leave
    stray blank lines). string.Template re-parses the template on every call, and this runs
    for every abstract.
    """
    lines = [
        line
        for line in user.split("\n")
        if not ((m := _LONE_PLACEHOLDER_RE.match(line)) and m.group(1) in empty)
    ]
    text = "\n".join(lines)
    parts: list[str] = []
    position = 0
    for match in Template.pattern.finditer(text):
        parts.append(text[position : match.start()])
        if match.group("escaped") is not None:
            parts.append("$")
        else:
            parts.append("\0" + (match.group("named") or match.group("braced")))
        position = match.end()
    parts.append(text[position:])
    return tuple(part for part in parts if part)


def check_template(user: str, path: Path, *, packs: bool = False) -> None:
    """ConfigError naming the file if the template is malformed, names an unknown
    placeholder, or does not end with what its kind of prompt must end with."""
    template = Template(user)
    if not template.is_valid():
        raise ConfigError(f"{path}: 'user' is not a valid template (a lone '$'? write '$$')")
    known = PACK_PLACEHOLDERS if packs else PLACEHOLDERS
    unknown = set(template.get_identifiers()) - known
    if unknown:
        allowed = ", ".join(f"${p}" for p in sorted(known))
        kind = " of a packing prompt (packs = true)" if packs else ""
        raise ConfigError(
            f"{path}: unknown placeholder(s) {', '.join(sorted(unknown))} in 'user'{kind}; "
            f"allowed: {allowed}"
        )
    if packs:
        # The numbered abstracts come last: everything before them is the same in every
        # request, the prefix a provider's prompt cache bills at its cached price.
        if user.rstrip().rsplit("\n", 1)[-1].strip() not in ("$abstracts", "${abstracts}"):
            raise ConfigError(
                f"{path}: 'user' of a packing prompt must end with a line '$abstracts'"
            )
        return
    # The fake test server (and humans reading logs) find the abstract after the last
    # line starting with "Abstract:", so the template must end with exactly that line.
    last_line = user.rstrip().rsplit("\n", 1)[-1]
    if not last_line.startswith("Abstract:") or not re.search(r"\$\{?abstract\}?$", last_line):
        raise ConfigError(f"{path}: 'user' must end with a line 'Abstract: $abstract'")
