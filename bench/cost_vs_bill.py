"""The cost estimate against the bill, and the bill against the floor, on the seed abstracts.

    python bench/cost_vs_bill.py [--model gpt-5.4-nano] [--prompts tag,tag-compact@v1,...]

For each prompt, live and with --batch: the dry run's estimate, then the same run against a
fresh fake server that bills OpenAI's prompt caching (tests/fakeserver.py, PromptCache: exact
prefixes of 1,024+ tokens in 128-token steps, the schema first). Prints estimate / bill (the
goal: within 15%), cached tokens, output tokens per answer, and bill / floor (the abstracts'
own tokens at the input price plus the answers' at the output price).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from common import ROOT, run_args, run_tagger

from tagger.files.abstracts import scan
from tagger.options import RunOptions
from tagger.pipeline.job import dry_run
from tagger.pricing import PriceTable
from tests.fakeserver import FakeLLM
from tests.harness import taxonomy_ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="gpt-5.4-nano")
    parser.add_argument("--prompts", default="tag@v2,tag-compact@v1,tag-compact@v2")
    args = parser.parse_args()
    seeds, prices, worst = ROOT / "seeds", PriceTable(), 0.0
    for prompt in args.prompts.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            options = RunOptions(
                model=args.model, prompt=prompt, prompts_dir=ROOT / "prompts",
                cache_dir=Path(tmp) / "dry", api_key="sk-bench",
            )  # fmt: skip
            report = dry_run(options.config(), scan([seeds]), prices)
        for batch in (False, True):
            with (
                tempfile.TemporaryDirectory() as tmp,
                FakeLLM(areas=taxonomy_ids(), openai_rules=True) as fake,
            ):
                assert fake.batches is not None
                fake.batches.auto_after = 2
                out = Path(tmp) / "out.jsonl"
                extra = ["--model", args.model, "--prompt", prompt, "-q"]
                extra += ["--cache-dir", str(Path(tmp) / "cache")]
                extra += ["--batch", "--batch-poll", "0.01"] if batch else []
                run_tagger(run_args(seeds, out, fake.base_url, *extra))
                manifest = json.loads(out.with_name("out.manifest.json").read_text())
            estimate = prices.cost(args.model, report.usage, batch=batch) or 0.0
            bill, floor = manifest["estimated_cost_usd"], manifest["floor"]
            worst = max(worst, abs(estimate / bill - 1))
            print(
                f"{prompt:15} {'batch' if batch else 'live':5} estimate ${estimate:.5f} "
                f"bill ${bill:.5f} ({estimate / bill:.3f}) · per 1,000 ${bill / 57 * 1000:.3f} · "
                f"cached {manifest['cached_input_tokens']:,} of {manifest['prompt_tokens']:,} · "
                f"{floor['answer_tokens'] / max(1, manifest['ok']):.1f} tokens per answer · "
                f"bill/floor {floor['bill_to_floor']}"
            )
    print(f"largest estimate error: {100 * worst:.1f}% (goal: within 15%)")
    return 0 if worst <= 0.15 else 1


if __name__ == "__main__":
    raise SystemExit(main())
