"""Optional: tag seeds against a real local server. Runs only with TAGGER_TEST_LOCAL_URL set.

    python -m llama_cpp.server --model MODEL.gguf --host 127.0.0.1 --port 8077 --n_ctx 4096 &
    TAGGER_TEST_LOCAL_URL=http://127.0.0.1:8077/v1 pytest -m real_server

TAGGER_TEST_LOCAL_MODEL names the model (default: the first one the server lists),
TAGGER_TEST_LOCAL_COUNT how many seed abstracts to tag (default 3: a CPU takes ~1 min each).
"""

from __future__ import annotations

import os

import pytest

from tagger.config import ClientConfig
from tagger.sending.models import list_models
from tests.harness import PROMPTS_DIR, TaggerCLI, seed_texts, taxonomy_ids

LOCAL_URL = os.environ.get("TAGGER_TEST_LOCAL_URL", "").strip()
pytestmark = [
    pytest.mark.real_server,
    pytest.mark.skipif(not LOCAL_URL, reason="set TAGGER_TEST_LOCAL_URL to a local LLM server"),
]


def test_seeds_are_tagged_by_a_real_local_server(tagger_cli: TaggerCLI) -> None:
    model = (
        os.environ.get("TAGGER_TEST_LOCAL_MODEL")
        or list_models(ClientConfig(base_url=LOCAL_URL))[0]
    )
    count = int(os.environ.get("TAGGER_TEST_LOCAL_COUNT", "3"))
    texts = seed_texts()[:count]
    inputs = tagger_cli.write_jsonl("seeds.jsonl", [{"abstract": t} for t in texts])
    args = ["--model", model, "--prompt", "tag-compact@v1"]
    result = tagger_cli.run(
        *args, inputs=[inputs], base_url=LOCAL_URL, key="local", prompts_dir=PROMPTS_DIR,
        timeout=600.0,
    )  # fmt: skip
    rows = tagger_cli.rows()
    assert len(rows) == count, result.output
    failed = [(r["index"], r["error"]) for r in rows if r["status"] != "ok"]
    assert not failed, f"rows that failed: {failed}\n{result.output}"
    for row in rows:
        assert row["task_area"] in taxonomy_ids()
        assert 1 <= len(row["method_tags"]) <= 6
        assert row["summary"] and "\n" not in row["summary"]
    assert tagger_cli.manifest()["mode"] in ("json_schema", "json_object_schema")
