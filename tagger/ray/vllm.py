"""tagger's prompt, schema, policy and Row around `ray.data.llm` with a vLLM engine on GPUs.

`build_processor(vLLMEngineProcessorConfig(...), preprocess=hooks.preprocess,
postprocess=hooks.postprocess)` runs the engine inside the cluster; these two functions are
the per-abstract policy's driver there. Preprocess renders the prompt as a local run does and
asks vLLM's structured outputs for the answer schema; postprocess reads the generated text
through the same policy step as a live reply. A reply the policy would repair, or ask again
for with a bigger budget, comes back `pending`, with the conversation so far in its state:
run the pending rows through the processor again (preprocess continues them) until none are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tagger.config import Mode
from tagger.files.rows import build_row
from tagger.pipeline.outcome import Status
from tagger.pipeline.policy import Action, ItemPolicy, ItemState
from tagger.pipeline.request import render_messages
from tagger.prompting.plan import RunPlan
from tagger.ray.records import (
    BadRecord,
    error_record,
    record_abstract,
    row_key,
    tagged_record,
)
from tagger.ray.stage import StageSettings
from tagger.sending.reply import Reply
from tagger.usage import Usage

STATE_FIELD = "tagger_state"  # the item's policy state, as JSON, between passes
PENDING_FIELD = "tagger_pending"  # "repair" / "ask_again": needs another pass; "" when done
# vLLM's SamplingParams that a prompt's [params] may set (others are OpenAI-only).
_SAMPLING: tuple[str, ...] = ("temperature", "top_p", "max_tokens", "seed", "stop")
_SAMPLING += ("presence_penalty", "frequency_penalty")
_MAX_STATE_CHARS = 1_000_000


def _state_json(state: ItemState) -> str:
    return json.dumps(
        {
            "attempts": state.attempts,
            "repairs": state.repairs,
            "cutoffs": state.cutoffs,
            "turns": [list(turn) for turn in state.turns],
            "usage": state.usage.as_fields(),
        },
        ensure_ascii=False,
    )


def _state(value: Any) -> ItemState:
    """The state a row carries (a fresh one if it has none, or one that is not a state)."""
    if not isinstance(value, str) or not value or len(value) > _MAX_STATE_CHARS:
        return ItemState()
    try:
        data = json.loads(value)
        turns = tuple((str(reply), str(problems)) for reply, problems in data["turns"])
        attempts, repairs, cutoffs = (int(data[n]) for n in ("attempts", "repairs", "cutoffs"))
        usage = Usage.from_fields(data["usage"])
    except (ValueError, TypeError, KeyError):
        return ItemState()
    return ItemState(attempts, repairs, cutoffs, turns=turns, usage=usage)


@dataclass
class VllmHooks:
    """preprocess/postprocess for one run's plan (build it on the driver: `VllmHooks.of`)."""

    settings: StageSettings
    _plan: RunPlan | None = field(default=None, repr=False)
    _policy: ItemPolicy | None = field(default=None, repr=False)

    @classmethod
    def of(cls, plan: RunPlan) -> VllmHooks:
        """The hooks of a plan loaded on the driver (they travel to the workers by value)."""
        return cls(StageSettings.from_plan(plan))

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings, "_plan": None, "_policy": None}

    @property
    def plan(self) -> RunPlan:
        """The plan, rebuilt once per worker."""
        if self._plan is None:
            self._plan = self.settings.plan()
        return self._plan

    @property
    def policy(self) -> ItemPolicy:
        """The per-abstract policy every driver follows."""
        if self._policy is None:
            self._policy = ItemPolicy.for_plan(self.plan)
        return self._policy

    def preprocess(self, row: dict[str, Any]) -> dict[str, Any]:
        """An input record (or a pending output row) as the engine's messages and sampling."""
        plan = self.plan
        carried = {name: row.get(name) for name in _RECORD_COLUMNS}
        try:
            abstract = record_abstract(row, -1)
        except BadRecord as exc:  # the engine still gets a row: the smallest request there is
            # The same columns as any other row: a block's rows become one Arrow table.
            return {**carried, STATE_FIELD: "", "tagger_error": str(exc),
                    "messages": [{"role": "user", "content": "-"}],
                    "sampling_params": {"max_tokens": 1}}  # fmt: skip
        state = _state(row.get(STATE_FIELD))
        # The schema is the engine's to enforce, as the server's in json_schema mode.
        first = render_messages(
            plan.prompt, plan.taxonomy, plan.schema, abstract.text, abstract.title, Mode.JSON_SCHEMA
        )
        messages, params = self.policy.request(state, first)
        sampling = {name: params[name] for name in _SAMPLING if name in params}
        sampling["structured_outputs"] = {"json": json.dumps(plan.schema)}
        return {
            **carried,
            "id": abstract.id,
            "index": abstract.index,
            STATE_FIELD: _state_json(state.sent()),
            "tagger_error": "",
            "messages": messages,
            "sampling_params": sampling,
        }

    def postprocess(self, row: dict[str, Any]) -> dict[str, Any]:
        """The engine's answer read by the policy: a tagged row, or a pending one."""
        plan = self.plan
        if row.get("tagger_error"):
            return self._with_pass(error_record(row, -1, str(row["tagger_error"])), row, "")
        abstract = record_abstract(row, -1)
        state = _state(row.get(STATE_FIELD))
        sampling = row.get("sampling_params") or {}
        limit = sampling.get("max_tokens") if isinstance(sampling, dict) else None
        generated = _count(row.get("num_generated_tokens"))
        reply = Reply(
            content=str(row.get("generated_text") or ""),
            finish_reason="length" if isinstance(limit, int) and generated >= limit else "stop",
            usage=Usage(
                prompt_tokens=_count(row.get("num_input_tokens")), completion_tokens=generated
            ),
        )
        decision = self.policy.on_reply(state, reply)
        pending = decision.action.value if decision.action in _AGAIN else ""
        status = Status.OK if decision.action is Action.OK else Status.FAILED
        error = None if status is Status.OK else decision.reason
        if pending:
            error = f"pending {pending}: {decision.reason}"
        tagged = build_row(
            abstract,
            plan.run_fields(),
            status=status,
            answer=decision.answer,
            error=error,
            cached=False,
            mode=Mode.JSON_SCHEMA.value,
            usage=decision.state.usage,
            confidence=None,  # the engine's logprobs are not asked for
        )
        record = tagged_record(row_key(abstract, plan), tagged)
        record[STATE_FIELD] = _state_json(decision.state) if pending else ""
        return self._with_pass(record, row, pending)

    @staticmethod
    def _with_pass(record: dict[str, Any], row: dict[str, Any], pending: str) -> dict[str, Any]:
        record.setdefault(STATE_FIELD, "")
        record[PENDING_FIELD] = pending
        record["extra"] = row.get("extra") or ""
        return record

    @staticmethod
    def pending(row: dict[str, Any]) -> bool:
        """Whether a row needs another pass through the processor (a repair, a bigger budget)."""
        return bool(row.get(PENDING_FIELD))


_AGAIN = frozenset((Action.REPAIR, Action.ASK_AGAIN, Action.RETRY))
_RECORD_COLUMNS = ("abstract", "id", "title", "venue", "year", "source", "index", "line", "extra")


def _count(value: Any) -> int:
    try:
        count = int(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    return max(0, count)
