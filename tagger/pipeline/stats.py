"""The counts and totals of one run: what the summary, the manifest and `Run.stats` show."""

from __future__ import annotations

from dataclasses import dataclass, field

from tagger.usage import NO_USAGE, Usage

__all__ = ["RunStats"]


@dataclass
class RunStats:
    """Counts and totals of one run."""

    items: int = 0
    ok: int = 0
    failed: int = 0
    not_run: int = 0  # rows written without an answer because the run stopped (not failures)
    cached: int = 0
    requests: int = 0  # chat completions sent (the ones billed)
    model_listings: int = 0  # GET /models sent before them (the summary counts it beside)
    retries: int = 0
    repairs: int = 0
    usage: Usage = NO_USAGE  # in the manifest as prompt_tokens, completion_tokens, ...
    cost: float | None = 0.0
    duration: float = 0.0
    mode: str | None = None
    mode_fallbacks: list[str] = field(default_factory=list)
    stop_reason: str | None = None
    stop_advice: str | None = None
    interrupted: bool = False
    rate_limit_pause: float = 0.0
    learned_limits: list[str] = field(default_factory=list)
    kept_output: str | None = None  # where this run's rows are when the old output was kept
    request_rules: str | None = None  # how the prompt's [params] went to this model, and why
    adaptations: list[str] = field(default_factory=list)  # what the server's 400s taught
    served_models: list[str] = field(default_factory=list)  # who the replies say answered
    service_tiers: list[str] = field(default_factory=list)  # the tiers the replies name
    confidence_note: str | None = None  # why rows have no task_area_confidence, if they have none
    top_errors: list[dict[str, object]] = field(default_factory=list)  # commonest failures
    price_note: str | None = None  # why the cost is n/a, and the closest priced names
    # What was paid, by kind of token (input, cached_input, output, reasoning), in US$.
    cost_parts: dict[str, float] | None = None
    # The least the same answers could cost: the abstracts' own tokens (as prompt_tokens) and
    # the answers' (as completion_tokens) of the rows paid for in this run, and their price.
    floor_usage: Usage = NO_USAGE
    floor_cost: float | None = None
    refused_requests: int = 0  # refused by --max-cost or --max-requests
    # Abstracts not sent because their request's worst case was over what was left of
    # --max-cost while smaller ones still fitted (the run went on with those).
    over_cap: int = 0
    per_request: int = 1  # abstracts asked about per request at most (--per-request)
    packs: int = 0  # requests that asked about several abstracts
    pack_fallbacks: int = 0  # packs whose reply was unusable as a whole: each asked alone
    packing_stopped: str | None = None  # why the run stopped packing, if it did
    usage_estimated: int = 0  # replies whose usage was missing or junk: charged the estimate
