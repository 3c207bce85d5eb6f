"""`tagger prompts`: the prompt, taxonomy and synonyms versions, defaults marked."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tagger.cli.common import PromptsDirOpt, errors

if TYPE_CHECKING:
    from tagger.cli.tables import VersionRow
    from tagger.prompting.prompts import Prompt


def prompts(prompts_dir: PromptsDirOpt = None) -> None:
    """List the prompt, taxonomy and synonyms versions; mark the defaults."""
    with errors():
        from tagger.cli.tables import print_prompts
        from tagger.prompting.prompts import default_prompts_dir, list_prompts, load_prompt

        directory = prompts_dir or default_prompts_dir()
        found = list_prompts(directory)
        # Without --prompt a run that packs gets one default, a run of one abstract per
        # request the other (tagger.prompting.plan.run_prompt); they may be the same.
        defaults = [load_prompt(directory, None, packs=packs) for packs in (True, False)]
        marks = _marks(defaults) if found else {}
        # The default taxonomy is the one a run with the default prompt uses: its pin, else
        # the newest.
        taxonomies = {prompt.taxonomy_version for prompt in defaults} if found else set()
        print_prompts(
            directory,
            found,
            [_shared(directory, prompt) for prompt in found],
            marks,
            _taxonomies(directory, taxonomies),
            _synonyms(directory),
        )


def _marks(defaults: list[Prompt]) -> dict[str, str]:
    """The default column of the prompts table: which default each is (packed, one each)."""
    from tagger.cli.tables import DEFAULT_MARK

    packed, single = defaults
    if packed.ref == single.ref:
        return {packed.ref: DEFAULT_MARK}
    return {packed.ref: f"{DEFAULT_MARK}: packs", single.ref: f"{DEFAULT_MARK}: one per request"}


def _shared(prompts_dir: Path, prompt: Prompt) -> str:
    """'1,610, 1,536 cached': the tokens every request shares, and what OpenAI's
    prompt cache bills of them at the cached price (strict JSON-schema mode, the default);
    a packing prompt's are paid once per pack."""
    from tagger.config import Mode
    from tagger.defaults import PER_REQUEST
    from tagger.pipeline.estimate import shared_tokens
    from tagger.pricing import bundled_cache_rule
    from tagger.prompting.plan import request_schema
    from tagger.prompting.schema import build_answer_model
    from tagger.prompting.taxonomy import load_synonyms, load_taxonomy

    taxonomy = load_taxonomy(prompts_dir, prompt.taxonomy_version)
    schema = request_schema(prompt, build_answer_model(taxonomy, load_synonyms(prompts_dir)))
    shared = shared_tokens(prompt, taxonomy, schema, Mode.JSON_SCHEMA)
    rule = bundled_cache_rule()
    cached = rule.cached(shared)
    packs = f"; once per {PER_REQUEST} abstracts" if prompt.packs else ""
    if cached == 0:
        return f"{shared:,}, none cached{packs}"
    return f"{shared:,}, {cached:,} cached{packs}"


def _taxonomies(prompts_dir: Path, pinned: set[str | None]) -> list[VersionRow]:
    """The taxonomy versions; those the default prompts pin are marked (None: the newest)."""
    from tagger.cli.tables import VersionRow
    from tagger.prompting.taxonomy import load_taxonomy

    versions = _versions(prompts_dir / "taxonomy")
    defaults = {version or (versions[-1] if versions else None) for version in pinned}
    rows = []
    for version in versions:
        taxonomy = load_taxonomy(prompts_dir, version)
        rows.append(VersionRow(version, taxonomy.hash, len(taxonomy.areas), version in defaults))
    return rows


def _synonyms(prompts_dir: Path) -> list[VersionRow]:
    from tagger.cli.tables import VersionRow
    from tagger.prompting.taxonomy import load_synonyms

    versions = _versions(prompts_dir / "synonyms")
    rows = []
    for version in versions:
        loaded = load_synonyms(prompts_dir, version)
        rows.append(VersionRow(version, loaded.hash, len(loaded.mapping), version == versions[-1]))
    return rows


def _versions(directory: Path) -> list[str]:
    """'vN' of every versioned file in directory, oldest first (the newest is the default)."""
    from tagger.prompting.prompts import versioned_files

    if not directory.is_dir():
        return []
    return [f"v{number}" for number, _ in versioned_files(directory)]
