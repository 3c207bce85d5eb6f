"""Confidence of the chosen task area from hand-made token log-probability lists."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest

from tagger.sending.confidence import NO_CONFIDENCE, AreaConfidence, area_confidence
from tests.fakelogprobs import AreaOdds, token_logprobs

AREAS = ("nlp", "computer_vision", "robotics", "vision", "vision_language", "other")


def tok(
    text: str, p: float = 1.0, alts: Mapping[str, float] = MappingProxyType({})
) -> dict[str, Any]:
    """One logprobs.content entry: `text` chosen with probability p, alternatives by probability."""
    tops = [{"token": text, "logprob": log(p), "bytes": list(text.encode())}]
    tops += [{"token": t, "logprob": log(q), "bytes": list(t.encode())} for t, q in alts.items()]
    return {"token": text, "logprob": log(p), "bytes": list(text.encode()), "top_logprobs": tops}


def log(p: float) -> float:
    """log p, -inf for 0 (servers send a very negative number or -inf)."""
    return math.log(p) if p > 0 else -math.inf


def plain(*texts: str) -> list[dict[str, Any]]:
    """Tokens that are certain and offer no alternatives."""
    return [tok(t) for t in texts]


HEAD = ('{"', "summary", '":', ' "', "A", " study", '.",', ' "', "task", "_area", '":')
TAIL = (' "', "method", "_tags", '":', ' ["', "x", '"]}')


def answer(*area_tokens: dict[str, Any]) -> list[dict[str, Any]]:
    """A JSON answer whose task_area value is spelled by area_tokens (closing quote included)."""
    return [*plain(*HEAD), *area_tokens, *plain(*TAIL)]


def test_single_token_area_with_the_quote_inside_the_token() -> None:
    tokens = answer(tok(' "nlp', 0.8, {' "robot': 0.15, ' "vision': 0.05}), *plain('",'))
    assert area_confidence(tokens, AREAS) == AreaConfidence(0.8, "robotics", 0.15)


def test_multi_token_area_multiplies_every_token_of_the_value() -> None:
    tokens = answer(
        *plain(' "'),
        tok("computer", 0.9, {"nlp": 0.06}),
        tok("_vision", 0.5, {"_graphics": 0.5}),  # not an area: mass lost to an invalid answer
        *plain('",'),
    )
    result = area_confidence(tokens, AREAS)
    assert result == AreaConfidence(0.45, "nlp", 0.06)


def test_areas_sharing_a_prefix_are_decided_at_the_closing_quote() -> None:
    tokens = answer(
        *plain(' "'),
        tok("vision", 0.95, {"visual": 0.05}),
        tok('",', 0.6, {"_language": 0.4}),
    )
    result = area_confidence(tokens, AREAS)
    assert result is not None
    assert result.confidence == pytest.approx(0.57)
    assert result.runner_up == "vision_language"
    assert result.runner_up_confidence == pytest.approx(0.38)  # 0.95 * 0.4


def test_runner_up_sums_alternatives_across_positions() -> None:
    # "robotics" via "robot" at the first token, and via "vision" after "vision"'s own prefix.
    tokens = answer(
        tok(' "vision', 0.5, {' "rob': 0.2, ' "robotics': 0.1}),
        tok("_language", 0.5, {'",': 0.5}),
        *plain('",'),
    )
    result = area_confidence(tokens, AREAS)
    assert result is not None
    assert result.confidence == pytest.approx(0.25)
    # rob + robotics = 0.3 beats vision (0.5 * 0.5 = 0.25)
    assert result.runner_up == "robotics"
    assert result.runner_up_confidence == pytest.approx(0.3)


def test_alternative_re_spelling_the_chosen_area_is_not_a_runner_up() -> None:
    tokens = answer(tok(' "nlp', 0.7, {' "n': 0.2, ' "nl': 0.1}), *plain('",'))
    assert area_confidence(tokens, AREAS) == AreaConfidence(0.7, None, None)


def test_alternative_fitting_several_areas_counts_for_each() -> None:
    tokens = answer(tok(' "nlp', 0.6, {' "vis': 0.3, ' "rob': 0.1}), *plain('",'))
    # "vis" fits vision and vision_language: full mass to both, the first in taxonomy order wins
    assert area_confidence(tokens, AREAS) == AreaConfidence(0.6, "vision", 0.3)


def test_quote_in_a_token_of_its_own_and_alternatives_with_the_quote() -> None:
    tokens = answer(tok(' "', 1.0, {' "n': 0.0}), tok("robot", 0.9, {"nl": 0.1}), *plain('ics",'))
    assert area_confidence(tokens, AREAS) == AreaConfidence(0.9, "nlp", 0.1)


def test_missing_top_logprobs_gives_confidence_without_runner_up() -> None:
    tokens = answer(tok(' "nlp', 0.8), *plain('",'))
    for entry in tokens:
        del entry["top_logprobs"]
    assert area_confidence(tokens, AREAS) == AreaConfidence(0.8, None, None)
    tokens[len(HEAD)]["top_logprobs"] = None  # vLLM without top_logprobs
    assert area_confidence(tokens, AREAS) == AreaConfidence(0.8, None, None)


def test_answer_in_a_code_fence_after_prose() -> None:
    tokens = [
        *plain("Here", " is", " the", " answer", ":\n\n", "```", "json", "\n"),
        *answer(tok(' "other', 0.55, {' "nlp': 0.4}), *plain('",')),
        *plain("\n", "```"),
    ]
    assert area_confidence(tokens, AREAS) == AreaConfidence(0.55, "nlp", 0.4)


def test_reasoning_mentioning_an_area_before_the_answer() -> None:
    tokens = [
        *plain("<think>", ' "task_area": "robotics"', " maybe", "</think>"),
        *answer(tok(' "nlp', 0.9, {' "robotics': 0.1}), *plain('",')),
    ]
    assert area_confidence(tokens, AREAS, chosen="nlp") == AreaConfidence(0.9, "robotics", 0.1)


def test_token_ending_inside_a_multibyte_character() -> None:
    # "é" is two bytes split over two tokens (OpenAI's token text is then "bytes:\\xc3")
    split = [{"token": "bytes:\\xc3", "logprob": 0.0, "bytes": [0xC3], "top_logprobs": []}]
    split.append({"token": "bytes:\\xa9", "logprob": 0.0, "bytes": [0xA9], "top_logprobs": []})
    tokens = answer(tok(' "nlp', 0.5, {' "other': 0.5}), *plain('",'))
    tokens[4:4] = split
    assert area_confidence(tokens, AREAS) == AreaConfidence(0.5, "other", 0.5)


def test_label_spelled_by_the_model_resolved_to_chosen() -> None:
    tokens = answer(
        tok(' "Computer', 0.8, {' "computer': 0.1, ' "NLP': 0.05, ' "nlp': 0.05}),
        *plain(" Vision", '",'),
    )
    # "computer..." re-spells the chosen area's id: not a runner-up
    result = area_confidence(tokens, AREAS, chosen="computer_vision")
    assert result == AreaConfidence(0.8, "nlp", 0.05)


def test_tokens_without_bytes_use_their_text() -> None:
    tokens = answer(tok(' "nlp', 0.8, {' "other': 0.2}), *plain('",'))
    for entry in tokens:
        entry.pop("bytes")
        entry["bytes"] = None
        for top in entry["top_logprobs"]:
            top.pop("bytes")
    assert area_confidence(tokens, AREAS) == AreaConfidence(0.8, "other", 0.2)


def test_very_unlikely_and_impossible_alternatives() -> None:
    tokens = answer(tok(' "nlp', 1.0, {' "other': 0.0}), *plain('",'))  # log(0) = -inf
    tokens[len(HEAD)]["top_logprobs"].append({"token": ' "robot', "logprob": -9999.0})
    result = area_confidence(tokens, AREAS)
    assert result is not None
    assert result.confidence == 1.0
    assert result.runner_up_confidence == 0.0


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        [],
        "not a list",
        {"content": []},
        [1, 2, 3],
        [{"token": "x"}],  # no logprob
        [{"token": "x", "logprob": "high"}],
        [{"token": "x", "logprob": float("nan")}],
        [{"token": None, "logprob": -0.1}],
        [{"bytes": [300], "logprob": -0.1}],  # bytes out of range and no token text
        plain('{"summary": "no area here"}'),
        plain('{"task_area": 3}'),
        plain('{"task_area": "nlp'),  # never closed
        plain("I cannot answer that."),
    ],
)
def test_garbage_gives_none(garbage: object) -> None:
    assert area_confidence(garbage, AREAS) is None


def test_garbage_alternatives_are_skipped() -> None:
    tokens = answer(tok(' "nlp', 0.8, {' "other': 0.2}), *plain('",'))
    tokens[len(HEAD)]["top_logprobs"] += [None, {"token": 5}, {"token": "x", "logprob": None}]
    assert area_confidence(tokens, AREAS) == AreaConfidence(0.8, "other", 0.2)


def test_unknown_spelling_still_gets_a_confidence() -> None:
    tokens = answer(tok(' "bio', 0.3, {' "nlp': 0.3}), *plain("logy", '",'))
    assert area_confidence(tokens, AREAS) == AreaConfidence(0.3, "nlp", 0.3)


def test_fields_round_trip_through_a_cache_entry() -> None:
    result = AreaConfidence(0.8123, "nlp", 0.1)
    fields = result.fields()
    assert fields == {
        "task_area_confidence": 0.8123,
        "task_area_runner_up": "nlp",
        "task_area_runner_up_confidence": 0.1,
    }
    assert AreaConfidence.from_fields(fields) == result
    assert AreaConfidence.from_fields(AreaConfidence(0.5, None, None).fields()) == (0.5, None, None)
    assert AreaConfidence.from_fields(NO_CONFIDENCE) is None
    assert AreaConfidence.from_fields({"task_area_confidence": 2}) is None
    assert AreaConfidence.from_fields({"task_area_confidence": True}) is None
    bad_runner = {**fields, "task_area_runner_up_confidence": "x"}
    assert AreaConfidence.from_fields(bad_runner) is None


@pytest.mark.parametrize(
    ("chosen", "runner_up"),
    [("nlp", "robotics"), ("vision", "vision_language"), ("vision_language", "vision"),
     ("computer_vision", None), ("other", "nlp")],
)  # fmt: skip
@pytest.mark.parametrize("style", ["{}", "```json\n{}\n```", "Here it is.\n\n{}"])
def test_the_fake_servers_tokens_give_back_the_odds_it_was_told(
    chosen: str, runner_up: str | None, style: str
) -> None:
    content = style.format(json.dumps({"summary": "S.", "task_area": chosen, "method_tags": []}))
    odds = AreaOdds(0.62, runner_up, 0.3 if runner_up else 0.0)
    tokens = token_logprobs(content, odds, top=5)
    assert "".join(t["token"] for t in tokens) == content
    expected = AreaConfidence(0.62, runner_up, 0.3 if runner_up else None)
    assert area_confidence(tokens, AREAS, chosen) == expected
    assert area_confidence(token_logprobs(content, odds, top=0), AREAS) == (0.62, None, None)


def test_build_request_asks_for_logprobs_and_the_prompts_params_win() -> None:
    from tagger.config import Mode
    from tagger.pipeline.request import build_request

    messages = [{"role": "user", "content": "x"}]
    body = build_request("m", messages, Mode.TEXT, {}, {"temperature": 0}, logprobs=True)
    assert body["logprobs"] is True and body["top_logprobs"] == 5 and body["temperature"] == 0
    assert "logprobs" not in build_request("m", messages, Mode.TEXT, {}, {})
    mine = build_request("m", messages, Mode.TEXT, {}, {"top_logprobs": 2}, logprobs=True)
    assert mine["top_logprobs"] == 2
