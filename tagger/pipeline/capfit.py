"""What --max-cost lets a run go without being held back, and how many batch rounds a
tighter cap spreads a job over (the dry run's figures, from its per-request estimates).

The spend guard holds each request in flight at its worst (tagger.sending.spendguard), and a
batch holds each of a round's lines at its worst until the batch is collected and its bill
replaces that (tagger.batch.build.SpendCap); pure functions, no I/O.
"""

from __future__ import annotations

__all__ = ["MAX_ROUNDS", "batch_rounds", "unheld_live_cap"]

# A job that would need more rounds than this under a cap is said not to fit it (each round
# of the Batch API may take up to 24 h).
MAX_ROUNDS = 100


def unheld_live_cap(expected: float, largest_worst: float, in_flight: int) -> float:
    """A cap under which no request of a live run waits for room: the run's expected cost
    plus the most `in_flight` requests at once can cost at their worst (an upper bound: the
    largest request's worst for each)."""
    return expected + max(0, in_flight) * largest_worst


def batch_rounds(
    lines: int, expected: float, worst: float, cap: float, spent: float = 0.0
) -> int | None:
    """The rounds `lines` batch lines take under `cap`: each round takes the lines whose worst
    case fits beside the round's holds, and its bill (`expected` a line) replaces them before
    the next; `spent`: what the job spent before its first round (the canary sent live).
    None when some line never fits (or the job would take more than MAX_ROUNDS)."""
    rounds = 0
    while lines > 0:
        room = cap - spent
        if not room > 0 or rounds >= MAX_ROUNDS:  # NaN is no room either
            return None
        fit = lines if room >= lines * worst else int(room // worst)
        if fit <= 0:
            return None
        lines -= fit
        spent += fit * expected
        rounds += 1
    return rounds
