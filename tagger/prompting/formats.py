"""Each structured-output mode's request shape: its response_format and its prompt instructions."""

from __future__ import annotations

from typing import Any

from tagger.config import Mode
from tagger.prompting.packs import ANSWERS_KEY
from tagger.prompting.schema import MAX_SUMMARY_WORDS, MAX_TAG_CHARS, format_instructions

# ~7 characters per word of a technical summary: the prompt's 30 words, under the 35 validated.
SUMMARY_MAX_CHARS = MAX_SUMMARY_WORDS * 7


def key_instructions(schema: dict[str, Any]) -> str:
    """One line naming the keys: for a server whose grammar already enforces the schema."""
    item = _pack_item(schema)
    if item is not None:
        return (
            f'Reply with only a JSON object {{"{ANSWERS_KEY}": [...]}} holding one object per '
            f"abstract, with the keys {_listed(item)}."
        )
    return f"Reply with only a JSON object with the keys {_listed(schema)}."


def _listed(schema: dict[str, Any]) -> str:
    keys = [f'"{name}"' for name in schema.get("properties", {})]
    return ", ".join(keys[:-1]) + f" and {keys[-1]}" if len(keys) > 1 else "".join(keys)


def _pack_item(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The answer schema inside a packing prompt's schema (tagger.prompting.packs), else None."""
    answers = schema.get("properties", {}).get(ANSWERS_KEY)
    items = answers.get("items") if isinstance(answers, dict) else None
    return items if isinstance(items, dict) else None


def instructions_for(mode: Mode, schema: dict[str, Any]) -> str:
    """$format_instructions for `mode`: the whole schema only where the server does not see it."""
    if mode is Mode.JSON_SCHEMA:
        return ""
    if mode is Mode.JSON_OBJECT_SCHEMA:
        # The schema travels in response_format; repeating it costs ~300 prompt tokens of
        # prefill per abstract on a CPU, and the grammar enforces it anyway.
        return key_instructions(schema)
    return format_instructions(schema)


def grammar_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema for a grammar-constrained server, with length caps a grammar can enforce.

    A small model under a grammar still writes 170-word summaries (measured: Gemma 3 270M);
    a maxLength ends the string where validation would reject it anyway. OpenAI's strict
    json_schema mode does not take these keywords, so only this mode gets them.
    """
    item = _pack_item(schema)
    if item is not None:  # a pack's answers: each one capped
        answers = {**schema["properties"][ANSWERS_KEY], "items": grammar_schema(item)}
        return {**schema, "properties": {**schema["properties"], ANSWERS_KEY: answers}}
    properties = dict(schema.get("properties", {}))
    if "summary" in properties:
        properties["summary"] = {**properties["summary"], "maxLength": SUMMARY_MAX_CHARS}
    tags = properties.get("method_tags")
    if isinstance(tags, dict) and isinstance(tags.get("items"), dict):
        items = {**tags["items"], "maxLength": MAX_TAG_CHARS}
        properties["method_tags"] = {**tags, "items": items}
    return {**schema, "properties": properties}


def response_format(mode: Mode, schema: dict[str, Any]) -> dict[str, Any] | None:
    """The response_format parameter for a mode."""
    if mode is Mode.JSON_SCHEMA:
        return {
            "type": "json_schema",
            "json_schema": {"name": "abstract_tags", "strict": True, "schema": schema},
        }
    if mode is Mode.JSON_OBJECT_SCHEMA:
        # llama.cpp's extension (llama-server, llama-cpp-python): decoding is constrained to
        # the schema by a grammar, also on servers that answer json_schema with an error.
        return {"type": "json_object", "schema": grammar_schema(schema)}
    if mode is Mode.JSON_OBJECT:
        return {"type": "json_object"}
    return None
