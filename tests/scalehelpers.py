"""Runs at scale as processes: generated inputs, requests per abstract, output and cache checks."""

from __future__ import annotations

import json
import random
import re
import sqlite3
from collections import defaultdict
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tagger import defaults
from tests.fakeserver import FakeLLM, Recorded, first_user_message
from tests.harness import PROMPTS_DIR, SAFETY_TIMEOUT, wait_until

# Names new test files imported from here before tests/harness.py existed; kept until they
# import them from tests.harness instead.

MODEL = defaults.MODEL  # the runs under test pass no --model
_WS = re.compile(r"\s+")

_OPENINGS = (
    "We propose a hierarchical variational framework for",
    "This work investigates contrastive pretraining strategies for",
    "We introduce a lightweight transformer architecture targeting",
    "Recent progress in reinforcement learning motivates our study of",
    "We present a probabilistic treatment of uncertainty in",
    "Graph neural networks have recently been applied to",
    "Diffusion models offer a flexible generative approach for",
    "We revisit classical kernel methods in the context of",
)
_TOPICS = (
    "molecular property prediction",
    "multilingual machine translation",
    "autonomous robotic manipulation",
    "medical image segmentation",
    "long-horizon planning under partial observability",
    "federated learning on heterogeneous clients",
    "speech recognition in noisy environments",
    "tabular anomaly detection",
    "protein structure prediction",
    "recommendation with implicit feedback",
)
_MIDDLES = (
    "Our approach combines adaptive regularisation with curriculum sampling, and we derive "
    "generalisation bounds that depend only on the effective dimension of the representation.",
    "The method decomposes the objective into independent subproblems that can be solved "
    "in parallel, which reduces training time substantially without sacrificing accuracy.",
    "We analyse the convergence behaviour of stochastic optimisation under distribution "
    "shift and show that momentum-based updates remain stable with appropriate damping.",
    "A carefully designed attention mechanism captures interactions between distant "
    "elements while keeping memory consumption linear in the sequence length.",
    "We construct a benchmark of realistic scenarios and evaluate twelve competitive "
    "baselines under identical computational budgets and hyperparameter search procedures.",
    "Theoretical results establish identifiability of the latent factors under mild "
    "assumptions, and simulations confirm the predicted sample complexity.",
)
_ENDINGS = (
    "Experiments on several public datasets demonstrate consistent improvements over "
    "strong baselines, and ablations highlight the contribution of each component.",
    "Empirical evaluation shows competitive performance with a fraction of the parameters, "
    "and we release code to facilitate reproducibility.",
    "Across extensive experiments our method improves robustness and calibration while "
    "remaining simple to implement on commodity hardware.",
)


def make_abstract(index: int, prefix: str = "a", rng: random.Random | None = None) -> str:
    """A realistic, distinct abstract (several sentences, words of 7+ letters, an id number)."""
    rng = rng or random.Random(index)
    topic = _TOPICS[index % len(_TOPICS)]
    return " ".join(
        (
            f"{rng.choice(_OPENINGS)} {topic}.",
            rng.choice(_MIDDLES),
            rng.choice(_MIDDLES),
            f"We report results on collection {prefix}{index:05d} comprising "
            f"{100 + index} annotated examples.",
            rng.choice(_ENDINGS),
        )
    )


@dataclass(frozen=True)
class Inputs:
    """A generated JSONL input file and its records, in order."""

    path: Path
    records: list[dict[str, str]]

    @property
    def ids(self) -> list[str]:
        return [r["id"] for r in self.records]

    @property
    def by_text(self) -> dict[str, str]:
        """Normalised abstract text -> id."""
        return {norm(r["abstract"]): r["id"] for r in self.records}

    def text_of(self, item_id: str) -> str:
        return next(r["abstract"] for r in self.records if r["id"] == item_id)


def write_inputs(path: Path, count: int, prefix: str = "a", seed: int = 0) -> Inputs:
    """Write `count` abstracts as JSONL ({"id", "abstract"}) to path."""
    rng = random.Random(seed)
    records = [
        {"id": f"{prefix}{i:05d}", "abstract": make_abstract(i, prefix, rng)} for i in range(count)
    ]
    with path.open("w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record) + "\n")
    return Inputs(path, records)


def norm(text: str) -> str:
    return _WS.sub(" ", text).strip()


def abstract_in_request(rec: Recorded) -> str | None:
    """The (normalised) abstract a chat request is about: what follows 'Abstract:'."""
    if rec.body is None:
        return None
    user = first_user_message(rec.body)
    marker = user.rfind("Abstract:")
    if marker < 0:
        return None
    return norm(user[marker + len("Abstract:") :])


def requests_by_id(history: Sequence[Recorded], inputs: Inputs) -> dict[str, list[Recorded]]:
    """Chat requests grouped by the id of the abstract they carry (unknown ones under '?')."""
    lookup = inputs.by_text
    grouped: dict[str, list[Recorded]] = defaultdict(list)
    for rec in history:
        if not rec.path.endswith("/chat/completions"):
            continue
        grouped[lookup.get(abstract_in_request(rec) or "", "?")].append(rec)
    return dict(grouped)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSONL output parsed (fails on any unparseable or non-object line)."""
    rows = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            assert line.endswith("\n"), f"{path}:{number}: line not terminated: {line[:80]!r}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:  # pragma: no cover - reported as a failure
                raise AssertionError(f"{path}:{number}: unparseable line {line[:80]!r}") from exc
            assert isinstance(row, dict), f"{path}:{number}: not an object"
            rows.append(row)
    return rows


def read_manifest(out: Path) -> dict[str, Any]:
    from tagger.files.rows import manifest_path

    return json.loads(manifest_path(out).read_text(encoding="utf-8"))


def assert_rows_match(rows: list[dict[str, Any]], inputs: Inputs) -> None:
    """One row per input id, in input order, each ok or error-with-reason."""
    assert [r["id"] for r in rows] == inputs.ids
    for row in rows:
        assert row["status"] in ("ok", "error"), row
        if row["status"] == "ok":
            assert row["error"] is None
            assert row["summary"] and row["task_area"] and row["method_tags"], row
        else:
            assert isinstance(row["error"], str) and row["error"].strip(), row


def cached_ids(cache_dir: Path, url: str, inputs: Inputs) -> set[str]:
    """Ids whose answer is in the cache, with the keys the CLI computes."""
    from tagger.config import ClientConfig, RunConfig
    from tagger.files.abstracts import iter_abstracts
    from tagger.pipeline.cache import AnswerCache
    from tagger.pricing import PriceTable
    from tagger.prompting.plan import RunPlan

    plan = RunPlan.load(
        RunConfig(client=ClientConfig(model=MODEL, base_url=url), prompts_dir=PROMPTS_DIR),
        PriceTable(),
    )
    cache = AnswerCache(cache_dir)
    try:
        return {
            a.id for a in iter_abstracts([inputs.path]) if cache.get(plan.item_key(a)) is not None
        }
    finally:
        cache.close()


def landed(llm: FakeLLM) -> int:
    """Wait until no client connection is open (all a finished or killed run sent has arrived);
    the number of requests the fake recorded by then."""
    wait_until(lambda: llm.open_connections == 0, "the fake's connections to close")
    return len(llm.history)


def cache_entries(cache_dir: Path) -> int:
    """Answers committed in a cache directory (read straight from diskcache's SQLite file)."""
    db = cache_dir / "cache.db"
    if not db.exists():
        return 0
    try:
        with closing(sqlite3.connect(db, timeout=SAFETY_TIMEOUT)) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM Cache").fetchone()[0])
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):  # the run has only just created the file
            return 0
        raise
