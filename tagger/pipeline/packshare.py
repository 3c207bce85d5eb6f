"""Each abstract's share of a pack's reply: its tokens and its slice of the log-probabilities.

Pure arithmetic. The shares are whole numbers that add up exactly to the reply's counts, so
that the rows of a packed run add up to its bill: what every abstract of the pack shares
(the fixed part of the prompt, the array around the answers, the reasoning) is split evenly;
what is an abstract's own (its text in the prompt, its answer) goes to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tagger.sending.confidence import token_bytes_of
from tagger.usage import Usage

__all__ = ["apportion", "share_usage", "slice_logprobs"]


def apportion(total: int, weights: Sequence[int]) -> list[int]:
    """`total` split in proportion to `weights` as whole numbers that add up to it (largest
    remainder; ties to the earlier one). Equal weights when they are all zero.

    A share never exceeds its weight when total <= sum(weights): its exact share is at most
    its weight, and it is rounded up only when that exact share is not a whole number.
    """
    count = len(weights)
    if count == 0 or total <= 0:
        return [0] * count
    clean = [max(0, w) for w in weights]
    whole = sum(clean)
    if whole == 0:
        clean, whole = [1] * count, count
    shares = [total * w // whole for w in clean]
    left = total - sum(shares)
    # The largest remainders get one more each; sorted by remainder, then by position.
    order = sorted(range(count), key=lambda i: (-(total * clean[i] % whole), i))
    for i in order[:left]:
        shares[i] += 1
    return shares


def share_usage(total: Usage, own_prompt: Sequence[int], own_answer: Sequence[int]) -> list[Usage]:
    """Each abstract's share of a pack's usage, adding up to `total` in every count.

    own_prompt: each abstract's own prompt tokens (its title and text as rendered), estimated;
    own_answer: each abstract's own answer tokens, estimated. Where the estimates exceed what
    the reply counted, the count is split in proportion to them. Cached tokens are the shared
    prefix first; beyond it (a prompt repeated whole), each abstract's own, in proportion.
    """
    count = len(own_prompt)
    prompt = max(0, total.prompt_tokens)
    own_p = _own(prompt, own_prompt)
    shared_p = apportion(prompt - sum(own_p), [1] * count)
    prompts = [own + shared for own, shared in zip(own_p, shared_p, strict=True)]
    cached_total = min(max(0, total.cached_input_tokens), prompt)
    shared_total = prompt - sum(own_p)
    if cached_total <= shared_total:
        # Equal weights, ties to the earlier: elementwise within the shared part's split.
        cached = apportion(cached_total, [1] * count)
    else:
        beyond = apportion(cached_total - shared_total, own_p)
        cached = [shared + extra for shared, extra in zip(shared_p, beyond, strict=True)]
    completion = max(0, total.completion_tokens)
    reasoning_total = min(max(0, total.reasoning_tokens), completion)
    visible = completion - reasoning_total
    own_a = _own(visible, own_answer)
    visible_shares = [
        own + shared
        for own, shared in zip(own_a, apportion(visible - sum(own_a), [1] * count), strict=True)
    ]
    reasoning = apportion(reasoning_total, [1] * count)
    return [
        Usage(prompts[i], visible_shares[i] + reasoning[i], cached[i], reasoning[i])
        for i in range(count)
    ]


def _own(total: int, estimates: Sequence[int]) -> list[int]:
    """The estimates as they are if they fit in total, else total split in their proportion."""
    clean = [max(0, e) for e in estimates]
    return clean if sum(clean) <= total else apportion(total, clean)


def slice_logprobs(
    tokens: object, content: str, spans: Sequence[tuple[int, int]]
) -> list[list[dict[str, Any]] | None]:
    """Each span's tokens from a reply's `logprobs.content`: those overlapping its characters.

    None for every span unless the tokens spell the content exactly, byte for byte (a server
    whose logprobs say something else than its answer gives no confidence at all).
    """
    none: list[list[dict[str, Any]] | None] = [None] * len(spans)
    if not isinstance(tokens, list):
        return none
    spelled = token_bytes_of(tokens)
    try:
        text = content.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no token spells that
        return none
    if spelled is None or b"".join(spelled) != text:
        return none
    ends: list[int] = []
    position = 0
    for piece in spelled:
        position += len(piece)
        ends.append(position)
    offsets = _byte_offsets(content, {i for span in spans for i in span})
    sliced: list[list[dict[str, Any]] | None] = []
    for start, end in spans:
        first = _first_ending_after(ends, offsets[start])
        last = _first_ending_after(ends, offsets[end] - 1)
        sliced.append(tokens[first : last + 1] if first <= last < len(tokens) else None)
    return sliced


def _byte_offsets(content: str, indices: set[int]) -> dict[int, int]:
    """The UTF-8 byte offset of each character index, in one pass over the content."""
    offsets: dict[int, int] = {}
    previous, position = 0, 0
    for index in sorted(indices):
        position += len(content[previous:index].encode("utf-8"))
        offsets[index], previous = position, index
    return offsets


def _first_ending_after(ends: Sequence[int], offset: int) -> int:
    """The index of the first token whose end is past `offset` (binary search)."""
    low, high = 0, len(ends)
    while low < high:
        middle = (low + high) // 2
        if ends[middle] > offset:
            high = middle
        else:
            low = middle + 1
    return low
