"""tags: frequencies, near-duplicate clusters and synonym suggestions."""

from __future__ import annotations

import json
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

from tagger.prompting.taxonomy import Synonyms, empty_synonyms, load_synonyms
from tagger.review.tagstats import acronym, cluster_key, clusters, tag_report, toml_lines
from tests.harness import PROMPTS_DIR, invoke

GNN_VARIANTS = [
    "Graph Neural Networks",
    "graph neural network",
    "GNN",
    "gnns",
    "graph-neural-network",
]


def rows_with(tag_lists: list[list[str]]) -> list[dict[str, Any]]:
    return [
        {"id": f"r{i}", "status": "ok", "method_tags": tags} for i, tags in enumerate(tag_lists)
    ] + [{"id": "bad", "status": "error", "method_tags": ["ignored tag"]}]


def test_cluster_key_folds_case_separators_and_plurals() -> None:
    assert {cluster_key(t) for t in GNN_VARIANTS[:2] + GNN_VARIANTS[4:]} == {"graph neural network"}
    assert cluster_key("GNN") == cluster_key("gnns") == "gnn"
    assert cluster_key("policies") == "policy"
    assert cluster_key("Gaussian processes") == "gaussian process"
    assert cluster_key("loss") == "loss"  # "ss" is not a plural
    assert acronym("GNNs") == "gnn" and acronym("CoT") == "cot"
    assert acronym("GFlowNet") is None and acronym("graph") is None


def test_gnn_variants_form_one_cluster_with_the_most_frequent_canonical() -> None:
    counts = Counter(
        {
            "Graph Neural Networks": 3,
            "graph neural network": 1,
            "GNN": 2,
            "gnns": 1,
            "graph-neural-network": 1,
            "transformer": 4,
        }
    )
    (cluster,) = clusters(counts, empty_synonyms())
    assert sorted(v["tag"] for v in cluster["variants"]) == sorted(GNN_VARIANTS)
    assert cluster["canonical"] == "Graph Neural Networks"  # most frequent, no synonyms
    assert cluster["total"] == 8 and not cluster["mapped"]
    suggested = {s["variant"]: s["canonical"] for s in cluster["suggestions"]}
    # Keys are folded like the synonyms file folds them; the canonical's own key spells
    # "graph neural networks", which already maps to itself, so it is not suggested.
    assert suggested == {
        "graph neural network": "Graph Neural Networks",
        "gnn": "Graph Neural Networks",
        "gnns": "Graph Neural Networks",
    }


def test_existing_synonyms_decide_canonical_and_silence_mapped_variants() -> None:
    synonyms = load_synonyms(PROMPTS_DIR)
    counts = Counter({"Graph Neural Networks": 3, "GNN": 2, "graph-neural-net": 1})
    (cluster,) = clusters(counts, synonyms)
    assert cluster["canonical"] == "GNN"  # the synonyms file already says so
    # "graph-neural-net" does not fold onto "network", so it stays out.
    assert {v["tag"] for v in cluster["variants"]} == {"Graph Neural Networks", "GNN"}
    assert cluster["mapped"] and cluster["suggestions"] == []


def test_acronym_expansion_and_suggestions_paste_into_toml() -> None:
    synonyms = Synonyms(version="v9", mapping={}, hash="x")
    report = tag_report(
        rows_with(
            [
                ["RL", "mixture of experts"],
                ["reinforcement learning", "MoE"],
                ["reinforcement learning"],
                ["representation learning"],
            ]
        ),
        synonyms,
    )
    assert report["rows"] == 4
    assert report["frequencies"][0] == {"tag": "reinforcement learning", "count": 2}
    assert "ignored tag" not in {f["tag"] for f in report["frequencies"]}
    by_canonical = {c["canonical"]: c for c in report["clusters"]}
    # "RL" joins its most used expansion only, never "representation learning".
    assert {v["tag"] for v in by_canonical["reinforcement learning"]["variants"]} == {
        "RL",
        "reinforcement learning",
    }
    assert "representation learning" not in by_canonical
    lines = toml_lines(report)
    parsed = tomllib.loads("[map]\n" + "\n".join(lines))["map"]
    assert parsed["rl"] == "reinforcement learning"
    assert set(parsed) == {"rl", "moe"} or set(parsed) == {"rl", "mixture of experts"}


def test_tags_cli(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    rows = rows_with([["Graph Neural Networks", "widgets"], ["graph-neural-network", "Widget"]])
    run.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    args = ["tags", str(run), "--prompts-dir", str(PROMPTS_DIR)]
    result = invoke([*args, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["synonyms_version"] == "v1"
    assert {c["canonical"] for c in report["clusters"]} == {"GNN", "Widget"}
    result = invoke([*args, "--suggest"])
    assert result.exit_code == 0, result.output
    # Both GNN spellings are in the v1 file; only the widget pair needs a line.
    assert result.output.splitlines()[1:] == ['"widgets" = "Widget"']
    result = invoke(args)
    assert result.exit_code == 0 and "near-duplicates" in result.output
