"""The models a server offers (GET /models), for `tagger models` and unknown-model errors."""

from __future__ import annotations

from urllib.parse import urlsplit

from tagger.config import ClientConfig
from tagger.errors import FatalAPIError
from tagger.redact import public_url, redact
from tagger.sending.server_faults import server_message

# Listing models is one small GET: a server that cannot answer it quickly is not one to wait for.
LIST_TIMEOUT = 15.0
HINT_TIMEOUT = 5.0
HINT_MAX_MODELS = 20
_AZURE_HOSTS = (".openai.azure.com", ".services.ai.azure.com", ".cognitiveservices.azure.com")


def list_models(config: ClientConfig, timeout: float = LIST_TIMEOUT) -> list[str]:
    """The model ids the server lists, sorted; FatalAPIError says why they could not be read."""
    import openai

    where = public_url(config.effective_base_url)
    secret = config.api_key.get_secret_value() if config.api_key else None
    try:
        return _fetch_models(config, timeout)
    except openai.APIStatusError as exc:
        if exc.status_code in (401, 403):
            raise _key_refused(where, exc.status_code) from None
        message = redact(server_message(exc)[:200], secret)
        raise FatalAPIError(
            f"{where} did not list its models (GET /models: HTTP {exc.status_code}: {message}): "
            "check --base-url (OpenAI-compatible servers usually end in /v1)"
        ) from None
    except openai.APIConnectionError:
        raise FatalAPIError(
            f"cannot connect to {where}: is the server running? check --base-url / OPENAI_BASE_URL"
        ) from None
    except (ValueError, TypeError, AttributeError):
        raise FatalAPIError(
            f"{where} answered GET /models with something that is no model list: check --base-url"
        ) from None


def check_model_offered(config: ClientConfig, option: str = "--model / TAGGER_MODEL") -> None:
    """Before a run: stop at once if the server lists its models and --model is not one of them.

    A server that lists nothing, or cannot (no /models, not reachable yet), is not judged here:
    the run finds out. A refused key is fatal here as it would be on the first request.
    """
    import openai

    if names_deployments(config.effective_base_url):
        return
    where = public_url(config.effective_base_url)
    try:
        offered = _fetch_models(config, HINT_TIMEOUT)
    except openai.APIStatusError as exc:
        if exc.status_code in (401, 403):
            raise _key_refused(where, exc.status_code) from None
        return
    except (openai.APIError, ValueError, TypeError, AttributeError):
        return
    model = config.model
    if not offered or model in offered or f"{model}:latest" in offered:  # Ollama's default tag
        return
    raise FatalAPIError(
        f"model '{model}' was not found at {where} (GET /models lists {len(offered)} others): "
        f"check {option}{_offered(offered)}"
    )


def names_deployments(base_url: str) -> bool:
    """Azure OpenAI: --model names a deployment, which GET /models does not list (base models)."""
    host = (urlsplit(base_url).hostname or "").lower()
    return host.endswith(_AZURE_HOSTS)


def _fetch_models(config: ClientConfig, timeout: float) -> list[str]:
    import openai

    secret = config.api_key.get_secret_value() if config.api_key else None
    client = openai.OpenAI(
        api_key=secret or "unused",
        base_url=config.effective_base_url,
        timeout=openai.Timeout(timeout, connect=min(timeout, 10.0)),
        max_retries=0,
    )
    try:
        return sorted({str(model.id)[:200] for model in client.models.list()})
    finally:
        client.close()


def _key_refused(where: str, status: int) -> FatalAPIError:
    return FatalAPIError(
        f"{where} refused the API key (HTTP {status}): check OPENAI_API_KEY in .env or pass "
        "--api-key"
    )


def _offered(models: list[str]) -> str:
    shown = ", ".join(models[:HINT_MAX_MODELS])
    more = f" and {len(models) - HINT_MAX_MODELS} more" if len(models) > HINT_MAX_MODELS else ""
    return f"; the server offers: {shown}{more} (see `tagger models`)"


def offered_models_hint(config: ClientConfig) -> str:
    """ "; the server offers: a, b" for an unknown --model, or "" when they cannot be read."""
    try:
        models = list_models(config, timeout=HINT_TIMEOUT)
    except FatalAPIError:
        return ""
    if not models:
        return ""
    return _offered(models)
