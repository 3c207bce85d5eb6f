"""Run configuration: one validated object built by the CLI, read by the core."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from tagger import defaults
from tagger.defaults import default_concurrency, default_timeout
from tagger.project import default_cache_dir
from tagger.prompting.packs import MAX_PER_REQUEST


class Mode(StrEnum):
    """How the answer's structure is requested from the server."""

    JSON_SCHEMA = "json_schema"
    # json_object with the schema inside response_format: llama.cpp's grammar-constrained JSON.
    JSON_OBJECT_SCHEMA = "json_object_schema"
    JSON_OBJECT = "json_object"
    TEXT = "text"

    def fallback(self) -> Mode | None:
        """The next, weaker mode to try when a server rejects this one."""
        order = [Mode.JSON_SCHEMA, Mode.JSON_OBJECT_SCHEMA, Mode.JSON_OBJECT, Mode.TEXT]
        position = order.index(self)
        return order[position + 1] if position + 1 < len(order) else None


class HttpBackend(StrEnum):
    """Which HTTP transport the openai SDK uses."""

    HTTPX = "httpx"
    AIOHTTP = "aiohttp"


class ServiceTier(StrEnum):
    """OpenAI's processing tiers tagger offers (`service_tier` in the request)."""

    DEFAULT = "default"
    # Half price (Batch API rates), slower, and now and then a 429 "resource unavailable".
    FLEX = "flex"


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class ClientConfig(BaseModel):
    """Everything needed to talk to one OpenAI-compatible server."""

    model_config = ConfigDict(frozen=True)

    model: str = defaults.MODEL
    base_url: str | None = None
    api_key: SecretStr | None = None
    # None (not given): chosen for the server, see tagger.sending.local.default_timeout.
    timeout: float = Field(defaults.REMOTE_TIMEOUT, gt=0)
    max_attempts: int = Field(defaults.MAX_ATTEMPTS, ge=1, le=50)
    http: HttpBackend = HttpBackend.HTTPX
    rpm: int | None = Field(None, ge=1)
    tpm: int | None = Field(None, ge=1)
    # Ask for token log-probabilities (the task area's confidence); dropped if the server refuses.
    logprobs: bool = True
    # None: the prompt's [params], else the cheapest the model family takes (sending.families).
    reasoning_effort: ReasoningEffort | None = None
    service_tier: ServiceTier | None = None  # None: not sent (the server's default tier)
    # The server applies OpenAI's model rules (a model tagger does not know gets today's
    # reasoning-model rules). None: by the host (OpenAI's API, Azure OpenAI); a run sets True
    # when the server's model list says the model is OpenAI's (tagger.sending.models).
    openai_server: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _timeout_for_server(cls, data: Any) -> Any:
        """No --timeout: 600 s for a local server (a CPU model is slow), else 300 s; flex 900 s."""
        if isinstance(data, dict) and data.get("timeout") is None:
            timeout = default_timeout(data.get("base_url"))
            if data.get("service_tier") == ServiceTier.FLEX:
                timeout = max(timeout, defaults.FLEX_TIMEOUT)
            data = {**data, "timeout": timeout}
        return data

    @field_validator("base_url")
    @classmethod
    def _base_url_is_a_url(cls, value: str | None) -> str | None:
        """Refuse a malformed URL up front, not on every request (and in the manifest)."""
        return None if value is None else check_base_url(value)

    @property
    def effective_base_url(self) -> str:
        """The base URL requests go to, without trailing slash."""
        return (self.base_url or defaults.BASE_URL).rstrip("/")

    @property
    def openai_api(self) -> bool:
        """Whether the server applies OpenAI's model rules (see openai_server)."""
        if self.openai_server is not None:
            return self.openai_server
        return is_openai_host(self.effective_base_url) or is_azure_host(self.effective_base_url)


class BatchConfig(BaseModel):
    """How a `tagger run --batch` submits, waits and finishes (the OpenAI Batch API)."""

    model_config = ConfigDict(frozen=True)

    # The API's limits per input file; smaller values split the work into more batches.
    max_requests_per_file: int = Field(defaults.BATCH_MAX_REQUESTS, ge=1, le=50_000)
    max_bytes_per_file: int = Field(defaults.BATCH_MAX_BYTES, ge=1024, le=200 * 1024 * 1024)
    poll_interval: float = Field(defaults.BATCH_POLL_SECONDS, gt=0)
    detach: bool = False  # submit (or collect what is ready) and return without waiting
    finish_live: bool = False  # repairs and leftovers are sent live instead of another round


class CascadeConfig(BaseModel):
    """`--cascade CHEAP,STRONG --target T`: the cheap model where it agrees with the strong one."""

    model_config = ConfigDict(frozen=True)

    cheap: str = Field(min_length=1)
    strong: str = Field(min_length=1)
    # The share of rows whose task_area is the strong model's, with probability 1 - delta.
    target: float = Field(gt=0, lt=1)
    delta: float = Field(defaults.CASCADE_DELTA, gt=0, lt=1)
    seed: int = defaults.CASCADE_SEED  # a rerun draws the same sample: the cache answers it

    @model_validator(mode="after")
    def _two_models(self) -> CascadeConfig:
        if self.cheap == self.strong:
            raise ValueError(f"names '{self.cheap}' twice: give a cheap model, then a stronger one")
        return self


class RunConfig(BaseModel):
    """Options of one `tagger run`."""

    model_config = ConfigDict(frozen=True)

    client: ClientConfig
    prompts_dir: Path
    prompt_ref: str | None = None
    mode: Mode | None = None  # None: detect once per run
    concurrency: int = Field(defaults.REMOTE_CONCURRENCY, ge=1, le=1024)
    repair_turns: int = Field(defaults.REPAIR_TURNS, ge=0, le=5)
    cache_dir: Path = Field(default_factory=default_cache_dir)
    use_cache: bool = True
    refresh: bool = False
    max_cost: float | None = Field(None, ge=0)
    max_requests: int | None = Field(None, ge=0)
    batch: BatchConfig | None = None  # None: a live run
    # No --model, TAGGER_MODEL or .env model: a server (not OpenAI's) listing exactly one
    # model gets that one used (tagger.sending.models.with_only_model).
    choose_model: bool = False
    cascade: CascadeConfig | None = None  # None: one model answers every abstract
    # Abstracts per chat request; None: chosen for the server and prompt (tagger.defaults).
    per_request: int | None = Field(None, ge=1, le=MAX_PER_REQUEST)

    @model_validator(mode="before")
    @classmethod
    def _concurrency_for_server(cls, data: Any) -> Any:
        """No --concurrency: 1 for a local server (one answer at a time), else 8."""
        if isinstance(data, dict) and data.get("concurrency") is None:
            client = data.get("client")
            url = client.get("base_url") if isinstance(client, dict) else None
            if isinstance(client, ClientConfig):
                url = client.base_url
            data = {**data, "concurrency": default_concurrency(url)}
        return data

    @field_validator("cache_dir", mode="before")
    @classmethod
    def _cache_dir_named(cls, value: object) -> object:
        """An empty --cache-dir would silently mean the current directory."""
        if isinstance(value, str) and not value.strip():
            raise ValueError("--cache-dir is empty: name a directory")
        return value


OPENAI_HOSTS = ("api.openai.com",)
AZURE_HOST_SUFFIXES = (
    ".openai.azure.com",
    ".services.ai.azure.com",
    ".cognitiveservices.azure.com",
)


def _host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def is_openai_host(url: str) -> bool:
    """OpenAI's own API (the default base URL)."""
    return _host(url) in OPENAI_HOSTS


def is_azure_host(url: str) -> bool:
    """Azure OpenAI: --model names a deployment of one of OpenAI's models."""
    return _host(url).endswith(AZURE_HOST_SUFFIXES)


def check_base_url(url: str) -> str:
    """The URL if it is an http(s) URL with a host and a valid port, else ValueError."""
    fix = "use http(s)://HOST[:PORT]/v1"
    try:
        parsed = urlsplit(url)
        parsed.port  # noqa: B018 - parsing the port is the check
    except ValueError as exc:
        raise ValueError(f"not a valid URL ({exc}): {fix}") from None
    host = parsed.hostname or ""
    if parsed.scheme not in ("http", "https") or not host or any(c.isspace() for c in url):
        raise ValueError(f"not an http(s) URL with a host: {fix}")
    return url
