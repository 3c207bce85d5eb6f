"""tagger on Ray Data: one rate limit and one spend cap for a whole cluster (`tagger[ray]`).

    import ray, tagger.ray
    ds = ray.data.read_parquet("s3://bucket/abstracts/")  # columns: abstract, id, title
    tagged = tagger.ray.tag_dataset(ds, base_url=["http://gpu1:8000/v1", "http://gpu2:8000/v1"],
                                    model="Qwen/Qwen3-8B", concurrency=64, actors=8)
    tagged.write_parquet("s3://bucket/tagged/")

The names below are imported when first used: `import tagger.ray` works without Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tagger.ray.actors import Limits, start_limiter
    from tagger.ray.dataset import read_abstracts, tag_dataset
    from tagger.ray.merge import merge_parts
    from tagger.ray.parts import done_rows
    from tagger.ray.vllm import VllmHooks

__all__ = [
    "Limits",
    "VllmHooks",
    "done_rows",
    "merge_parts",
    "read_abstracts",
    "start_limiter",
    "tag_dataset",
]
_HOMES = {
    "Limits": "tagger.ray.actors",
    "start_limiter": "tagger.ray.actors",
    "read_abstracts": "tagger.ray.dataset",
    "tag_dataset": "tagger.ray.dataset",
    "merge_parts": "tagger.ray.merge",
    "done_rows": "tagger.ray.parts",
    "VllmHooks": "tagger.ray.vllm",
}


def __getattr__(name: str) -> Any:
    """Import a public name on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'tagger.ray' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(home), name)
