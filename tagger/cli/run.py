"""`tagger run`'s options; the work happens in tagger.cli.job, imported when it runs.

The options are tagger.options.RunOptions by name (tests/test_api.py checks names, defaults
and environment variables against it): the CLI and `tagger.tag()` take the same ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tagger import defaults
from tagger.cli.common import (
    ApiKeyOpt,
    BaseUrlOpt,
    CacheDirOpt,
    EffortName,
    HttpName,
    ModeName,
    PathsArg,
    PromptsDirOpt,
    TierName,
    named_file,
)
from tagger.prompting.packs import MAX_PER_REQUEST


def run(
    paths: PathsArg,
    output: Annotated[
        Path,
        typer.Option(
            "-o",
            "--output",
            help="JSONL output file ('-': stdout).",
            metavar="FILE",
            parser=named_file,
        ),
    ] = Path("tagged.jsonl"),
    model: Annotated[
        str | None,
        typer.Option(
            envvar="TAGGER_MODEL",
            help="Model name as the server knows it (a local server listing one model: that one).",
            metavar="NAME",
            show_default=defaults.MODEL,
        ),
    ] = None,
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
    prompt: Annotated[
        str | None,
        typer.Option(
            envvar="TAGGER_PROMPT",
            help="Prompt version, e.g. tag@v1 (see `tagger prompts`).",
            show_default=(
                "tag's newest that packs (tag@v3) when the run sends several abstracts per "
                "request, else its newest that asks about one (tag@v2)"
            ),
            metavar="NAME@VERSION",
        ),
    ] = None,
    prompts_dir: PromptsDirOpt = None,
    mode: Annotated[
        ModeName | None,
        typer.Option(
            envvar="TAGGER_MODE", help="Force a structured-output mode.", show_default="detect"
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            envvar="TAGGER_CONCURRENCY",
            min=1,
            help="Requests in flight at most.",
            show_default=(
                f"{defaults.LOCAL_CONCURRENCY} for a local server, "
                f"else {defaults.REMOTE_CONCURRENCY}"
            ),
            metavar="N",
        ),
    ] = None,
    per_request: Annotated[
        int | None,
        typer.Option(
            envvar="TAGGER_PER_REQUEST",
            min=1,
            max=MAX_PER_REQUEST,
            help=(
                "Abstracts asked about in one request or --batch line (a prompt that packs, "
                "e.g. tag@v3)."
            ),
            show_default=(
                f"{defaults.PER_REQUEST} on OpenAI's API for a model with a cached-input price, "
                "else 1"
            ),
            metavar="N",
        ),
    ] = None,
    rpm: Annotated[
        int | None,
        typer.Option(
            envvar="TAGGER_RPM",
            help="Requests per minute at most.",
            show_default="learned from headers",
            metavar="N",
        ),
    ] = None,
    tpm: Annotated[
        int | None,
        typer.Option(
            envvar="TAGGER_TPM",
            help="Tokens per minute at most.",
            show_default="learned from headers",
            metavar="N",
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            envvar="TAGGER_TIMEOUT",
            help="Seconds one whole request may take.",
            show_default=(
                f"{defaults.LOCAL_TIMEOUT:g} for a local server, {defaults.FLEX_TIMEOUT:g} with "
                f"--service-tier flex, else {defaults.REMOTE_TIMEOUT:g}"
            ),
            metavar="SECONDS",
        ),
    ] = None,
    max_attempts: Annotated[
        int,
        typer.Option(
            envvar="TAGGER_MAX_ATTEMPTS",
            help="HTTP requests per abstract, retries and repairs included.",
            metavar="N",
        ),
    ] = defaults.MAX_ATTEMPTS,
    repair_turns: Annotated[
        int,
        typer.Option(help="Times an invalid answer is sent back with its error.", metavar="N"),
    ] = defaults.REPAIR_TURNS,
    cache_dir: CacheDirOpt = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Neither read nor write the answer cache.")
    ] = False,
    refresh: Annotated[
        bool, typer.Option("--refresh", help="Ask again and overwrite cached answers.")
    ] = False,
    max_cost: Annotated[
        float | None,
        typer.Option(
            envvar="TAGGER_MAX_COST",
            help="Stop before the estimated cost passes this many US$.",
            show_default="no limit",
            metavar="DOLLARS",
        ),
    ] = None,
    max_requests: Annotated[
        int | None,
        typer.Option(
            envvar="TAGGER_MAX_REQUESTS",
            help="Stop before sending more than N requests.",
            show_default="no limit",
            metavar="N",
        ),
    ] = None,
    prices: Annotated[
        Path | None,
        typer.Option(
            envvar="TAGGER_PRICES",
            help="TOML file of model prices over the built-in table.",
            show_default="built-in",
            metavar="FILE",
        ),
    ] = None,
    http: Annotated[
        HttpName, typer.Option(envvar="TAGGER_HTTP", help="The SDK's HTTP transport.")
    ] = "httpx",
    no_logprobs: Annotated[
        bool,
        typer.Option(
            "--no-logprobs",
            help="Ask for no token log-probabilities: rows get no task-area confidence.",
        ),
    ] = False,
    reasoning_effort: Annotated[
        EffortName | None,
        typer.Option(
            envvar="TAGGER_REASONING_EFFORT",
            help="Reasoning effort of a reasoning model (gpt-5 family, o-series).",
            show_default="the prompt's, else the cheapest the model takes",
        ),
    ] = None,
    service_tier: Annotated[
        TierName | None,
        typer.Option(
            envvar="TAGGER_SERVICE_TIER",
            help="OpenAI processing tier; flex: half price, slower (timeout 900 s).",
            show_default="the server's",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count, estimate cost, show a prompt; send nothing.")
    ] = False,
    batch: Annotated[
        bool,
        typer.Option("--batch", help="Use the Batch API: half price, answers within 24 h."),
    ] = False,
    detach: Annotated[
        bool,
        typer.Option("--detach", help="With --batch: submit and exit; rerun to collect."),
    ] = False,
    finish_live: Annotated[
        bool,
        typer.Option("--finish-live", help="With --batch: send repairs and leftovers live."),
    ] = False,
    batch_max_requests: Annotated[
        int,
        typer.Option(
            envvar="TAGGER_BATCH_MAX_REQUESTS", hidden=True, help="Requests per batch file."
        ),
    ] = defaults.BATCH_MAX_REQUESTS,
    batch_max_bytes: Annotated[
        int,
        typer.Option(envvar="TAGGER_BATCH_MAX_BYTES", hidden=True, help="Bytes per batch file."),
    ] = defaults.BATCH_MAX_BYTES,
    batch_poll: Annotated[
        float,
        typer.Option(
            envvar="TAGGER_BATCH_POLL", hidden=True, help="Seconds between looks at the batches."
        ),
    ] = defaults.BATCH_POLL_SECONDS,
    ray: Annotated[
        bool, typer.Option("--ray", help="Run on Ray: parts beside OUT, merged into OUT.")
    ] = False,
    ray_address: Annotated[
        str | None,
        typer.Option(
            envvar="RAY_ADDRESS",
            help="With --ray: 'auto' (this node's cluster) or HOST:PORT.",
            show_default="start a local Ray",
            metavar="ADDRESS",
        ),
    ] = None,
    ray_actors: Annotated[
        int, typer.Option(min=1, help="With --ray: tagging actors.", metavar="N")
    ] = 2,
    cascade: Annotated[
        str | None,
        typer.Option(
            help="CHEAP,STRONG: the cheap model answers where its confidence "
            "certifies it agrees with the strong one, the strong one the rest (--target).",
            show_default="one model (--model)",
            metavar="MODELS",
        ),
    ] = None,
    target: Annotated[
        float | None,
        typer.Option(
            help="With --cascade: the share of rows whose task area is the strong model's.",
            show_default="none: required with --cascade",
            metavar="SHARE",
        ),
    ] = None,
    delta: Annotated[
        float,
        typer.Option(
            help="With --cascade: the chance, at most, that the target is missed.",
            metavar="P",
        ),
    ] = defaults.CASCADE_DELTA,
    cascade_seed: Annotated[
        int,
        typer.Option(
            help="With --cascade: the seed of the strong model's sample (reruns reuse it).",
            metavar="N",
        ),
    ] = defaults.CASCADE_SEED,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Log every retry, repair and pause with its reason."),
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print only errors: no progress, no summary.")
    ] = False,
) -> None:
    """Tag abstracts and write one JSON line per abstract, in input order."""
    given = dict(locals())  # every option by its name: the names tagger.tag() takes
    from tagger.apikey import key_refusal
    from tagger.cli.common import print_err
    from tagger.files.outname import output_problem
    from tagger.redact import safe_text

    # Before the imports of a run (~0.5 s, seconds on a loaded machine): an -o that cannot be
    # the output (the dry run's too), then a missing or placeholder key, are refused at once.
    problem = None if str(output) == "-" else output_problem(output, paths)
    refusal = problem or (None if dry_run else key_refusal(api_key, base_url))
    if refusal is not None:
        print_err(f"Error: {safe_text(refusal, api_key)}")
        raise typer.Exit(2)
    from tagger.cli.job import run_command
    from tagger.cli.runcommand import RunCommand

    command = RunCommand(
        paths=given.pop("paths"),
        output=given.pop("output"),
        dry_run=given.pop("dry_run"),
        verbose=given.pop("verbose"),
        quiet=given.pop("quiet"),
        given=given,
    )
    run_command(command)
