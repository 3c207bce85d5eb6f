"""A finished batch's output and error lines: validated like live answers, kept in the cache."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from tagger.batch.api import BatchInfo
from tagger.batch.jobfile import BatchRecord, ItemState, JobState
from tagger.errors import InvalidAnswer
from tagger.jsondata import JSONTooDeep, parse_server_json
from tagger.pipeline.cache import AnswerCache, outcome_entry
from tagger.pipeline.outcome import Outcome
from tagger.pipeline.validate import ECHOED_REPLY_CHARS, check_answer, cut_off_problem
from tagger.prompting.plan import RunPlan
from tagger.sending.confidence import area_confidence
from tagger.sending.reply import Reply, reply_from_json
from tagger.usage import Usage

log = logging.getLogger(__name__)
# Per-request statuses worth another try in the next round (as the live client retries them).
TRANSIENT_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
# Lines a batch never ran because it ended first: resubmitted, never failed for it.
NOT_RUN_CODES = frozenset({"batch_expired", "batch_cancelled"})
TOKEN_LIMIT = "token_limit_exceeded"
# The custom_id of a line too deep to parse: tagger's ids lead the line, as the API's do.
_CUSTOM_ID = re.compile(r'"custom_id"\s*:\s*"([0-9a-f]{64})"')
_CUSTOM_ID_SCAN = 4096


@dataclass
class Collector:
    """Turns a terminal batch's lines into item states and cache entries."""

    state: JobState
    plan: RunPlan
    cache: AnswerCache
    repair_turns: int
    max_attempts: int

    def collect(self, record: BatchRecord, info: BatchInfo, lines: list[str]) -> None:
        """Settle every item of the batch: answered, to repair, to resubmit or failed."""
        mine = set(record.custom_ids)
        for text in lines:
            line, unreadable = read_output_line(text)
            custom_id = line.get("custom_id")
            item = self.state.items.get(custom_id) if isinstance(custom_id, str) else None
            if item is None or custom_id not in mine or not self._waiting(item, record):
                continue
            if unreadable is not None:  # answered, but not readably: its repair turn says so
                self._answer(str(custom_id), item, record, {}, unreadable)
                continue
            self._line(str(custom_id), item, record, line)
        for custom_id in record.custom_ids:  # lines the batch never ran
            item = self.state.items.get(custom_id)
            if item is not None and self._waiting(item, record):
                self._unanswered(item, info)
        record.collected = True

    @staticmethod
    def _waiting(item: ItemState, record: BatchRecord) -> bool:
        return item.status == "submitted" and item.batch_id == record.batch_id

    def _line(self, key: str, item: ItemState, record: BatchRecord, line: dict[str, Any]) -> None:
        response = line.get("response")
        error = line.get("error")
        if isinstance(response, dict) and response.get("status_code") == 200:
            body = response.get("body")
            self._answer(key, item, record, body if isinstance(body, dict) else {})
            return
        if isinstance(response, dict):
            status = response.get("status_code")
            reason = f"HTTP {status}: {_error_message(response.get('body')) or 'no message'}"
            if status in TRANSIENT_STATUS:
                self._again(item, reason)
            else:
                self._fail(item, reason)
            return
        error = error if isinstance(error, dict) else {}
        code, message = error.get("code") or "error", error.get("message") or "no message"
        if code in NOT_RUN_CODES:
            self._again(item, f"{code}: {message}")
        else:
            self._fail(item, f"batch request failed: {code}: {message}")

    def _answer(
        self,
        key: str,
        item: ItemState,
        record: BatchRecord,
        body: dict[str, Any],
        unreadable: str | None = None,
    ) -> None:
        try:
            reply = reply_from_json(body)
        except TypeError:
            reply = Reply(content="", finish_reason=None)  # validation says what is wrong
        if unreadable is not None:
            reply = Reply(content="", finish_reason=None, problem=unreadable)
        content, usage = reply.content, reply.usage
        self.state.requests += 1
        total = Usage.from_fields(self.state.usage) + usage
        self.state.usage = total.as_fields()
        spent = Usage.from_fields(item.usage) + usage
        item.usage = spent.as_fields()
        if reply.finish_reason == "length":
            limit = self.plan.prompt.params.get("max_tokens")
            self._fail(item, cut_off_problem(limit, asked_again=False))
            return
        try:
            answer = check_answer(content, self.plan.answer_model, problem=reply.problem)
        except InvalidAnswer as exc:
            problems = str(exc)
            if item.repairs < self.repair_turns and item.attempts < self.max_attempts:
                item.repairs += 1
                self.state.repairs += 1
                log.info("invalid batch answer, repair turn %d: %s", item.repairs, problems)
                item.status = "repair"
                item.reply = content[:ECHOED_REPLY_CHARS]
                item.problems = problems
                item.error = f"invalid answer: {problems}"
            else:
                self._fail(item, f"invalid answer after {item.repairs} repair turn(s): {problems}")
            return
        answered = Outcome(
            answer=answer,
            usage=spent,
            mode=self.state.mode,
            confidence=area_confidence(
                reply.logprobs, self.plan.taxonomy.ids, answer.get("task_area")
            ),
            batch_id=record.batch_id,
        )
        self.cache.put(key, outcome_entry(answered))
        item.status = "ok"
        item.error = item.reply = item.problems = None

    def _unanswered(self, item: ItemState, info: BatchInfo) -> None:
        codes = [code for code, _ in info.errors]
        if info.status == "failed" and TOKEN_LIMIT not in codes:
            detail = "; ".join(f"{code}: {message}" for code, message in info.errors)
            self._fail(item, f"batch {info.batch_id} failed: {detail or 'no reason given'}")
            return
        if info.status == "failed":  # the organisation's queue was full: not this item's fault
            item.attempts -= 1
        self._again(item, f"batch {info.batch_id} ended {info.status} before answering it")

    def _again(self, item: ItemState, reason: str) -> None:
        """Resubmit in the next round (as the repair turn it was, if it was one)."""
        if item.attempts >= self.max_attempts:
            self._fail(item, f"{reason} (after {item.attempts} attempts)")
            return
        item.status = "repair" if item.reply is not None else "pending"
        item.error = reason

    @staticmethod
    def _fail(item: ItemState, reason: str) -> None:
        item.status = "failed"
        item.error = reason
        item.reply = item.problems = None


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


def _error_message(body: Any) -> str | None:
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return " ".join(str(error["message"]).split())[:240]
    return None
