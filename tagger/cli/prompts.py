"""`tagger prompts`: the prompt, taxonomy and synonyms versions, defaults marked."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from tagger.prompting.prompts import list_prompts, load_prompt, versioned_files
from tagger.prompting.taxonomy import load_synonyms, load_taxonomy
from tagger.terminal import cell

DEFAULT_MARK = "default"


def print_prompts(prompts_dir: Path) -> None:
    """Print one table each for prompts, taxonomies and synonyms."""
    console = Console()
    found = list_prompts(prompts_dir)
    default_prompt = load_prompt(prompts_dir, None).ref if found else None
    prompts = Table(
        "prompt", "hash", "taxonomy", "", "description", title=f"prompts in {prompts_dir}"
    )
    for item in found:
        prompts.add_row(
            cell(item.ref),
            item.hash,
            cell(item.taxonomy_version or "newest"),
            DEFAULT_MARK if item.ref == default_prompt else "",
            cell(item.description),
        )
    console.print(prompts)

    taxonomies = Table("taxonomy", "hash", "areas", "", title="taxonomies")
    versions = _versions(prompts_dir / "taxonomy")
    for version in versions:
        taxonomy = load_taxonomy(prompts_dir, version)
        mark = DEFAULT_MARK if version == versions[-1] else ""
        taxonomies.add_row(version, taxonomy.hash, str(len(taxonomy.areas)), mark)
    console.print(taxonomies)

    synonyms = Table("synonyms", "hash", "entries", "", title="synonyms")
    versions = _versions(prompts_dir / "synonyms")
    for version in versions:
        loaded = load_synonyms(prompts_dir, version)
        mark = DEFAULT_MARK if version == versions[-1] else ""
        synonyms.add_row(version, loaded.hash, str(len(loaded.mapping)), mark)
    if not versions:
        synonyms.add_row("none", "", "0", DEFAULT_MARK)
    console.print(synonyms)
    console.print(
        "tagger run uses the default prompt unless --prompt NAME@VERSION, the taxonomy the "
        "prompt names (else the default) and the default synonyms; review commands take "
        "--synonyms VERSION.",
        highlight=False,
        markup=False,
    )


def _versions(directory: Path) -> list[str]:
    """'vN' of every versioned file in directory, oldest first."""
    if not directory.is_dir():
        return []
    return [f"v{number}" for number, _ in versioned_files(directory)]
