"""Every default value of a run, in one place (plain constants: `--help` imports them fast)."""

from __future__ import annotations

from pathlib import Path

MODEL = "gpt-5.4-nano"  # cheap, current, no reasoning by default: see docs/cloud-models.md
BASE_URL = "https://api.openai.com/v1"
MAX_ATTEMPTS = 6  # HTTP requests per abstract, retries, repairs and the length retry included
REPAIR_TURNS = 2  # times an invalid answer is sent back with its validation error
CACHE_DIR = Path("cache")  # the answer cache, relative to where tagger runs
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
# The OpenAI Batch API's limits per input file, and how often a waiting run asks for progress.
BATCH_MAX_REQUESTS = 50_000
BATCH_MAX_BYTES = 200 * 1024 * 1024
BATCH_POLL_SECONDS = 30.0

# `tagger sample`: rows drawn, the seed (same seed, same rows), the floor per stratum.
SAMPLE_SIZE = 300
SAMPLE_SEED = 1
SAMPLE_MIN_PER_STRATUM = 5
