"""A finished batch's output and error lines: validated like live answers, kept in the cache."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from typing import Any

from tagger.batch.api import BatchInfo
from tagger.batch.items import apply, policy_state
from tagger.batch.jobfile import BatchRecord, ItemState, JobState
from tagger.batch.packlines import PackLines
from tagger.jsondata import JSONTooDeep, parse_server_json
from tagger.pipeline.cache import AnswerCache, outcome_entry
from tagger.pipeline.outcome import Outcome
from tagger.pipeline.policy import Action, Decision, Failure, ItemPolicy
from tagger.pipeline.request import request_rules
from tagger.prompting.plan import RunPlan
from tagger.redact import safe_text
from tagger.sending.params import refusal_of
from tagger.sending.reply import Reply, reply_from_json
from tagger.usage import NO_USAGE, Usage, at_least, plausible

log = logging.getLogger(__name__)
# Lines a batch never ran because it ended first: resubmitted, never failed for it.
NOT_RUN_CODES = frozenset({"batch_expired", "batch_cancelled"})
TOKEN_LIMIT = "token_limit_exceeded"
# Batches that may end before running a line (expired, cancelled) before it fails:
# such a line costs nothing, so --max-attempts does not bound it; this bounds the waiting.
MAX_UNRUN = 5
# The custom_id of a line too deep to parse: tagger's ids lead the line, as the API's do.
_CUSTOM_ID = re.compile(r'"custom_id"\s*:\s*"([0-9a-f]{64})"')
_CUSTOM_ID_SCAN = 4096


@dataclass
class Collector:
    """Turns a terminal batch's lines into item states and cache entries, by the item policy.

    A batch line is one request's reply or failure: the policy says what it means (answer,
    repair, ask again with a bigger budget, retry in the next round, fail), as it does for a
    live request; a pack line's reply is split first (tagger.batch.packlines). This only reads
    the lines and keeps the job and the cache.
    """

    state: JobState
    plan: RunPlan
    cache: AnswerCache
    policy: ItemPolicy

    def collect(self, record: BatchRecord, info: BatchInfo, lines: list[str]) -> None:
        """Settle every item of the batch: answered, to repair, to resubmit or failed."""
        # Each line of this file once, by the custom_id tagger derived (tagger.batch.jobfile):
        # a line given twice, or another file's or job's, is nobody's here.
        left = {custom_id: record.line_keys(custom_id) for custom_id in record.custom_ids}
        for text in lines:
            line, unreadable = read_output_line(text)
            custom_id = line.get("custom_id")
            keys = left.pop(custom_id, None) if isinstance(custom_id, str) else None
            if keys is None or not self.waiting(keys, record):
                continue
            if unreadable is not None:  # answered, but not readably: its repair turn says so
                self._answer(keys, record, {}, unreadable)
                continue
            try:
                self._line(keys, record, line)
            except (ValueError, TypeError, OverflowError, RecursionError) as exc:
                # Data no reader foresaw fails its own rows; the batch is still collected.
                reason = f"unreadable batch answer ({type(exc).__name__})"
                for item in self.waiting(keys, record):
                    self._failed(item, Failure(reason, retryable=False))
        for keys in left.values():  # lines the batch never ran
            for item in self.waiting(keys, record):
                self._unanswered(item, info)
        record.collected = True
        PackLines(self).check_give_up()

    def waiting(self, keys: tuple[str, ...], record: BatchRecord) -> list[ItemState]:
        """The items of these keys that wait for this batch's answer."""
        items = (self.state.items.get(key) for key in keys)
        return [i for i in items if i is not None and self.is_waiting(i, record)]

    @staticmethod
    def is_waiting(item: ItemState, record: BatchRecord) -> bool:
        """Whether an item's last request is this batch's line, not yet collected."""
        return item.status == "submitted" and item.batch_id == record.batch_id

    def _line(self, keys: tuple[str, ...], record: BatchRecord, line: dict[str, Any]) -> None:
        response = line.get("response")
        if isinstance(response, dict) and response.get("status_code") == 200:
            body = response.get("body")
            self._answer(keys, record, body if isinstance(body, dict) else {})
            return
        if isinstance(response, dict):
            status = response.get("status_code")
            status = status if isinstance(status, int) and not isinstance(status, bool) else None
            message, code = _error_of(response.get("body"), self.policy.secret)
            reason = f"HTTP {status}: {message or 'no message'}"
            # A refused parameter the job now adapts to: the next round sends the line again.
            retryable = True if self._adapted(status, response.get("body")) else None
            failure = Failure(reason, status=status or 0, code=code, retryable=retryable)
            self._line_failed(keys, record, failure)
            return
        error = line.get("error")
        error = error if isinstance(error, dict) else {}
        code, message = error.get("code") or "error", error.get("message") or "no message"
        if code in NOT_RUN_CODES:  # never run: worth another try, as a request without reply
            for item in self.waiting(keys, record):
                self._not_run(item, f"{code}: {message}")
        else:
            failure = Failure(f"batch request failed: {code}: {message}", retryable=False)
            self._line_failed(keys, record, failure)

    def _line_failed(self, keys: tuple[str, ...], record: BatchRecord, failure: Failure) -> None:
        """A line without a reply: each abstract retried or failed; a pack's, if the failure
        is not worth the same request again, asked alone (as a live pack's is)."""
        if len(keys) > 1 and not failure.worth_retrying:
            PackLines(self).failed(keys, record, failure.reason)
            return
        for item in self.waiting(keys, record):
            self._failed(item, failure)

    def _adapted(self, status: object, body: object) -> bool:
        """A 400 refusing a parameter: the job learns it, and the next round's lines follow."""
        if not isinstance(status, int):
            return False
        client, params = self.plan.config.client, self.plan.prompt.params
        key = self.plan.prompt_cache_key
        rules = request_rules(client, params, self.state.adaptations, cache_key=key)
        # The line was built before some of what the job knows now: either set of names.
        before = request_rules(client, params, cache_key=key).body_params(params)
        sent = {"model", "messages", "response_format", *before, *rules.body_params(params)}
        message = _error_of(body, self.policy.secret)[0] or ""
        refusal = refusal_of(status, body, message, sent)
        if refusal is None or not rules.learn(refusal):
            # Refused again after the job adapted (an earlier line of this batch): resend too.
            return refusal is not None and refusal.param in rules.adapted
        self.state.adaptations = list(rules.learned)
        return True

    def _answer(
        self,
        keys: tuple[str, ...],
        record: BatchRecord,
        body: dict[str, Any],
        unreadable: str | None = None,
    ) -> None:
        try:
            reply = reply_from_json(body, self.policy.secret)
        except TypeError:
            # Validation says what is wrong; what it cost is not known: the estimate.
            reply = Reply(content="", finish_reason=None, usage_believed=False)
        if unreadable is not None:
            reply = Reply(content="", finish_reason=None, problem=unreadable, usage_believed=False)
        items = [self.state.items.get(key) for key in keys]
        expected = sum((Usage.from_fields(i.estimate) for i in items if i is not None), NO_USAGE)
        if not (reply.usage_believed and plausible(reply.usage, expected)):
            # Junk, no or implausible usage: at least what tagger expected the line to cost.
            reply = replace(reply, usage=at_least(reply.usage, expected))
        self.state.requests += 1
        total = Usage.from_fields(self.state.usage) + reply.usage
        self.state.usage = total.as_fields()
        if len(keys) > 1:
            PackLines(self).answer(keys, record, reply)
            return
        item = items[0]
        assert item is not None  # waiting, checked by the caller
        self.judged(keys[0], item, record, self.policy.on_reply(policy_state(item, self.policy),
                    reply), reply)  # fmt: skip

    def judged(
        self, key: str, item: ItemState, record: BatchRecord, decision: Decision, reply: Reply
    ) -> None:
        """Record the policy's verdict on one abstract's reply (or share of a pack's)."""
        apply(item, decision)
        if decision.action is Action.REPAIR:
            self.state.repairs += 1
            log.info("invalid batch answer, repair turn %d: %s", item.repairs, decision.reason)
        if decision.action is not Action.OK:
            return
        answered = Outcome(
            answer=decision.answer,
            usage=decision.state.usage,
            mode=self.state.mode,
            confidence=decision.confidence,
            batch_id=record.batch_id,
            served_model=reply.model,
        )
        self.cache.put(key, outcome_entry(answered))
        item.status = "ok"

    def _unanswered(self, item: ItemState, info: BatchInfo) -> None:
        codes = [code for code, _ in info.errors]
        if info.status == "failed" and TOKEN_LIMIT not in codes:
            detail = "; ".join(f"{code}: {message}" for code, message in info.errors)
            reason = f"batch {info.batch_id} failed: {detail or 'no reason given'}"
            self._failed(item, Failure(reason, retryable=False))
            return
        reason = f"batch {info.batch_id} ended {info.status} before answering it"
        if info.status == "failed":  # the organisation's queue was full: not this item's fault
            item.attempts -= 1
            self._failed(item, Failure(reason, retryable=True))
        else:
            self._not_run(item, reason)

    def _not_run(self, item: ItemState, reason: str) -> None:
        """A line the batch never ran (it expired or was cancelled first): it cost nothing, so
        it is no attempt; resubmitted, up to MAX_UNRUN rounds, then failed saying so."""
        item.attempts = max(0, item.attempts - 1)
        item.unrun += 1
        if item.unrun > MAX_UNRUN:
            reason = (
                f"{reason}; {item.unrun} batches ended before running it (each may take 24 h): "
                "rerun later, or without --batch to tag it live"
            )
            self._failed(item, Failure(reason, retryable=False))
            return
        self._failed(item, Failure(reason, retryable=True))

    def _failed(self, item: ItemState, failure: Failure) -> None:
        """A request without a usable reply: resubmitted in the next round, or failed."""
        apply(item, self.policy.on_failure(policy_state(item, self.policy), failure))


def read_output_line(text: str) -> tuple[dict[str, Any], str | None]:
    """One line of an output or error file, read within bounds ({} if it says nothing), and
    why its answer is unreadable (None if it is readable).

    A line too deep to read still belongs to its own row, found by its custom_id: that row
    gets the repair turn of an invalid answer; the rest of the batch is kept.
    """
    try:
        value = parse_server_json(text)
    except JSONTooDeep as exc:
        found = _CUSTOM_ID.search(text[:_CUSTOM_ID_SCAN])
        if found is None:
            return {}, None
        return {"custom_id": found.group(1)}, f"the server's answer is {exc}"
    except ValueError:
        return {}, None
    return (value if isinstance(value, dict) else {}), None


def _error_of(body: Any, secret: str | None) -> tuple[str | None, str | None]:
    """The message (one line, bounded, redacted once decoded) and the code of an error body."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None, None
    text = " ".join(str(error["message"]).split())[:240] if error.get("message") else None
    message = safe_text(text, secret) if text is not None else None
    code = error.get("code")
    return message, code if isinstance(code, str) else None
