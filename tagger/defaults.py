"""Every default value of a run, in one place (plain values: `--help` imports them fast).

The defaults that depend on the server (concurrency, timeout, abstracts per request) are
resolved here too, by `default_concurrency`, `default_timeout` and `default_per_request`: the
CLI, the config and the Python API ask them.
"""

from __future__ import annotations

from urllib.parse import urlsplit

MODEL = "gpt-5.4-nano"  # cheap, current, no reasoning by default: see docs/cloud-models.md
BASE_URL = "https://api.openai.com/v1"
MAX_ATTEMPTS = 6  # HTTP requests per abstract, retries, repairs and the length retry included
REPAIR_TURNS = 2  # times an invalid answer is sent back with its validation error
# Requests in flight when --concurrency is not given. llama.cpp, llama-cpp-python, Ollama and
# LM Studio answer one request at a time by default: more in flight only wait in the server's
# queue, where they run into --timeout.
REMOTE_CONCURRENCY = 8
LOCAL_CONCURRENCY = 1
# Seconds one whole request may take when --timeout is not given. A CPU model needs minutes for
# one answer (prefill, then generation); a cloud answer takes seconds, and a cloud server that
# has not answered in five minutes is down, not slow.
REMOTE_TIMEOUT = 300.0
LOCAL_TIMEOUT = 600.0
# OpenAI's flex-processing guide: requests are slower, raise the SDK's timeout to 15 minutes.
FLEX_TIMEOUT = 900.0
# Abstracts per request where the provider bills prompt caching (OpenAI's API, a model priced
# with a cached-input price) and the prompt packs: the shared prefix is then paid once per
# this many abstracts, mostly at the cached price (measured: docs/benchmarks.md). Local and
# unknown servers get one: small models answer one abstract better, and nothing is billed.
PER_REQUEST = 8
# The OpenAI Batch API's limits per input file, and how often a waiting run asks for progress.
BATCH_MAX_REQUESTS = 50_000
BATCH_MAX_BYTES = 200 * 1024 * 1024
BATCH_POLL_SECONDS = 30.0

# `tagger sample`: rows drawn, the seed (same seed, same rows), the floor per stratum.
SAMPLE_SIZE = 300
SAMPLE_SEED = 1
SAMPLE_MIN_PER_STRATUM = 5

# `tagger run --cascade`: the chance the cascade's guarantee may fail (--delta), and the seed
# of the strong model's sample (a rerun draws the same one, so the cache answers it).
CASCADE_DELTA = 0.05
CASCADE_SEED = 0
# A cheap stage that failed on more than this share of abstracts stops the cascade before the
# strong model is paid: its failures would all be escalated (an outage billed at strong prices).
CASCADE_MAX_CHEAP_FAILURES = 0.1


_LOCAL_NAMES = frozenset({"localhost", "host.docker.internal"})


def is_local_host(host: str) -> bool:
    """True for loopback, private, link-local and .local/.lan hosts (no DNS lookup)."""
    name = host.strip("[]").lower().rstrip(".")
    if name in _LOCAL_NAMES or name.endswith((".localhost", ".local", ".lan", ".internal")):
        return True
    if "." not in name and ":" not in name:
        return True  # a bare machine name ("gpubox") only resolves on a local network
    import ipaddress

    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def is_local_url(url: str | None) -> bool:
    """Whether a base URL points at the user's own machine or local network."""
    if not url:
        return False
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    return bool(host) and is_local_host(host)


def default_timeout(base_url: str | None) -> float:
    """Seconds per request when --timeout is not given: 600 for a local server, else 300."""
    return LOCAL_TIMEOUT if is_local_url(base_url) else REMOTE_TIMEOUT


def default_per_request(base_url: str | None, *, caches_prompts: bool) -> int:
    """Abstracts per request when --per-request is not given (and the prompt packs): 8 on
    OpenAI's API when the model's price has a cached-input price, else 1."""
    host = urlsplit(base_url or BASE_URL).hostname
    return PER_REQUEST if caches_prompts and host == urlsplit(BASE_URL).hostname else 1


def default_concurrency(base_url: str | None) -> int:
    """Requests in flight when --concurrency is not given: 1 for a local server, else 8."""
    return LOCAL_CONCURRENCY if is_local_url(base_url) else REMOTE_CONCURRENCY
