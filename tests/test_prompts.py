"""Tests for prompt discovery/rendering and the taxonomy and synonym files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tagger.errors import ConfigError
from tagger.prompting.prompts import default_prompts_dir, list_prompts, load_prompt
from tagger.prompting.taxonomy import load_synonyms, load_taxonomy
from tests.harness import PROMPTS_DIR


@pytest.fixture()
def prompts_copy(tmp_path: Path) -> Path:
    """A private copy of the repo's prompts/ that a test may modify."""
    target = tmp_path / "prompts"
    shutil.copytree(PROMPTS_DIR, target)
    return target


def test_list_prompts_finds_both_tag_versions() -> None:
    refs = [p.ref for p in list_prompts(PROMPTS_DIR)]
    assert refs[:2] == ["tag@v1", "tag@v2"]
    assert all(not r.startswith(("taxonomy@", "synonyms@")) for r in refs)


def test_list_sorts_versions_numerically(prompts_copy: Path) -> None:
    text = (prompts_copy / "tag" / "v1.toml").read_text().replace('"v1"\n', '"v10"\n', 1)
    (prompts_copy / "tag" / "v10.toml").write_text(text)
    refs = [p.ref for p in list_prompts(prompts_copy) if p.name == "tag"]
    assert refs == ["tag@v1", "tag@v2", "tag@v3", "tag@v10"]
    assert load_prompt(prompts_copy, "tag").version == "v10"


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("tag@v1", "tag@v1"),
        ("tag@1", "tag@v1"),
        ("tag@v2", "tag@v2"),
        ("tag", "tag@v3"),
        (None, "tag@v3"),
    ],
)
def test_ref_resolution(ref: str | None, expected: str) -> None:
    assert load_prompt(PROMPTS_DIR, ref).ref == expected


def test_unknown_ref_lists_available() -> None:
    with pytest.raises(ConfigError) as info:
        load_prompt(PROMPTS_DIR, "x@v9")
    message = str(info.value)
    assert message.startswith("unknown prompt 'x@v9'; available: tag@v1, tag@v2")
    assert "tagger prompts" in message
    with pytest.raises(ConfigError, match="unknown prompt 'tag@v9'"):
        load_prompt(PROMPTS_DIR, "tag@v9")


def test_prompt_fields_and_params() -> None:
    prompt = load_prompt(PROMPTS_DIR, "tag@v1")
    assert prompt.name == "tag" and prompt.version == "v1"
    assert prompt.params == {"temperature": 0.0, "max_tokens": 400}
    assert prompt.taxonomy_version == "v1"
    assert len(prompt.hash) == 12 and int(prompt.hash, 16) >= 0
    assert prompt.path == PROMPTS_DIR / "tag" / "v1.toml"
    assert prompt.description


def test_hash_changes_with_content(prompts_copy: Path) -> None:
    before = load_prompt(prompts_copy, "tag@v1")
    assert before.hash == load_prompt(PROMPTS_DIR, "tag@v1").hash
    path = prompts_copy / "tag" / "v1.toml"
    path.write_text(path.read_text().replace("expert", "experienced", 1))
    after = load_prompt(prompts_copy, "tag@v1")
    assert after.hash != before.hash
    assert "experienced" in after.system


@pytest.mark.parametrize("ref", ["tag@v1", "tag@v2"])
def test_render_substitutes_and_keeps_abstract_verbatim(ref: str) -> None:
    prompt = load_prompt(PROMPTS_DIR, ref)
    abstract = "We pay $5 for ${x} and $abstract, with {braces} and {{more}} $$."
    messages = prompt.render(
        abstract=abstract,
        title="A  Study\nof Things",
        areas="- a: A — b",
        format_instructions="FMT",
    )
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[1]["content"]
    assert "$title_line" not in user and "$areas" not in user and "$format_instructions" not in user
    assert "- a: A — b" in user and "FMT" in user
    assert "Title: A Study of Things" in user
    last_abstract_line = [ln for ln in user.splitlines() if ln.startswith("Abstract:")][-1]
    assert last_abstract_line == f"Abstract: {abstract}"
    assert user.endswith(abstract)


def test_render_without_title_has_no_title_line() -> None:
    user = load_prompt(PROMPTS_DIR, "tag@v1").render(
        abstract="Text.", title=None, areas="x", format_instructions=""
    )[1]["content"]
    assert "Title:" not in user
    assert "\n\n\n" not in user  # lines holding only an empty placeholder are dropped
    assert user.endswith("\n\nAbstract: Text.")


def test_malformed_toml_names_the_file(prompts_copy: Path) -> None:
    bad = prompts_copy / "tag" / "v9.toml"
    bad.write_text('name = "tag"\nsystem = """unterminated\n')
    with pytest.raises(ConfigError, match=r"v9\.toml: invalid TOML"):
        load_prompt(prompts_copy, "tag@v9")
    with pytest.raises(ConfigError, match=r"v9\.toml"):
        list_prompts(prompts_copy)
    # Other versions still load: only the requested file is parsed.
    assert load_prompt(prompts_copy, "tag@v1").ref == "tag@v1"


def test_missing_field_and_bad_template_rejected(prompts_copy: Path) -> None:
    path = prompts_copy / "tag" / "v3.toml"
    path.write_text('version = "v3"\nuser = "Abstract: $abstract"\n')
    with pytest.raises(ConfigError, match=r"v3\.toml: 'system' must be a non-empty string"):
        load_prompt(prompts_copy, "tag@v3")
    path.write_text('system = "s"\nuser = "Say $colour\\nAbstract: $abstract"\n')
    with pytest.raises(ConfigError, match="unknown placeholder"):
        load_prompt(prompts_copy, "tag@v3")
    path.write_text('system = "s"\nuser = "Abstract: $abstract\\nThanks"\n')
    with pytest.raises(ConfigError, match="must end with a line 'Abstract: \\$abstract'"):
        load_prompt(prompts_copy, "tag@v3")


def test_default_prompts_dir_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TAGGER_PROMPTS_DIR", str(tmp_path))
    assert default_prompts_dir() == tmp_path
    monkeypatch.delenv("TAGGER_PROMPTS_DIR")
    monkeypatch.chdir(tmp_path)  # no ./prompts here: fall back to the package's
    assert default_prompts_dir() == PROMPTS_DIR


def test_missing_prompts_dir(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="prompts directory not found"):
        load_prompt(tmp_path / "nope", None)


def test_taxonomy_areas() -> None:
    taxonomy = load_taxonomy(PROMPTS_DIR, "v1")  # v2 (newest) is v1 with short descriptions
    assert taxonomy.version == "v1"
    assert 18 <= len(taxonomy.areas) <= 24
    assert "other" in taxonomy.ids
    assert len(set(taxonomy.ids)) == len(taxonomy.ids)
    lines = taxonomy.render().splitlines()
    assert len(lines) == len(taxonomy.areas)
    assert "- reinforcement_learning: Reinforcement learning — " in taxonomy.render()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("reinforcement_learning", "reinforcement_learning"),
        ("Reinforcement learning", "reinforcement_learning"),
        ("  REINFORCEMENT-LEARNING ", "reinforcement_learning"),
        ("Safety, alignment and robustness", "safety_and_robustness"),
        ("Other", "other"),
        ("quantum gravity", None),
        ("", None),
    ],
)
def test_taxonomy_resolve(value: str, expected: str | None) -> None:
    assert load_taxonomy(PROMPTS_DIR).resolve(value) == expected


def test_taxonomy_requires_other(prompts_copy: Path) -> None:
    path = prompts_copy / "taxonomy" / "v1.toml"
    path.write_text(path.read_text().replace('id = "other"', 'id = "misc"'))
    with pytest.raises(ConfigError, match="must include an area with id 'other'"):
        load_taxonomy(prompts_copy, "v1")
    with pytest.raises(ConfigError, match="unknown taxonomy version 'v7'"):
        load_taxonomy(prompts_copy, "v7")


def test_synonyms_load_and_canonical(tmp_path: Path) -> None:
    synonyms = load_synonyms(PROMPTS_DIR)
    assert synonyms.version == "v1" and len(synonyms.mapping) >= 30
    assert synonyms.canonical("Large  Language Models") == "LLM"
    assert synonyms.canonical("low rank adaptation") == "LoRA"
    assert synonyms.canonical("spectral clustering") == "spectral clustering"
    # Canonical spellings are fixed points, so applying the table twice changes nothing.
    for value in set(synonyms.mapping.values()):
        assert synonyms.canonical(value) == value
    empty = load_synonyms(tmp_path)
    assert empty.version == "none" and empty.mapping == {}
    assert empty.canonical("LLMs") == "LLMs"


def test_synonym_chain_rejected(tmp_path: Path) -> None:
    (tmp_path / "synonyms").mkdir()
    (tmp_path / "synonyms" / "v1.toml").write_text('version = "v1"\n[map]\na = "b"\nb = "c"\n')
    with pytest.raises(ConfigError, match="itself maps to"):
        load_synonyms(tmp_path)
