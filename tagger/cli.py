"""The command line: turns options into a RunConfig and domain errors into messages."""

from __future__ import annotations

import asyncio
import json
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from dotenv import load_dotenv
from pydantic import SecretStr, ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from tagger import __version__
from tagger.cli_review import register_review_commands
from tagger.config import DEFAULT_MODEL, ClientConfig, HttpBackend, Mode, RunConfig
from tagger.errors import TaggerError, UsageError
from tagger.secrets import redact

app = typer.Typer(help="Tag research-paper abstracts with an LLM.", no_args_is_help=True)
cache_app = typer.Typer(help="Inspect or clear the answer cache.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")

EXIT_INTERRUPTED = 130
ModeChoice = Mode  # typer renders the enum's values as choices

PathsArg = Annotated[
    list[Path], typer.Argument(help="Abstract files (.txt, .jsonl, .csv) or directories of them.")
]
PromptsDirOpt = Annotated[
    Path | None,
    typer.Option("--prompts-dir", envvar="TAGGER_PROMPTS_DIR", help="Where prompts live."),
]
CacheDirOpt = Annotated[
    Path, typer.Option("--cache-dir", envvar="TAGGER_CACHE_DIR", help="Answer cache directory.")
]


def _stderr() -> Console:
    return Console(stderr=True)


def _say(message: str) -> None:
    """One unwrapped line on stderr: logs and CI must see it whole."""
    typer.echo(message, err=True)


@contextmanager
def _errors(secret: str | None = None) -> Iterator[None]:
    """Turn domain errors into one-line messages and exit codes; keep the key out of them."""
    try:
        yield
    except typer.Exit:
        raise
    except TaggerError as exc:
        _say(f"Error: {redact(str(exc), secret)}")
        raise typer.Exit(exc.exit_code) from None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        _say(f"Error: invalid option: {problems}")
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Exception:
        _say(redact(traceback.format_exc(), secret))
        raise typer.Exit(1) from None


@app.callback(invoke_without_command=True)
def main(
    version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False,
) -> None:
    """Tag research-paper abstracts with an LLM."""
    # Loaded here, not at import, and before subcommand options read their envvars.
    load_dotenv(Path.cwd() / ".env", override=False)
    if version:
        typer.echo(__version__)
        raise typer.Exit(0)


class _BarProgress:
    """A rich progress bar on stderr fed by the runner."""

    def __init__(self, progress: Progress, total: int) -> None:
        self._progress = progress
        self._task = progress.add_task("tagging", total=total, failed=0)
        self._failed = 0

    def advance(self, row: dict[str, Any]) -> None:
        self._failed += row["status"] != "ok" and not str(row["error"]).startswith("not run")
        self._progress.update(self._task, advance=1, failed=self._failed)


@app.command()
def run(
    paths: PathsArg,
    output: Annotated[
        Path, typer.Option("-o", "--output", help="JSONL output file ('-' for stdout).")
    ] = Path("tagged.jsonl"),
    model: Annotated[str, typer.Option(envvar="TAGGER_MODEL", help="Model name.")] = DEFAULT_MODEL,
    base_url: Annotated[
        str | None,
        typer.Option(envvar="OPENAI_BASE_URL", help="OpenAI-compatible server, e.g. vLLM/Ollama."),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="OPENAI_API_KEY", help="API key (better: .env).", show_default=False),
    ] = None,
    prompt: Annotated[
        str | None, typer.Option(envvar="TAGGER_PROMPT", help="NAME@VERSION; default newest.")
    ] = None,
    prompts_dir: PromptsDirOpt = None,
    mode: Annotated[
        ModeChoice | None,
        typer.Option(
            envvar="TAGGER_MODE", help="Force a structured-output mode (default: detect)."
        ),
    ] = None,
    concurrency: Annotated[int, typer.Option(envvar="TAGGER_CONCURRENCY", min=1)] = 8,
    rpm: Annotated[
        int | None, typer.Option(envvar="TAGGER_RPM", help="Requests/minute cap.")
    ] = None,
    tpm: Annotated[int | None, typer.Option(envvar="TAGGER_TPM", help="Tokens/minute cap.")] = None,
    timeout: Annotated[
        float, typer.Option(envvar="TAGGER_TIMEOUT", help="Seconds/request.")
    ] = 60.0,
    max_attempts: Annotated[
        int, typer.Option(envvar="TAGGER_MAX_ATTEMPTS", help="HTTP requests per abstract, at most.")
    ] = 6,
    repair_turns: Annotated[int, typer.Option(help="Times an invalid answer is sent back.")] = 2,
    cache_dir: CacheDirOpt = Path("cache"),
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Neither read nor write.")] = False,
    refresh: Annotated[bool, typer.Option(help="Ask again; overwrite cached answers.")] = False,
    max_cost: Annotated[
        float | None, typer.Option(envvar="TAGGER_MAX_COST", help="Stop at this estimated $.")
    ] = None,
    max_requests: Annotated[
        int | None, typer.Option(envvar="TAGGER_MAX_REQUESTS", help="Stop after N requests.")
    ] = None,
    prices: Annotated[
        Path | None, typer.Option(envvar="TAGGER_PRICES", help="TOML price table override.")
    ] = None,
    http: Annotated[
        HttpBackend, typer.Option(envvar="TAGGER_HTTP", help="HTTP transport of the SDK.")
    ] = HttpBackend.HTTPX,
    dry_run: Annotated[bool, typer.Option(help="Count and estimate; send nothing.")] = False,
) -> None:
    """Tag abstracts and write one JSON line per abstract, in input order."""
    from tagger.execute import dry_run as plan_dry_run
    from tagger.execute import require_key, run_job
    from tagger.inputs import scan
    from tagger.pricing import PriceTable
    from tagger.prompts import default_prompts_dir

    with _errors(api_key):
        config = RunConfig(
            client=ClientConfig(
                model=model,
                base_url=base_url or None,
                api_key=SecretStr(api_key) if api_key else None,
                timeout=timeout,
                max_attempts=max_attempts,
                http=http,
                rpm=rpm,
                tpm=tpm,
            ),
            prompts_dir=prompts_dir or default_prompts_dir(),
            prompt_ref=prompt,
            mode=mode,
            concurrency=concurrency,
            repair_turns=repair_turns,
            cache_dir=cache_dir,
            use_cache=not no_cache,
            refresh=refresh,
            max_cost=max_cost,
            max_requests=max_requests,
        )
        if not dry_run:
            require_key(config)
        price_table = PriceTable.load(prices)
        scanned = scan(paths)
        if dry_run:
            _print_dry_run(plan_dry_run(config, scanned, price_table))
            return
        destination = None if str(output) == "-" else output
        console = _stderr()
        with Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("failed {task.fields[failed]}"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        ) as progress:
            sink = _BarProgress(progress, scanned.count)
            stats = asyncio.run(run_job(config, scanned, destination, sink, price_table))
        _print_summary(stats, destination)
        if stats.interrupted:
            raise typer.Exit(EXIT_INTERRUPTED)
        if stats.failed or stats.stop_reason:
            raise typer.Exit(1)


def _print_summary(stats: Any, output: Path | None) -> None:
    from tagger.execute import summarise

    table = Table(title="tagger run", show_header=False)
    for label, value in summarise(stats):
        table.add_row(label, value)
    console = _stderr()
    console.print(table)
    if output is not None:
        _say(f"wrote {output}")
    if stats.stop_reason:
        _say(f"Stopped: {stats.stop_reason}; rerun the same command to finish")


def _print_dry_run(report: Any) -> None:
    console = _stderr()
    cost = "n/a (unknown model price)" if report.cost is None else f"${report.cost:.4f}"
    table = Table(title="tagger run --dry-run (nothing sent)", show_header=False)
    table.add_row("abstracts", str(report.items))
    table.add_row("unique", str(report.unique))
    table.add_row("already cached", str(report.cached))
    table.add_row("to send", str(report.unique - report.cached))
    table.add_row("estimated tokens", f"{report.prompt_tokens} in / {report.completion_tokens} out")
    table.add_row("estimated cost", cost)
    console.print(table)
    if report.first_messages:
        typer.echo("--- first prompt ---")
        for message in report.first_messages:
            typer.echo(f"[{message['role']}]\n{message['content']}\n")


@app.command("prompts")
def list_prompts_command(prompts_dir: PromptsDirOpt = None) -> None:
    """List the prompt versions (default: the newest)."""
    from tagger.prompts import default_prompts_dir, list_prompts

    with _errors():
        found = list_prompts(prompts_dir or default_prompts_dir())
        table = Table("prompt", "hash", "taxonomy", "description")
        for item in found:
            table.add_row(item.ref, item.hash, item.taxonomy_version or "newest", item.description)
        Console().print(table)


@cache_app.command("stats")
def cache_stats(
    cache_dir: CacheDirOpt = Path("cache"),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show how many answers the cache holds."""
    from tagger.cache import AnswerCache

    with _errors():
        cache = AnswerCache(cache_dir)
        stats = cache.stats()
        cache.close()
        if as_json:
            typer.echo(json.dumps(stats))
            return
        typer.echo(f"{stats['entries']} answers, {stats['bytes']} bytes in {stats['directory']}")


@cache_app.command("clear")
def cache_clear(
    cache_dir: CacheDirOpt = Path("cache"),
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Delete every cached answer (they cost money to get again)."""
    from tagger.cache import AnswerCache

    with _errors():
        if not yes and not typer.confirm(f"Delete every cached answer in {cache_dir}?"):
            raise UsageError("not cleared")
        cache = AnswerCache(cache_dir)
        removed = cache.clear()
        cache.close()
        typer.echo(f"removed {removed} answers from {cache_dir}")


register_review_commands(app)

if __name__ == "__main__":
    app()
