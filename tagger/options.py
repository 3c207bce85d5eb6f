"""The options of a run, as `tagger run` and `tagger.tag()` take them; their environment names.

One model for both: the CLI fills it from its flags (typer reads the same environment
variables, after the CLI loaded `.env`), the Python API from keyword arguments, the process
environment and the `.env` file (read, never loaded into `os.environ`). Defaults that depend
on the server are left to RunConfig, which asks tagger.defaults: one place.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from tagger import defaults
from tagger.config import (
    BatchConfig,
    CascadeConfig,
    ClientConfig,
    HttpBackend,
    Mode,
    ReasoningEffort,
    RunConfig,
    ServiceTier,
)
from tagger.errors import ConfigError, UsageError

__all__ = ["ENVIRONMENT", "RunOptions", "dotenv_path"]

# The environment variable of each option that has one (the same for the CLI and the API).
ENVIRONMENT: dict[str, str] = {
    "model": "TAGGER_MODEL",
    "base_url": "OPENAI_BASE_URL",
    "api_key": "OPENAI_API_KEY",
    "prompt": "TAGGER_PROMPT",
    "prompts_dir": "TAGGER_PROMPTS_DIR",
    "mode": "TAGGER_MODE",
    "concurrency": "TAGGER_CONCURRENCY",
    "rpm": "TAGGER_RPM",
    "tpm": "TAGGER_TPM",
    "timeout": "TAGGER_TIMEOUT",
    "max_attempts": "TAGGER_MAX_ATTEMPTS",
    "cache_dir": "TAGGER_CACHE_DIR",
    "max_cost": "TAGGER_MAX_COST",
    "max_requests": "TAGGER_MAX_REQUESTS",
    "prices": "TAGGER_PRICES",
    "http": "TAGGER_HTTP",
    "reasoning_effort": "TAGGER_REASONING_EFFORT",
    "service_tier": "TAGGER_SERVICE_TIER",
    "batch_max_requests": "TAGGER_BATCH_MAX_REQUESTS",
    "batch_max_bytes": "TAGGER_BATCH_MAX_BYTES",
    "batch_poll": "TAGGER_BATCH_POLL",
    "ray_address": "RAY_ADDRESS",
    "per_request": "TAGGER_PER_REQUEST",
}


def dotenv_path() -> Path:
    """The `.env` file a run reads its settings from: the nearest one, here or above, inside
    the boundary tagger.project draws (ConfigError if the one found is not the user's own)."""
    from tagger.project import find_dotenv

    return find_dotenv() or Path.cwd() / ".env"


# `tagger run`'s options that are no option of tag(): what a Python caller does instead.
CLI_ONLY = {
    "dry_run": "tagger.estimate(items, ...) counts, prices and renders without sending",
    "output": "run.write_jsonl(path) writes the rows and their manifest",
    "quiet": "progress=False draws nothing (errors are raised, warnings go to logging)",
    "verbose": "logging.getLogger('tagger').setLevel(logging.INFO) logs every retry and repair",
    "paths": "pass the files as items: tag([Path('a.jsonl'), ...])",
}


class RunOptions(BaseModel):
    """The options of one run, as given: `tagger run`'s flags, `tagger.tag()`'s keywords."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None  # None: a local server's only model, else defaults.MODEL
    base_url: str | None = None
    api_key: SecretStr | None = None
    prompt: str | None = None  # NAME@VERSION; None: the default (tagger.prompting.plan.run_prompt)
    prompts_dir: Path | None = None  # None: ./prompts, else the installed copy
    mode: Mode | None = None  # None: detect
    concurrency: int | None = Field(None, ge=1)  # None: chosen for the server
    per_request: int | None = Field(None, ge=1)  # None: chosen for the server and prompt
    rpm: int | None = Field(None, ge=1)
    tpm: int | None = Field(None, ge=1)
    timeout: float | None = Field(None, gt=0)  # None: chosen for the server
    max_attempts: int = defaults.MAX_ATTEMPTS
    repair_turns: int = defaults.REPAIR_TURNS
    cache_dir: Path | None = None  # None: the project's cache/, else the user's cache directory
    no_cache: bool = False
    refresh: bool = False
    max_cost: float | None = None
    max_requests: int | None = None
    prices: Path | None = None  # a TOML file of prices over the built-in table
    http: Literal["httpx", "aiohttp"] = "httpx"
    no_logprobs: bool = False
    reasoning_effort: ReasoningEffort | None = None  # None: the prompt's, else the cheapest
    service_tier: ServiceTier | None = None  # None: not sent (the server's default tier)
    batch: bool = False
    detach: bool = False
    finish_live: bool = False
    batch_max_requests: int = defaults.BATCH_MAX_REQUESTS
    batch_max_bytes: int = defaults.BATCH_MAX_BYTES
    batch_poll: float = defaults.BATCH_POLL_SECONDS
    ray: bool = False  # `tagger run --ray` (tagger.cli.rayrun)
    ray_address: str | None = None  # None: start a local Ray
    ray_actors: int = Field(2, ge=1)
    cascade: str | None = None  # "CHEAP,STRONG" (tagger.cascade): --model is not used then
    target: float | None = None  # with cascade: the share of rows that agree with STRONG
    delta: float = defaults.CASCADE_DELTA
    cascade_seed: int = defaults.CASCADE_SEED

    @field_validator("model", mode="before")
    @classmethod
    def _model_named(cls, value: object) -> object:
        """An empty --model would silently mean the default model."""
        if isinstance(value, str) and not value.strip():
            raise ValueError("empty: name a model (`tagger models` lists a server's)")
        return value

    @field_validator("cache_dir", mode="before")
    @classmethod
    def _cache_dir_named(cls, value: object) -> object:
        """An empty cache directory would silently mean the current directory."""
        if isinstance(value, str) and not value.strip():
            raise ValueError("empty: name a directory")
        return value

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> RunOptions:
        """Options from values already resolved (the CLI's flags); ConfigError for a misfit."""
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise config_error(exc) from None

    @classmethod
    def resolve(
        cls,
        given: Mapping[str, Any],
        environ: Mapping[str, str] | None = None,
        dotenv: Path | None = None,
    ) -> RunOptions:
        """Options from keywords, else the environment, else `.env`, else the defaults.

        The order `tagger run` uses: a flag wins over the environment, which wins over `.env`.
        TypeError for a name that is no option; ConfigError for a value that does not fit.
        """
        cls.check_names(given)
        environ = os.environ if environ is None else environ
        path = dotenv_path() if dotenv is None else dotenv
        from_file = _read_dotenv(path)
        values: dict[str, Any] = {}
        for name, variable in ENVIRONMENT.items():
            value = environ.get(variable, from_file.get(variable))
            if value:  # an empty variable is unset, as for typer
                values[name] = value
        values.update({name: value for name, value in given.items() if value is not None})
        return cls.of(values)

    @classmethod
    def check_names(cls, given: Mapping[str, Any]) -> None:
        """TypeError for a name that is no option; for one of `tagger run`'s that has no
        meaning in Python, what to do instead."""
        unknown = sorted(set(given) - set(cls.model_fields))
        if not unknown:
            return
        name = unknown[0]
        instead = CLI_ONLY.get(name)
        if instead is not None:
            raise TypeError(f"{name!r} is `tagger run`'s; in Python, {instead}")
        raise TypeError(f"unknown option {name!r}: see help(tagger.tag)")

    @property
    def first_senders(self) -> int:
        """Senders whose first requests find nothing in the provider's prompt cache: a Ray
        run's actors, else one (what every dry run, a cascade's too, counts in full)."""
        return self.ray_actors if self.ray else 1

    def config(self) -> RunConfig:
        """The validated run configuration (ConfigError or UsageError if it cannot be one)."""
        from tagger.project import default_cache_dir
        from tagger.prompting.prompts import default_prompts_dir

        try:
            return RunConfig(
                client=ClientConfig(
                    model=self.model or defaults.MODEL,
                    base_url=self.base_url or None,
                    api_key=self.api_key
                    if self.api_key and self.api_key.get_secret_value()
                    else None,
                    timeout=self.timeout,  # type: ignore[arg-type]  # None: for the server
                    max_attempts=self.max_attempts,
                    http=HttpBackend(self.http),
                    rpm=self.rpm,
                    tpm=self.tpm,
                    logprobs=not self.no_logprobs,
                    reasoning_effort=self.reasoning_effort,
                    service_tier=self.service_tier,
                ),
                prompts_dir=self.prompts_dir or default_prompts_dir(),
                prompt_ref=self.prompt,
                mode=self.mode,
                concurrency=self.concurrency,  # type: ignore[arg-type]  # None: for the server
                repair_turns=self.repair_turns,
                cache_dir=self.cache_dir or default_cache_dir(),
                use_cache=not self.no_cache,
                refresh=self.refresh,
                max_cost=self.max_cost,
                max_requests=self.max_requests,
                batch=self._batch(),
                choose_model=self.model is None,
                cascade=self._cascade(),
                per_request=self.per_request,
            )
        except ValidationError as exc:
            raise config_error(exc) from None

    def _cascade(self) -> CascadeConfig | None:
        """--cascade CHEAP,STRONG with --target; UsageError for what a cascade cannot honour."""
        if self.cascade is None:
            if self.target is not None:
                raise UsageError("--target applies to a cascade: add --cascade CHEAP,STRONG")
            return None
        names = [name.strip() for name in self.cascade.split(",")]
        if len(names) != 2 or not all(names):
            raise UsageError(
                f"--cascade {self.cascade!r}: give two models, cheap first, "
                "e.g. --cascade gpt-5.4-nano,gpt-5.4-mini"
            )
        if self.target is None:
            raise UsageError(
                "--cascade needs --target: the share of rows whose task area must be the "
                "strong model's, e.g. --target 0.95"
            )
        if self.no_logprobs:
            raise UsageError(
                "--cascade decides by the cheap model's confidence (its logprobs): "
                "drop --no-logprobs"
            )
        if self.ray and self.batch:
            raise UsageError(
                "--cascade runs its stages on Ray or through the Batch API: drop --ray or --batch"
            )
        if self.detach:
            raise UsageError(
                "--cascade waits between its stages: drop --detach (--batch alone waits)"
            )
        try:
            return CascadeConfig(
                cheap=names[0],
                strong=names[1],
                target=self.target,
                delta=self.delta,
                seed=self.cascade_seed,
            )
        except ValidationError as exc:
            problems = "; ".join(
                f"{'--' + str(e['loc'][-1]) if e['loc'] else '--cascade'}: "
                f"{e['msg'].removeprefix('Value error, ')}"
                for e in exc.errors()
            )
            raise UsageError(f"invalid option: {problems}") from None

    def _batch(self) -> BatchConfig | None:
        if not self.batch:
            given = [name for name, on in (("--detach", self.detach),
                     ("--finish-live", self.finish_live)) if on]  # fmt: skip
            if given:
                raise UsageError(f"{given[0]} only applies to a batch run: add --batch")
            return None
        return BatchConfig(
            max_requests_per_file=self.batch_max_requests,
            max_bytes_per_file=self.batch_max_bytes,
            poll_interval=self.batch_poll,
            detach=self.detach,
            finish_live=self.finish_live,
        )


def config_error(exc: ValidationError) -> ConfigError:
    """'invalid option: --base-url: not a valid URL ...' from pydantic's errors."""
    problems = "; ".join(_option_problem(e["loc"], e["msg"]) for e in exc.errors())
    return ConfigError(f"invalid option: {problems}")


def _option_problem(location: tuple[int | str, ...], message: str) -> str:
    option = "--" + str(location[-1]).replace("_", "-") if location else "option"
    return f"{option}: {message.removeprefix('Value error, ')}"


def _read_dotenv(path: Path) -> dict[str, str]:
    """The settings in a `.env` file, without putting them into the process environment."""
    from tagger.project import read_dotenv

    return read_dotenv(path)
