"""The openai SDK client: tagger's timeouts and HTTP transport, built only when first needed."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from tagger.config import ClientConfig, HttpBackend
from tagger.errors import ConfigError
from tagger.sending.pacing import on_socket, on_wire

if TYPE_CHECKING:
    import openai

# `openai` is imported inside open_sdk, not at module import: the SDK takes ~0.4 s to import
# and a fully cached run never needs it.

__all__ = ["CONNECT_TIMEOUT", "check_transport", "open_sdk"]
# Connecting is quick or not at all: a host that drops SYNs should not cost a whole --timeout.
CONNECT_TIMEOUT = 10.0


def check_transport(config: ClientConfig) -> None:
    """ConfigError if the chosen HTTP transport is not installed (before anything is sent)."""
    if config.http is HttpBackend.AIOHTTP and importlib.util.find_spec("aiohttp") is None:
        raise ConfigError("--http aiohttp needs the extra: pip install 'tagger[aiohttp]'")


def open_sdk(config: ClientConfig, *, max_retries: int = 0) -> openai.AsyncOpenAI:
    """An AsyncOpenAI client for the configured server, key, timeout and transport."""
    import openai

    # Per connect/read/write; a caller bounds a whole request with its own deadline.
    timeout = openai.Timeout(config.timeout, connect=min(config.timeout, CONNECT_TIMEOUT))
    # The send gate hears when each request is written (tagger.sending.pacing): from the
    # socket where the transport traces it, else from the request hook.
    if config.http is HttpBackend.AIOHTTP:
        hooks = {"request": [on_wire]}
        http_client = openai.DefaultAioHttpClient(timeout=timeout, event_hooks=hooks)
    else:
        hooks = {"request": [on_socket]}
        http_client = openai.DefaultAsyncHttpxClient(timeout=timeout, event_hooks=hooks)
    secret = config.api_key.get_secret_value() if config.api_key else None
    return openai.AsyncOpenAI(
        api_key=secret or "unused",
        base_url=config.effective_base_url,
        timeout=timeout,
        max_retries=max_retries,
        http_client=http_client,
    )
