"""What a run is made of: prompt, taxonomy, synonyms, schema, and the cache key they form."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from tagger.config import RunConfig
from tagger.defaults import default_per_request
from tagger.files.abstracts import Abstract
from tagger.pipeline.cache import cache_key, canonical_json
from tagger.pricing import PriceTable
from tagger.prompting.packs import pack_schema
from tagger.prompting.prompts import Prompt, load_prompt
from tagger.prompting.schema import SCHEMA_VERSION, answer_json_schema, build_answer_model
from tagger.prompting.taxonomy import Synonyms, Taxonomy, load_synonyms, load_taxonomy


@dataclass(frozen=True)
class RunPlan:
    """The loaded, versioned pieces of one run."""

    config: RunConfig
    prompt: Prompt
    taxonomy: Taxonomy
    synonyms: Synonyms
    answer_model: type[BaseModel]
    schema: dict[str, Any]
    key_base: dict[str, Any]
    key_run_part: str  # key_base serialised once: every abstract's cache key starts with it

    @classmethod
    def load(cls, config: RunConfig, prices: PriceTable) -> RunPlan:
        """Load prompt, taxonomy and synonyms from the prompts directory (`prices`: whether
        the model's prompt cache is billed, which decides the default prompt)."""
        prompt = run_prompt(config, prices)
        taxonomy = load_taxonomy(config.prompts_dir, prompt.taxonomy_version)
        synonyms = load_synonyms(config.prompts_dir)
        model = build_answer_model(taxonomy, synonyms)
        key_base = _key_base(config, prompt, taxonomy, synonyms)
        schema = request_schema(prompt, model)
        run_part = canonical_json(key_base)
        return cls(config, prompt, taxonomy, synonyms, model, schema, key_base, run_part)

    def run_fields(self) -> dict[str, Any]:
        """The fields every output row of this run shares."""
        return {
            "model": self.config.client.model,
            "prompt": self.prompt.name,
            "prompt_version": self.prompt.version,
            "prompt_hash": self.prompt.hash,
            "taxonomy_version": self.taxonomy.version,
            "synonyms_version": self.synonyms.version,
        }

    @property
    def prompt_cache_key(self) -> str:
        """The same for every request of this plan (whose shared prefix is the same): a hash,
        never the prompt's words, sent as OpenAI's prompt_cache_key."""
        return "tagger-" + hashlib.sha256(self.key_run_part.encode()).hexdigest()[:16]

    def item_key(self, abstract: Abstract) -> str:
        """The cache key of one abstract under this plan."""
        return cache_key(self.key_run_part, abstract.text, abstract.title)


def wanted_per_request(config: RunConfig, prices: PriceTable, model: str | None = None) -> int:
    """Abstracts per request (or --batch line) the run sends if its prompt packs:
    --per-request if given, else what tagger.defaults chooses for the server and `model`
    (the run's): 8 on OpenAI's API for a model billed a cached-input price, else 1."""
    if config.per_request is not None:
        return config.per_request
    billed = prices.cache_rule(model or config.client.model) is not None
    return default_per_request(config.client.effective_base_url, caches_prompts=billed)


def packs_by_default(config: RunConfig, prices: PriceTable) -> bool:
    """Whether a run without --prompt gets a prompt that packs: when it would send several
    abstracts per request or --batch line. A cascade's stages share one prompt (one cache
    key, one pinned --prompt to rerun): it packs if either stage would."""
    cascade = config.cascade
    models = [cascade.cheap, cascade.strong] if cascade is not None else [config.client.model]
    return any(wanted_per_request(config, prices, model) > 1 for model in models)


def run_prompt(config: RunConfig, prices: PriceTable) -> Prompt:
    """The run's prompt: --prompt if given, else the default prompt's newest version that
    packs when the run sends several abstracts per request (tag@v3), else its newest that
    asks about one (tag@v2: a small local model follows its plain form, not a pack's)."""
    if config.prompt_ref is not None and config.prompt_ref.strip():
        return load_prompt(config.prompts_dir, config.prompt_ref)
    return load_prompt(config.prompts_dir, None, packs=packs_by_default(config, prices))


def with_prompt_pinned(config: RunConfig, prices: PriceTable) -> RunConfig:
    """The configuration with its prompt chosen once, as --prompt NAME@VERSION: for drivers
    whose parts run under changed options (a --batch cascade's live sample) but must ask
    under one prompt (one cache key, one --prompt to rerun)."""
    return config.model_copy(update={"prompt_ref": run_prompt(config, prices).ref})


def request_schema(prompt: Prompt, answer_model: type[BaseModel]) -> dict[str, Any]:
    """The response schema a prompt's requests carry: one answer, or a packing prompt's array
    of numbered answers (tagger.prompting.packs)."""
    answer = answer_json_schema(answer_model)
    return pack_schema(answer) if prompt.packs else answer


def _key_base(
    config: RunConfig, prompt: Prompt, taxonomy: Taxonomy, syn: Synonyms
) -> dict[str, Any]:
    """Everything besides the abstract that shapes an answer (and so the cache key)."""
    return {
        "model": config.client.model,
        "base_url": config.client.effective_base_url,
        "prompt": prompt.ref,
        "prompt_hash": prompt.hash,
        "schema": SCHEMA_VERSION,
        "taxonomy": [taxonomy.version, taxonomy.hash],
        "synonyms": [syn.version, syn.hash],
        "params": prompt.params,
        # --reasoning-effort changes answers as the prompt's own would; absent, keys stay as
        # they were before the option existed.
        **({"reasoning_effort": effort} if (effort := config.client.reasoning_effort) else {}),
    }
