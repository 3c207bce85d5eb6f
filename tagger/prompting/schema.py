"""The pydantic schema each model answer must satisfy, and its strict JSON-schema form."""

from __future__ import annotations

import copy
import json
import re
from typing import Annotated, Any, Literal, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
)

from tagger.prompting.taxonomy import Synonyms, Taxonomy, synonym_key

# Bump whenever the answer model or its validation changes: it is part of cache keys.
SCHEMA_VERSION = "1"

MAX_SUMMARY_WORDS = 30  # what the prompt asks for
SUMMARY_WORD_LIMIT = 35  # what validation enforces: a little slack avoids needless repairs
MAX_TAGS = 6
MAX_TAG_WORDS = 6
MAX_TAG_CHARS = 60

_EXCERPT_CHARS = 80
_QUOTES = "\"'`“”‘’«»"
_TRAILING_PUNCT = ".,;:!?"
_BULLET_RE = re.compile(r"^(?:[-*•]\s+)+")
# Hyphen and slash split a word into pieces cased separately ("Self-Attention" → "self-attention").
_PIECE_SPLIT_RE = re.compile(r"([-/])")


def _excerpt(text: str, limit: int = _EXCERPT_CHARS) -> str:
    """Quote text on one line, cut to limit characters."""
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[: limit - 1] + "…")


def _case_piece(piece: str) -> str:
    # Two or more capitals mark an acronym or a coined name (LLM, LoRA, GFlowNet): keep them.
    return piece if sum(ch.isupper() for ch in piece) >= 2 else piece.lower()


def normalise_tag(tag: str, synonyms: Synonyms | None = None, *, keep_case: bool = False) -> str:
    """Clean a method tag: whitespace, quotes, trailing punctuation, case, then synonyms.

    keep_case leaves the case as written (a reviewer's "conditional Poisson sampling").
    """
    text = " ".join(tag.split())
    previous = None
    while previous != text:
        previous = text
        text = _BULLET_RE.sub("", text.strip().strip(_QUOTES).rstrip(_TRAILING_PUNCT)).strip()
    if not keep_case:
        words = ("".join(_case_piece(p) for p in _PIECE_SPLIT_RE.split(w)) for w in text.split())
        text = " ".join(words)
    if text and synonyms is not None:
        text = synonyms.canonical(text)
    return text


def clean_summary(value: str) -> str:
    """The summary on one line; ValueError says what is wrong (empty, too many words)."""
    text = " ".join(value.split())
    if not text:
        raise ValueError("must not be empty")
    words = len(text.split())
    if words > SUMMARY_WORD_LIMIT:
        # The number validation enforces is the one a message may name: never the prompt's.
        raise ValueError(f"has {words} words; write one line of at most {SUMMARY_WORD_LIMIT} words")
    return text


def clean_tags(tags: list[str], synonyms: Synonyms | None, *, keep_case: bool = False) -> list[str]:
    """Normalised, de-duplicated tags; ValueError says what is wrong (too long, none left)."""
    cleaned: list[str] = []
    seen: set[str] = set()
    for raw in tags:
        tag = normalise_tag(raw, synonyms, keep_case=keep_case)
        key = synonym_key(tag)
        if not key or key in seen:
            continue
        if len(tag) > MAX_TAG_CHARS or len(tag.split()) > MAX_TAG_WORDS:
            raise ValueError(
                f"tag {_excerpt(tag, 40)} is too long; use at most {MAX_TAG_WORDS} words "
                f"and {MAX_TAG_CHARS} characters per tag"
            )
        seen.add(key)
        cleaned.append(tag)
    if not cleaned:
        raise ValueError("needs at least one tag")
    return cleaned


def _tags_validator(synonyms: Synonyms | None) -> AfterValidator:
    return AfterValidator(lambda tags: clean_tags(tags, synonyms))


def _area_resolver(taxonomy: Taxonomy) -> BeforeValidator:
    def resolve(value: Any) -> Any:
        # Models in json_object/text mode sometimes answer with the label; accept it as its id.
        if isinstance(value, str):
            return taxonomy.resolve(value) or value
        return value

    return BeforeValidator(resolve)


_MODEL_CACHE: dict[tuple[str, str], type[BaseModel]] = {}


def build_answer_model(taxonomy: Taxonomy, synonyms: Synonyms | None = None) -> type[BaseModel]:
    """The answer model for this taxonomy and synonym table (cached by their hashes)."""
    key = (taxonomy.hash, synonyms.hash if synonyms is not None else "")
    cached = _MODEL_CACHE.get(key)
    if cached is not None:
        return cached
    # Literal[...] over runtime values: the JSON schema then carries an enum of the ids.
    area_type = cast(Any, Literal)[taxonomy.ids]
    model = create_model(
        "TagAnswer",
        __config__=ConfigDict(extra="forbid"),
        summary=(
            Annotated[str, AfterValidator(clean_summary)],
            Field(description=f"One plain line of at most {MAX_SUMMARY_WORDS} words"),
        ),
        task_area=(
            Annotated[area_type, _area_resolver(taxonomy)],
            Field(description="Exactly one task-area id from the list"),
        ),
        method_tags=(
            Annotated[list[str], _tags_validator(synonyms)],
            Field(
                min_length=1,
                max_length=MAX_TAGS,
                description=f"1 to {MAX_TAGS} short method/technique noun phrases",
            ),
        ),
    )
    _MODEL_CACHE[key] = model
    return model


def _strict_node(node: Any, defs: dict[str, Any], seen: tuple[str, ...]) -> Any:
    """Rewrite one schema node for OpenAI strict mode, inlining $refs."""
    if isinstance(node, list):
        return [_strict_node(item, defs, seen) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        name = str(node["$ref"]).rsplit("/", 1)[-1]
        if name in seen or name not in defs:
            raise ValueError(f"cannot inline $ref {node['$ref']!r} (recursive or missing)")
        merged = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
        return _strict_node(merged, defs, (*seen, name))
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "default"):
            continue  # strict mode rejects these keywords
        if key == "properties":
            # Property names are data, not keywords: a field called "title" must survive.
            out[key] = {name: _strict_node(sub, defs, seen) for name, sub in value.items()}
        else:
            out[key] = _strict_node(value, defs, seen)
    if out.get("type") == "object" or "properties" in out:
        out["additionalProperties"] = False
        out["required"] = list(out.get("properties", {}))
    return out


def answer_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema in the form OpenAI strict structured outputs accept."""
    schema = copy.deepcopy(model.model_json_schema())
    defs = schema.pop("$defs", {})
    return cast(dict[str, Any], _strict_node(schema, defs, ()))


def _format_loc(loc: tuple[int | str, ...]) -> str:
    if not loc:
        return "response"
    text = str(loc[0])
    for part in loc[1:]:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def format_validation_error(err: ValidationError) -> str:
    """One short "field: message; ..." line per problem, fit to send back to the model."""
    problems: list[str] = []
    for error in err.errors(include_url=False):
        message = str(error["msg"]).removeprefix("Value error, ").replace(" after validation", "")
        value = error.get("input")
        if error["type"] in ("literal_error", "enum"):
            # The full allowed list is already in the prompt; repeating it makes the turn long.
            message = "must be exactly one of the ids listed in the prompt"
            if isinstance(value, str):
                message += f" (got {_excerpt(value)})"
        problems.append(f"{_format_loc(tuple(error['loc']))}: {message}")
    return "; ".join(problems)


def format_instructions(schema: dict[str, Any]) -> str:
    """The $format_instructions text for modes without server-side schema enforcement."""
    compact = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    return (
        "Reply with only a JSON object (no prose, no code fence) that matches this "
        f"JSON schema: {compact}"
    )
