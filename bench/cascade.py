"""The cascade's savings and its guarantee on simulated corpora, against the `bargain` package.

    python bench/cascade.py [--rows 2000 20000 100000] [--targets 0.9 0.95 0.99] [--runs 20]
    python bench/cascade.py --coverage [--rows ...] [--targets ...] [--runs 3] [--samples 200]

Each run draws a corpus where the truth is known (tests/cascadesim.py: the cheap model right
on ~85% of rows, its confidence informative but overconfident and noisy), then picks the rows
the strong model answers with tagger.cascade and with BARGAIN_A (Zeighami et al. 2025, the
`bargain` package, same data, same target and delta). Reported per corpus size and target:
the share of strong-model calls (sample + escalated; all-strong is 100%), the calls saved
against all-strong, the runs that met the target (it must be at least 1 - delta of them), the
seconds per run, and how many fewer strong calls tagger made than bargain (negative: more).
Without `bargain` installed (`pip install bargain`: numpy, pandas) only tagger's side runs.

--coverage checks the guarantee instead: `--runs` corpora, `--samples` seeded samples of each
(tests/cascadesim.coverage), and reports the share of runs that missed the target next to
delta and to the exact tail the cutoffs stand on (the miss rate the bound allows).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tagger.cascade import CascadeTarget
from tests.cascadesim import SAMPLE_SEEDS, Population, agreement, coverage, population, run_cascade


def load_baseline(revision: str) -> Any:
    """tagger/cascade's statistics as they were at a git revision, imported apart (the same
    corpora and seeds then compare the certifier before and after a change in one run)."""
    import importlib
    import subprocess
    import tempfile

    root = Path(__file__).resolve().parents[1]
    package = Path(tempfile.mkdtemp(prefix="cascade-baseline-")) / "baseline_cascade"
    package.mkdir()
    listing = subprocess.run(
        ["git", "-C", str(root), "ls-tree", "--name-only", revision, "tagger/cascade/"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for path in listing:
        source = subprocess.run(
            ["git", "-C", str(root), "show", f"{revision}:{path}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        text = source.replace("tagger.cascade.", "baseline_cascade.")
        (package / Path(path).name).write_text(text, encoding="utf-8")
    (package / "__init__.py").write_text("", encoding="utf-8")  # the drivers stay out
    sys.path.insert(0, str(package.parent))
    return importlib.import_module("baseline_cascade.certify")


def baseline_run(
    certify: Any, world: Population, target: float, delta: float, seed: int
) -> tuple[float, float]:
    """The baseline certifier on the same corpus and seed: (strong share, agreement)."""
    certifier = certify.Certifier(world.confidences, certify.CascadeTarget(target, delta, seed))
    while batch := certifier.next_sample():
        certifier.record({i: world.agrees[i] for i in batch})
    decision = certifier.decision()
    kept = decision.keep if hasattr(decision, "keep") else decision.kept_rows()
    wrong = sum(not world.agrees[i] for i in kept)
    return decision.escalated_share, 1 - wrong / len(world.agrees)


def bargain_run(world: Population, target: float, delta: float, seed: int) -> tuple[float, float]:
    """BARGAIN_A on the same corpus: (share of strong calls, share agreeing with the strong)."""
    import BARGAIN  # the bench's only use of it: tagger never depends on it

    class Proxy(BARGAIN.Proxy):  # type: ignore[misc]
        def proxy_func(self, record: str) -> tuple[str, float]:
            row = int(record)
            score = world.confidences[row]
            return ("strong" if world.agrees[row] else "other"), (-1.0 if score is None else score)

    class Oracle(BARGAIN.Oracle):  # type: ignore[misc]
        def oracle_func(self, record: str, proxy_output: Any) -> tuple[bool, str]:
            return proxy_output == "strong", "strong"

    cascade = BARGAIN.BARGAIN_A(
        Proxy(verbose=False, max_workers=1),
        Oracle(verbose=False, max_workers=1),
        target=target,
        delta=delta,
        verbose=False,
        seed=seed,
    )
    records = [str(i) for i in range(len(world.agrees))]
    output, used_oracle = cascade.process(records, return_oracle_usage=True)
    rows = len(records)
    return sum(used_oracle) / rows, sum(answer == "strong" for answer in output) / rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[2000, 20_000, 100_000])
    parser.add_argument("--targets", type=float, nargs="+", default=[0.9, 0.95, 0.99])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--delta", type=float, default=0.05)
    parser.add_argument("--accuracy", type=float, default=0.85)
    parser.add_argument("--sharpness", type=float, default=1.6, help="overconfidence (1: none)")
    parser.add_argument("--noise", type=float, default=0.8, help="confidence noise (logit sd)")
    parser.add_argument("--missing", type=float, default=0.0, help="share without confidence")
    parser.add_argument("--no-bargain", action="store_true", help="tagger's side only")
    parser.add_argument("--coverage", action="store_true", help="check the guarantee")
    parser.add_argument("--samples", type=int, default=200, help="samples per corpus")
    parser.add_argument("--baseline", metavar="REV", help="also run tagger/cascade at a git rev")
    args = parser.parse_args()
    shape = {
        "accuracy": args.accuracy,
        "sharpness": args.sharpness,
        "noise": args.noise,
        "missing": args.missing,
    }
    if args.coverage:
        return _coverage(args, shape)
    have_bargain = False
    if not args.no_bargain:
        try:
            import BARGAIN  # noqa: F401
        except ImportError:
            print("bargain is not installed (pip install bargain): tagger's cascade alone")
        else:
            have_bargain = True
    print(
        f"cheap model right on ~{args.accuracy:.0%} of rows (sharpness {args.sharpness}, noise"
        f" {args.noise}, missing {args.missing}); delta {args.delta}; {args.runs} runs"
        " each; strong calls = sample + escalated, as a share of rows (all-strong: 100%)"
    )
    baseline = load_baseline(args.baseline) if args.baseline else None
    header = (
        f"{'rows':>7} {'target':>6} | tagger: {'strong':>6} {'saved':>6} {'met':>5} {'s/run':>6}"
    )
    if baseline is not None:
        header += f" | {args.baseline}: {'strong':>6} {'met':>5}"
    if have_bargain:
        header += (
            f" | bargain: {'strong':>6} {'saved':>6} {'met':>5} {'s/run':>6} | fewer strong calls"
        )
    print(header)
    for rows in args.rows:
        for target in args.targets:
            ours, our_met, theirs, their_met, before, before_met = [], 0, [], 0, [], 0
            our_time = their_time = 0.0
            for run in range(args.runs):
                world = population(rows, seed=run, **shape)
                start = time.perf_counter()
                goal = CascadeTarget(target, args.delta, seed=SAMPLE_SEEDS + run)
                decision = run_cascade(world, goal)
                our_time += time.perf_counter() - start
                ours.append(decision.escalated_share)
                our_met += agreement(world, decision) >= target
                if baseline is not None:
                    share, agreed = baseline_run(
                        baseline, world, target, args.delta, SAMPLE_SEEDS + run
                    )
                    before.append(share)
                    before_met += agreed >= target
                if have_bargain:
                    start = time.perf_counter()
                    share, agreed = bargain_run(world, target, args.delta, SAMPLE_SEEDS + run)
                    their_time += time.perf_counter() - start
                    theirs.append(share)
                    their_met += agreed >= target
            mean = statistics.mean(ours)
            line = (
                f"{rows:>7,} {target:>6} | tagger: {mean:>6.1%} {1 - mean:>6.1%} "
                f"{our_met:>2}/{args.runs:<2} {our_time / args.runs:>5.2f}s"
            )
            if baseline is not None:
                line += f" | {args.baseline}: {statistics.mean(before):>6.1%} "
                line += f"{before_met:>2}/{args.runs:<2}"
            if have_bargain:
                theirs_mean = statistics.mean(theirs)
                line += (
                    f" | bargain: {theirs_mean:>6.1%} {1 - theirs_mean:>6.1%} "
                    f"{their_met:>2}/{args.runs:<2} {their_time / args.runs:>5.2f}s"
                    f" | {1 - mean / theirs_mean:>+17.1%}"
                )
            print(line, flush=True)
    return 0


def _coverage(args: argparse.Namespace, shape: dict[str, float]) -> int:
    print(
        f"coverage: {args.runs} corpora x {args.samples} samples per row; delta {args.delta};"
        " a miss is a run whose kept rows hold more disagreements than the budget"
    )
    print(f"{'rows':>7} {'target':>6} | {'runs':>5} {'missed':>7} {'bound':>7} {'strong':>7} s")
    worst = 0.0
    for rows in args.rows:
        for target in args.targets:
            start = time.perf_counter()
            result = coverage(
                rows, target, delta=args.delta, populations=args.runs, samples=args.samples, **shape
            )
            rate, bound = result.misses / result.runs, result.bound / result.runs
            worst = max(worst, rate)
            print(
                f"{rows:>7,} {target:>6} | {result.runs:>5} {rate:>7.2%} {bound:>7.2%} "
                f"{result.strong_share:>7.1%} {time.perf_counter() - start:.0f}",
                flush=True,
            )
    return 0 if worst <= args.delta * 1.5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
