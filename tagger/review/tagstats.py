"""Tag frequencies of a run and clusters of near-duplicate tags, with synonym suggestions."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from tagger.prompting.taxonomy import Synonyms, synonym_key

# Words skipped when matching an acronym to a phrase ("MoE" ~ "mixture of experts").
_STOP_WORDS = frozenset({"a", "an", "and", "for", "in", "of", "on", "the", "to", "with"})
_ACRONYM_RE = re.compile(r"[A-Za-z0-9]+")
_KEEP_ENDINGS = ("ss", "us", "is")
_ES_AFTER = ("sses", "shes", "ches", "xes", "zes")


def _singular(word: str) -> str:
    """A simple English singular: policies → policy, processes → process, networks → network."""
    if len(word) <= 3 or word.endswith(_KEEP_ENDINGS):
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(_ES_AFTER):
        return word[:-2]
    return word[:-1] if word.endswith("s") else word


def cluster_key(tag: str) -> str:
    """Fold case, separators and plurals: "Graph-Neural-Networks" → "graph neural network"."""
    return " ".join(_singular(word) for word in synonym_key(tag).split())


def acronym(tag: str) -> str | None:
    """The folded letters of an acronym tag (GNN, GNNs, CoT, MoE), else None."""
    text = tag.strip()
    if text.endswith("s") and sum(ch.isupper() for ch in text[:-1]) >= 2:
        text = text[:-1]  # GNNs, LLMs
    if not _ACRONYM_RE.fullmatch(text) or sum(ch.isupper() for ch in text) < 2:
        return None
    # Mostly capitals: "GNN", "CoT" and "MoE" qualify, a coined name like "GFlowNet" does not.
    if sum(ch.isupper() for ch in text) * 2 < len(text):
        return None
    return text.casefold()


def initials(key: str) -> set[str]:
    """Initials of a multi-word cluster key, with and without stop words."""
    words = key.split()
    if len(words) < 2:
        return set()
    content = [w for w in words if w not in _STOP_WORDS]
    return {"".join(w[0] for w in words), "".join(w[0] for w in content)}


def frequencies(rows: Sequence[dict[str, Any]]) -> Counter[str]:
    """How many ok rows carry each tag spelling."""
    counts: Counter[str] = Counter()
    for row in rows:
        if row.get("status") == "ok" and isinstance(row.get("method_tags"), list):
            counts.update({" ".join(str(t).split()) for t in row["method_tags"]} - {""})
    return counts


class _Union:
    """Union-find over cluster keys."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, key: str) -> str:
        self.parent.setdefault(key, key)
        while self.parent[key] != key:
            self.parent[key] = self.parent[self.parent[key]]
            key = self.parent[key]
        return key

    def join(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


def clusters(counts: Counter[str], synonyms: Synonyms | None) -> list[dict[str, Any]]:
    """Groups of >1 spelling that fold together; canonical, mapping state and suggestions."""
    union = _Union()
    key_count: Counter[str] = Counter()
    for tag, n in counts.items():
        key_count[cluster_key(tag)] += n
        union.find(cluster_key(tag))
    phrases: dict[str, list[str]] = {}
    for key in key_count:
        for letters in initials(key):
            phrases.setdefault(letters, []).append(key)
    for tag in counts:
        short = acronym(tag)
        if short and phrases.get(short):
            # An acronym can expand several ways ("RL"); join it only to its most used phrase
            # so two different methods never merge through it.
            best = min(phrases[short], key=lambda k: (-key_count[k], k))
            union.join(cluster_key(tag), best)
    groups: dict[str, list[str]] = {}
    for tag in counts:
        groups.setdefault(union.find(cluster_key(tag)), []).append(tag)
    mapping = synonyms.mapping if synonyms is not None else {}
    found: list[dict[str, Any]] = []
    for variants in groups.values():
        if len(variants) < 2:
            continue
        variants.sort(key=lambda t: (-counts[t], t))
        targets = [mapping[synonym_key(v)] for v in variants if synonym_key(v) in mapping]
        # An existing canonical wins, so suggestions never fight the synonyms file.
        canonical = Counter(targets).most_common(1)[0][0] if targets else variants[0]
        rows = [
            {"tag": v, "count": counts[v], "maps_to": mapping.get(synonym_key(v))} for v in variants
        ]
        suggest: dict[str, str] = {}
        for v in variants:
            key = synonym_key(v)
            if key not in mapping and v != canonical and key not in suggest:
                suggest[key] = canonical
        mapped = all(r["maps_to"] == canonical or r["tag"] == canonical for r in rows)
        found.append(
            {
                "canonical": canonical,
                "total": sum(counts[v] for v in variants),
                "mapped": mapped and not suggest,
                "variants": rows,
                "suggestions": [{"variant": k, "canonical": v} for k, v in suggest.items()],
            }
        )
    found.sort(key=lambda c: (-c["total"], c["canonical"]))
    return found


def tag_report(rows: Sequence[dict[str, Any]], synonyms: Synonyms | None) -> dict[str, Any]:
    """Frequencies (most used first) and near-duplicate clusters of a run's tags."""
    counts = frequencies(rows)
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return {
        "rows": sum(1 for row in rows if row.get("status") == "ok"),
        "distinct": len(counts),
        "synonyms_version": synonyms.version if synonyms is not None else None,
        "frequencies": [{"tag": tag, "count": n} for tag, n in ordered],
        "clusters": clusters(counts, synonyms),
    }


def toml_lines(report: dict[str, Any]) -> list[str]:
    """The [map] lines to paste into the synonyms file for every unmapped variant."""
    lines: list[str] = []
    for cluster in report["clusters"]:
        for item in cluster["suggestions"]:
            # JSON string escapes are valid TOML basic-string escapes.
            lines.append(f"{json.dumps(item['variant'])} = {json.dumps(item['canonical'])}")
    return lines
