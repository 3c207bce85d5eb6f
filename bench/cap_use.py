"""How much of the work a --max-cost near the dry run's estimate lets through, and the bill.

    python bench/cap_use.py [--model MODEL] [--factors 1.0,1.2,2.0] [--baseline DIR]

For the 57 seed abstracts and 1,026 seed-like ones (bench/cost_vs_bill.py's corpus), live and
with --batch (8 abstracts a request or line, as on OpenAI's API): the dry run's estimate (a
batch's at Batch API prices, its canary live) times each factor is the cap; each run goes
against a fresh fake (tests/fakeserver.py, billing OpenAI's prompt caching) and prints the
rows ok, the bill against the cap (never over), the requests the cap refused, the abstracts
skipped as too dear alone, and a batch's rounds; beside it the dry run's cap under which
nothing waits. --baseline DIR: the same runs with another version's tagger/ (a checkout of
main) in the same process tree, for comparison.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from common import ROOT, run_args, run_tagger, seed_texts

from tagger import defaults
from tagger.files.abstracts import scan
from tagger.options import RunOptions
from tagger.pipeline.forecast import DryRunReport, dry_run
from tagger.pricing import PriceTable
from tests.fakeserver import FakeLLM
from tests.harness import taxonomy_ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=defaults.MODEL, help="default: tagger's default")
    parser.add_argument("--factors", default="1.0,1.2,2.0")
    parser.add_argument("--baseline", type=Path, default=None, help="another version's folder")
    args = parser.parse_args()
    over = 0
    with tempfile.TemporaryDirectory() as tmp:
        thousand = Path(tmp) / "thousand.jsonl"
        thousand.write_text("".join(
            json.dumps({"id": f"t{n}", "abstract": f"Study {n}. {text}"}) + "\n"
            for n, text in enumerate(seed_texts() * 18)
        ))  # fmt: skip
        for name, source in (("seeds", ROOT / "seeds"), ("1,026", thousand)):
            for tier in ("live", "batch"):
                report = _estimate(source, tier, args.model, Path(tmp))
                estimate = report.batch_cost if tier == "batch" else report.cost
                assert estimate is not None and report.unheld_cap is not None
                unheld = report.unheld_cap
                print(f"{name} {tier}: estimate ${estimate:.5f}, unheld cap "
                      f"${unheld:.5f} ({unheld / estimate:.2f}x)")  # fmt: skip
                for factor in map(float, args.factors.split(",")):
                    cap = estimate * factor
                    for label, code in (("this", None), ("baseline", args.baseline)):
                        if label == "baseline" and code is None:
                            continue
                        m = _run(source, tier, args.model, cap, Path(tmp), code)
                        bill = m["estimated_cost_usd"] or 0.0
                        over += bill > cap
                        rounds = m.get("batch", {}).get("rounds", "-")
                        print(f"  {label:8} cap {factor:.1f}x ${cap:.5f}: ok {m['ok']}/"
                              f"{m['input_count']} ({100 * m['ok'] / m['input_count']:.0f}%), bill "
                              f"${bill:.5f} ({100 * bill / cap:.1f}% of the cap), refused "
                              f"{m.get('refused_requests', 0)}, over the cap alone "
                              f"{m.get('over_cap', '-')}, rounds {rounds}, requests "
                              f"{m['requests']}", flush=True)  # fmt: skip
    print(f"runs over the cap: {over}")
    return 1 if over else 0


def _estimate(source: Path, tier: str, model: str, tmp: Path) -> DryRunReport:
    with tempfile.TemporaryDirectory(dir=tmp) as run_dir:
        options = RunOptions(
            model=model, prompts_dir=ROOT / "prompts", api_key="sk-bench",
            cache_dir=Path(run_dir) / "dry", per_request=8, batch=tier == "batch",
            base_url="http://127.0.0.1:9/v1", concurrency=8,
        )  # fmt: skip
        return dry_run(options.config(), scan([source]), PriceTable())


def _run(
    source: Path, tier: str, model: str, cap: float, tmp: Path, code: Path | None
) -> dict[str, object]:
    with (
        tempfile.TemporaryDirectory(dir=tmp) as run_dir,
        FakeLLM(areas=taxonomy_ids(), openai_rules=True) as fake,
    ):
        assert fake.batches is not None
        fake.batches.auto_after = 2
        out = Path(run_dir) / "out.jsonl"
        extra = ["--model", model, "-q", "--cache-dir", f"{run_dir}/cache", "--per-request", "8"]
        extra += ["--concurrency", "8", "--max-cost", repr(cap)]
        extra += ["--batch", "--batch-poll", "0.01"] if tier == "batch" else []
        run_tagger(run_args(source, out, fake.base_url, *extra), code=code)
        manifest: dict[str, object] = json.loads(out.with_name("out.manifest.json").read_text())
        return manifest


if __name__ == "__main__":
    raise SystemExit(main())
