"""Run configuration: one validated object built by the CLI, read by the core."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


class Mode(StrEnum):
    """How the answer's structure is requested from the server."""

    JSON_SCHEMA = "json_schema"
    JSON_OBJECT = "json_object"
    TEXT = "text"

    def fallback(self) -> Mode | None:
        """The next, weaker mode to try when a server rejects this one."""
        order = [Mode.JSON_SCHEMA, Mode.JSON_OBJECT, Mode.TEXT]
        position = order.index(self)
        return order[position + 1] if position + 1 < len(order) else None


class HttpBackend(StrEnum):
    """Which HTTP transport the openai SDK uses."""

    HTTPX = "httpx"
    AIOHTTP = "aiohttp"


class ClientConfig(BaseModel):
    """Everything needed to talk to one OpenAI-compatible server."""

    model_config = ConfigDict(frozen=True)

    model: str = DEFAULT_MODEL
    base_url: str | None = None
    api_key: SecretStr | None = None
    timeout: float = Field(60.0, gt=0)
    max_attempts: int = Field(6, ge=1, le=50)
    http: HttpBackend = HttpBackend.HTTPX
    rpm: int | None = Field(None, ge=1)
    tpm: int | None = Field(None, ge=1)

    @property
    def effective_base_url(self) -> str:
        """The base URL requests go to, without trailing slash."""
        return (self.base_url or DEFAULT_BASE_URL).rstrip("/")


class RunConfig(BaseModel):
    """Options of one `tagger run`."""

    model_config = ConfigDict(frozen=True)

    client: ClientConfig
    prompts_dir: Path
    prompt_ref: str | None = None
    mode: Mode | None = None  # None: detect once per run
    concurrency: int = Field(8, ge=1, le=1024)
    repair_turns: int = Field(2, ge=0, le=5)
    cache_dir: Path = Path("cache")
    use_cache: bool = True
    refresh: bool = False
    max_cost: float | None = Field(None, ge=0)
    max_requests: int | None = Field(None, ge=0)
