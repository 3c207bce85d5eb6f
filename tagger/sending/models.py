"""The models a server offers (GET /models): read bounded, then judged before a run sends.

The listing is data like any reply: read within a size bound and an overall deadline (a few
seconds, which Ctrl-C interrupts: it is awaited, never run in a thread), parsed by the bounded
JSON reader, at most MAX_MODELS ids of at most MAX_ID_CHARS characters kept. A listing that
cannot be read (too big, too deep, too slow, not a list) judges nothing: the run goes on and
finds out from its first request. A refused key is fatal here as on the first request.
What a readable listing decides, once per run: an unknown --model stops the run with the list;
a model the listing says is OpenAI's (`owned_by`) gets OpenAI's rules; its lifecycle is judged
(tagger.sending.lifecycle), with the listing's own `shutdown_date` when the table lacks one.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from dataclasses import dataclass, field

from tagger.config import ClientConfig, RunConfig, is_azure_host, is_openai_host
from tagger.errors import FatalAPIError
from tagger.jsondata import parse_server_json
from tagger.redact import public_url, redact
from tagger.sending.lifecycle import judge_lifecycle
from tagger.terminal import one_line

__all__ = [
    "Listing",
    "ListingUnreadable",
    "check_model",
    "check_model_offered",
    "fetch_listing",
    "list_models",
    "names_deployments",
    "offered",
    "only_model",
    "settled_model",
    "with_only_model",
]
log = logging.getLogger(__name__)

# One small GET: a server that cannot answer it in this long is not one to wait for.
LIST_DEADLINE = 5.0
CONNECT_TIMEOUT = 3.0
MAX_LISTING_BYTES = 2 * 1024 * 1024  # OpenAI's whole list is ~20 KB
MAX_MODELS = 5_000
MAX_ID_CHARS = 200
HINT_MAX_MODELS = 20
# `owned_by` of the models on OpenAI's own list (fine-tunes are owned by the organisation).
OPENAI_OWNERS = frozenset({"openai", "system", "openai-internal"})


class ListingUnreadable(Exception):
    """GET /models gave nothing tagger can read as a model list (the reason is the message)."""


class ListingUnreachable(ListingUnreadable):
    """No connection to the server at all."""


@dataclass(frozen=True)
class Listing:
    """The ids a server lists, and what it says about each (bounded)."""

    ids: tuple[str, ...]
    owners: dict[str, str] = field(default_factory=dict)
    shutdown_dates: dict[str, str] = field(default_factory=dict)
    truncated: bool = False  # more ids than MAX_MODELS were listed

    def offers(self, model: str) -> bool:
        """Listed as it is, or as Ollama's default tag."""
        return model in self.owners or f"{model}:latest" in self.owners

    def openai_owned(self, model: str) -> bool:
        """The listing says the model is OpenAI's (as OpenAI's own list does)."""
        return self.owners.get(model) in OPENAI_OWNERS


def names_deployments(base_url: str) -> bool:
    """Azure OpenAI: --model names a deployment, which GET /models does not list (base models)."""
    return is_azure_host(base_url)


async def fetch_listing(config: ClientConfig, deadline: float = LIST_DEADLINE) -> Listing:
    """GET /models within `deadline` seconds in all; FatalAPIError for a refused key,
    ListingUnreadable for anything else that is not a readable list.

    Through httpx2 (the openai SDK's own HTTP client) rather than the SDK: it imports in a
    tenth of the time, and a fully cached run at defaults still lists a local server's models.
    The error body is read bounded too (the SDK would read it whole).
    """
    import httpx2

    where = public_url(config.effective_base_url)
    secret = config.api_key.get_secret_value() if config.api_key else None
    headers = {"Accept": "application/json", "Authorization": f"Bearer {secret or 'unused'}"}
    timeout = httpx2.Timeout(deadline, connect=min(deadline, CONNECT_TIMEOUT))
    body = bytearray()
    try:
        async with asyncio.timeout(deadline), httpx2.AsyncClient(timeout=timeout) as http:
            url = f"{config.effective_base_url}/models"
            async with http.stream("GET", url, headers=headers) as response:
                status = response.status_code
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_LISTING_BYTES:
                        raise ListingUnreadable(f"over {MAX_LISTING_BYTES // 1024 // 1024} MB")
    except TimeoutError:
        raise ListingUnreadable(f"no whole answer within {deadline:g} s") from None
    except httpx2.HTTPError as exc:
        raise ListingUnreachable(f"cannot connect ({type(exc).__name__})") from None
    if status in (401, 403):
        raise _key_refused(where, status)
    text = body.decode("utf-8", errors="replace")
    if status >= 400:
        message = redact(" ".join(text[:300].split()), secret)
        raise ListingUnreadable(f"HTTP {status}: {message[:200]}")
    return parse_listing(text)


def parse_listing(text: str) -> Listing:
    """A listing from the body of GET /models (bounded: see the module's docstring)."""
    try:
        data = parse_server_json(text)
    except ValueError as exc:  # not JSON, or nested too deep (JSONTooDeep)
        raise ListingUnreadable(f"not JSON ({exc})"[:200]) from None
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ListingUnreadable("no `data` list")
    owners: dict[str, str] = {}
    shutdowns: dict[str, str] = {}
    for entry in entries:
        if len(owners) >= MAX_MODELS:
            break
        ident = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(ident, str) or not ident or len(ident) > MAX_ID_CHARS:
            continue
        owner = entry.get("owned_by")
        owners[ident] = owner[:MAX_ID_CHARS] if isinstance(owner, str) else ""
        shutdown = entry.get("shutdown_date")
        if isinstance(shutdown, str) and len(shutdown) <= 10:
            shutdowns[ident] = shutdown
    return Listing(tuple(sorted(owners)), owners, shutdowns, truncated=len(entries) > len(owners))


def read_listing(config: ClientConfig, deadline: float = LIST_DEADLINE) -> Listing:
    """fetch_listing from synchronous code (the CLI): Ctrl-C ends it at once."""
    return asyncio.run(fetch_listing(config, deadline))


def list_models(config: ClientConfig, deadline: float = LIST_DEADLINE) -> list[str]:
    """The model ids the server lists, sorted; FatalAPIError says why they could not be read."""
    where = public_url(config.effective_base_url)
    try:
        return list(read_listing(config, deadline).ids)
    except ListingUnreachable:
        raise FatalAPIError(
            f"cannot connect to {where}: is the server running? check --base-url / OPENAI_BASE_URL"
        ) from None
    except ListingUnreadable as exc:
        raise FatalAPIError(
            f"{where} did not list its models (GET /models: {exc}): check --base-url "
            "(OpenAI-compatible servers usually end in /v1)"
        ) from None


def check_model_offered(config: ClientConfig, option: str = "--model / TAGGER_MODEL") -> None:
    """check_model from synchronous code (the CLI, before a cascade's stages)."""
    asyncio.run(check_model(config, option=option))


async def check_model(
    config: ClientConfig, today: dt.date | None = None, option: str = "--model / TAGGER_MODEL"
) -> Listing | None:
    """Before a run sends: stop if the server lists its models and --model is not one of them,
    or if the model was shut down and is not listed; warn once if it is deprecated.

    Returns the listing (None when it cannot be read, or on Azure, whose list names base
    models, not the deployments --model names). A refused key is fatal (FatalAPIError).
    """
    today = today or dt.datetime.now(dt.UTC).date()
    model = config.model
    listing = None
    if not names_deployments(config.effective_base_url):
        try:
            listing = await fetch_listing(config)
        except ListingUnreadable as exc:
            log.info("GET /models judged nothing (%s): going on", exc)
    if listing is not None and listing.ids and not listing.offers(model):
        where = public_url(config.effective_base_url)
        raise FatalAPIError(
            f"model '{model}' was not found at {where} (GET /models lists "
            f"{len(listing.ids)} others): check {option}{_offered(listing.ids)}"
        )
    listed = listing is not None and listing.offers(model)
    shutdown = listing.shutdown_dates.get(model) if listing is not None else None
    openai = is_openai_host(config.effective_base_url)
    warning = judge_lifecycle(model, today, listed=listed, server_shutdown=shutdown, openai=openai)
    if warning:
        log.warning("%s", warning)
    return listing


async def only_model(config: ClientConfig) -> str | None:
    """At defaults (no --model anywhere) on a server that is not OpenAI's: the one model it
    lists, or None when it lists several, none, or cannot be read (the run then decides)."""
    url = config.effective_base_url
    if is_openai_host(url) or is_azure_host(url):
        return None
    try:
        listing = await fetch_listing(config)
    except (ListingUnreadable, FatalAPIError):  # a refused key: the run says so, as ever
        return None
    return listing.ids[0] if len(listing.ids) == 1 else None


async def with_only_model(config: RunConfig) -> RunConfig:
    """The run's config with the server's only model, when none was chosen (said once)."""
    if not config.choose_model:
        return config
    chosen = await only_model(config.client)
    if chosen is None or chosen == config.client.model:
        return config
    where = public_url(config.client.effective_base_url)
    log.warning("using model %s: the only one %s lists (--model picks another)", one_line(chosen),
                where)  # fmt: skip
    client = config.client.model_copy(update={"model": chosen})
    return config.model_copy(update={"client": client, "choose_model": False})


async def settled_model(config: RunConfig) -> RunConfig:
    """For a driver that judges the model once, before anything of the run starts (a batch
    job, Ray's driver): the server's only model at defaults; a model the server does not list,
    or one shut down, stops here (FatalAPIError); one it lists as OpenAI's gets OpenAI's rules."""
    config = await with_only_model(config)
    listing = await check_model(config.client)
    if listing is not None and listing.openai_owned(config.client.model):
        client = config.client.model_copy(update={"openai_server": True})
        config = config.model_copy(update={"client": client})
    return config


def _key_refused(where: str, status: int) -> FatalAPIError:
    return FatalAPIError(
        f"{where} refused the API key (HTTP {status}): check OPENAI_API_KEY in .env or pass "
        "--api-key"
    )


def _offered(models: tuple[str, ...] | list[str]) -> str:
    shown = ", ".join(one_line(name) for name in models[:HINT_MAX_MODELS])
    more = f" and {len(models) - HINT_MAX_MODELS} more" if len(models) > HINT_MAX_MODELS else ""
    return f"; the server offers: {shown}{more} (see `tagger models`)"


def offered(listing: Listing | None) -> str:
    """ "; the server offers: a, b" for an unknown --model, or "" when nothing was listed."""
    return _offered(listing.ids) if listing is not None and listing.ids else ""
