"""Where a refused request's time went: the client's trace (bench/tracehooks.py) against the
fake server's (`--trace`), both on the machine's monotonic clock.

For every request attempt: the gate's lateness (released - due), the gate to the socket
(wire - released), the socket to the server reading its head (arrived - wire) and the server's
head to the time it judged the limits (limited_at - arrived). For every 429: the requests the
server had admitted in the second before it, with the span of the same requests' times at each
stage: the stage at which `cap + 1` requests first fit in one second is where they bunched.
"""

from __future__ import annotations

import itertools
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

_MARKER = re.compile(r"Study number (\d+)")
STAGES = ("due", "released", "wire", "arrived", "limited_at")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def joined(client: Path, server: Path) -> list[dict[str, Any]]:
    """Each attempt the server saw, with the client's times of the same attempt (in order)."""
    sent: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for attempt in _lines(client):
        if attempt.get("marker") is not None:
            sent[attempt["marker"]].append(attempt)
    taken: dict[int, int] = defaultdict(int)
    rows = []
    for record in _lines(server):
        found = _MARKER.search(record.get("note", ""))
        if not found:
            continue
        marker = int(found.group(1))
        attempts = sent.get(marker, [])
        index = taken[marker]
        taken[marker] += 1
        client_side = attempts[index] if index < len(attempts) else {}
        rows.append({**client_side, **record, "marker": marker})
    return rows


def _ms(values: list[float]) -> str:
    if not values:
        return "-"
    values = sorted(values)
    pick = [values[int(q * (len(values) - 1))] * 1000 for q in (0.5, 0.9, 0.99)]
    top = values[-1] * 1000
    return f"median {pick[0]:6.1f}  p90 {pick[1]:6.1f}  p99 {pick[2]:6.1f}  max {top:6.1f} ms"


def report(client: Path, server: Path, cap: int) -> list[str]:
    """Lines: each stage's delay, then each 429 and where its second's requests bunched."""
    rows = joined(client, server)
    complete = [r for r in rows if all(r.get(stage) for stage in STAGES)]
    lines = [f"trace: {len(rows)} attempts seen by the server, {len(complete)} traced end to end"]
    for label, a, b in (
        ("gate late (released - due)", "due", "released"),
        ("gate to socket (wire - released)", "released", "wire"),
        ("socket to server (arrived - wire)", "wire", "arrived"),
        ("server head to limit check", "arrived", "limited_at"),
    ):
        lines.append(f"  {label:<36} {_ms([r[b] - r[a] for r in complete])}")
    admitted = [r for r in complete if r["status"] != 429]
    for refused in (r for r in complete if r["status"] == 429):
        at = refused["limited_at"]
        window = [r for r in admitted if at - 1.0 < r["limited_at"] <= at]
        group = [*window, refused]
        spans = []
        for stage in STAGES:
            times = [r[stage] for r in group]
            spans.append(f"{stage} {max(times) - min(times):.3f}")
        lines.append(
            f"  429 at {at:.3f}: {len(window)} admitted in the second before (cap {cap}); "
            f"span of those {len(group)} at each stage (s): " + ", ".join(spans)
        )
    lines.extend(_compressions(admitted, cap))
    if complete:
        gaps = [b["released"] - a["released"] for a, b in itertools.pairwise(complete)]
        lines.append(f"  release gaps: mean {statistics.mean(gaps) * 1000:.1f} ms")
    return lines


def _compressions(admitted: list[dict[str, Any]], cap: int) -> list[str]:
    """How much shorter every `cap + 1` consecutive admitted requests were at the server than
    at each earlier stage: the jitter a pacer must leave room for (the worst, and the 99th
    percentile)."""
    ordered = sorted(admitted, key=lambda r: r["limited_at"])
    groups = [ordered[i : i + cap + 1] for i in range(len(ordered) - cap)]
    if not groups:
        return []
    out = []
    for stage in ("released", "wire", "arrived"):
        shrink = sorted(
            (g[-1][stage] - g[0][stage]) - (g[-1]["limited_at"] - g[0]["limited_at"])
            for g in groups
        )
        out.append(
            f"  {cap + 1} in a row, {stage} -> server: shrank at most "
            f"{shrink[-1] * 1000:5.1f} ms (p99 {shrink[int(0.99 * (len(shrink) - 1))] * 1000:5.1f})"
        )
    spans = sorted(g[-1]["limited_at"] - g[0]["limited_at"] for g in groups)
    out.append(f"  {cap + 1} in a row at the server: shortest span {spans[0]:.3f} s")
    return out
