"""The cost estimate against the bill, the bill against the floor, and the cheapest setup.

    python bench/cost_vs_bill.py [--model gpt-5.4-nano] [--setups SETUP,...] [--thousand]

A setup is PROMPT[:K][:live|flex|batch] (K: abstracts per request, --per-request; per line in
a batch, whose first line goes live as its canary). For each, on the 57 seed abstracts: the dry
run's estimate, then the same run against a fresh fake server that bills OpenAI's prompt caching
(tests/fakeserver.py, PromptCache: exact prefixes of 1,024+ tokens in 128-token steps, the
schema first; tests/fakepack.py answers a pack as each abstract alone). Prints estimate / bill
(goal: within 15%), cached tokens, output tokens per answer, bill / floor (the abstracts' own
tokens at the input price plus each answer as compact JSON at the output price; goal for the
default, tag@v3 with 8 per request live: at most 1.15), and the cost per 1,000 abstracts.

--thousand: the cost per 1,000 on 1,026 abstracts (each seed 18 times, each starting with its
own number, so that no abstract's text is a cached prefix of another's), so that the first
request, which pays its prompt in full, weighs as it does in a real run.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from common import ROOT, run_args, run_tagger, seed_texts

from tagger.files.abstracts import scan
from tagger.options import RunOptions
from tagger.pipeline.forecast import DryRunReport, dry_run
from tagger.pricing import PriceTable
from tests.fakeserver import FakeLLM
from tests.harness import taxonomy_ids

DEFAULT_SETUPS = (
    "tag@v2:1:live,tag-compact@v2:1:live,tag@v3:1:live,tag@v3:4:live,tag@v3:8:live,"
    "tag@v3:16:live,tag-compact@v3:8:live,tag@v3:8:flex,tag-compact@v3:8:flex,"
    "tag-compact@v3:16:flex,tag@v3:8:batch,tag@v3:16:batch,tag-compact@v3:8:batch,"
    "tag-compact@v3:16:batch,tag@v3:1:batch,tag-compact@v3:1:batch,tag@v2:1:batch,"
    "tag-compact@v2:1:batch"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="gpt-5.4-nano")
    parser.add_argument("--setups", default=DEFAULT_SETUPS)
    parser.add_argument("--thousand", action="store_true", help="also the cost per 1,000")
    args = parser.parse_args()
    worst, cheapest = 0.0, (float("inf"), "")
    with tempfile.TemporaryDirectory() as tmp:
        seeds, thousand = ROOT / "seeds", Path(tmp) / "thousand.jsonl"
        thousand.write_text("".join(
            json.dumps({"id": f"t{n}", "abstract": f"Study {n}. {text}"}) + "\n"
            for n, text in enumerate(seed_texts() * 18)
        ))  # fmt: skip
        for setup in args.setups.split(","):
            given = setup.split(":")
            prompt = given[0]
            size = given[1] if len(given) > 1 else "1"
            tier = given[2] if len(given) > 2 else "live"
            report = _estimate(seeds, prompt, size, tier, args.model)
            manifest = _run(seeds, prompt, size, tier, args.model, Path(tmp))
            prices, batch = PriceTable(), tier == "batch"
            # A batch's estimate prices its canary line live, the rest at Batch API prices.
            live = prices.cost(args.model, report.usage, flex=tier == "flex")
            estimate = report.batch_cost if batch else live
            bill, floor = manifest["estimated_cost_usd"], manifest["floor"]
            worst = max(worst, abs((estimate or 0.0) / bill - 1))
            per_answer = floor["answer_tokens"] / max(1, manifest["ok"])
            completion = manifest["completion_tokens"] / max(1, manifest["ok"])
            line = (
                f"{setup:24} estimate ${estimate:.5f} bill ${bill:.5f} "
                f"({(estimate or 0.0) / bill:.3f}) · {manifest['requests']} requests · cached "
                f"{manifest['cached_input_tokens']:,} of {manifest['prompt_tokens']:,} · "
                f"{completion:.1f} output tokens per row ({per_answer:.1f} answer) · "
                f"bill/floor {floor['bill_to_floor']} · ok {manifest['ok']}"
            )
            if args.thousand:
                big = _run(thousand, prompt, size, tier, args.model, Path(tmp))
                per_1000 = big["estimated_cost_usd"] / big["ok"] * 1000
                line += f" · per 1,000 ${per_1000:.5f} (bill/floor {big['floor']['bill_to_floor']})"
                cheapest = min(cheapest, (per_1000, setup))
            print(line, flush=True)
    print(f"largest estimate error: {100 * worst:.1f}% (goal: within 15%)")
    if args.thousand:
        print(f"cheapest per 1,000: {cheapest[1]} ${cheapest[0]:.5f}")
    return 0 if worst <= 0.15 else 1


def _estimate(source: Path, prompt: str, size: str, tier: str, model: str) -> DryRunReport:
    with tempfile.TemporaryDirectory() as tmp:
        options = RunOptions(
            model=model, prompt=prompt, prompts_dir=ROOT / "prompts", api_key="sk-bench",
            cache_dir=Path(tmp) / "dry", per_request=int(size), batch=tier == "batch",
            service_tier="flex" if tier == "flex" else None,
        )  # fmt: skip
        return dry_run(options.config(), scan([source]), PriceTable())


def _run(source: Path, prompt: str, size: str, tier: str, model: str, tmp: Path) -> dict:
    with (
        tempfile.TemporaryDirectory(dir=tmp) as run_dir,
        FakeLLM(areas=taxonomy_ids(), openai_rules=True) as fake,
    ):
        assert fake.batches is not None
        fake.batches.auto_after = 2
        out = Path(run_dir) / "out.jsonl"
        extra = ["--model", model, "--prompt", prompt, "-q", "--cache-dir", f"{run_dir}/cache"]
        extra += ["--batch", "--batch-poll", "0.01"] if tier == "batch" else []
        extra += ["--per-request", size]
        extra += ["--service-tier", "flex"] if tier == "flex" else []
        run_tagger(run_args(source, out, fake.base_url, *extra))
        return json.loads(out.with_name("out.manifest.json").read_text())  # type: ignore[no-any-return]


if __name__ == "__main__":
    raise SystemExit(main())
