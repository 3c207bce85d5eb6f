"""`read_run`: a `tagger run` output read back as a `Run`, its rows checked and its manifest
read within bounds (a planted or damaged manifest is an error naming it)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tagger.review.inputs import read_runs

if TYPE_CHECKING:
    from tagger.api import Run

__all__ = ["read_run"]


def read_run(path: str | os.PathLike[str]) -> Run:
    """A `tagger run` output read back as a Run: its rows, counts and manifest."""
    from tagger.api import Run
    from tagger.files.rows import Row, manifest_path
    from tagger.pipeline.stats import RunStats
    from tagger.usage import Usage

    source = Path(path)
    (raw,) = read_runs(source)
    rows = [Row.model_validate(row) for row in raw]
    manifest = _read_manifest(manifest_path(source))
    not_run = sum(1 for r in rows if not r.ok and (r.error or "").startswith("not run: "))
    ok = sum(r.ok for r in rows)
    usage = sum(
        (Usage(r.prompt_tokens, r.completion_tokens, r.cached_input_tokens) for r in rows),
        Usage(),
    )
    cost = _manifest_cost(manifest, manifest_path(source))
    stats = RunStats(
        items=len(rows),
        ok=ok,
        failed=len(rows) - ok - not_run,
        not_run=not_run,
        cached=sum(r.cached for r in rows),
        usage=usage,
        cost=cost,
        mode=manifest.get("mode") if isinstance(manifest.get("mode"), str) else None,
    )
    return Run(rows, stats, manifest)


# A manifest is a few KB; its error tallies are bounded. Far larger is no manifest.
MAX_MANIFEST_BYTES = 16 << 20


def _read_manifest(path: Path) -> dict[str, Any]:
    """A run's manifest, read within bounds ({} if there is none); UsageError naming it if it
    cannot be read: a planted or damaged manifest is an error, never a RecursionError."""
    from tagger.errors import UsageError
    from tagger.jsondata import parse_json

    if not path.exists():
        return {}
    if not path.is_file():  # a FIFO would block, a device (/dev/zero) never end
        raise UsageError(f"{path} is not a file: remove it (the rows are read without it)")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_MANIFEST_BYTES + 1)
        if len(data) > MAX_MANIFEST_BYTES:
            raise UsageError(f"{path} is over 16 MiB, not a manifest: remove it or rerun")
        text = data.decode("utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the manifest {path}: {exc}") from None
    try:
        loaded = parse_json(text)
    except ValueError as exc:
        raise UsageError(
            f"{path} is no tagger manifest ({str(exc)[:200]}): remove it (the rows are read "
            "without it) or rerun `tagger run` to write it again"
        ) from None
    return loaded if isinstance(loaded, dict) else {}


def _manifest_cost(manifest: dict[str, Any], path: Path) -> float | None:
    """The run's recorded cost: a finite number >= 0, or None if none is recorded."""
    from tagger.errors import UsageError

    cost = manifest.get("estimated_cost_usd")
    if cost is None:
        return None
    if isinstance(cost, bool) or not isinstance(cost, int | float) or not 0 <= cost < math.inf:
        raise UsageError(
            f"{path}: estimated_cost_usd is {str(cost)[:40]}, not a cost (a finite number of "
            "dollars, 0 or more): fix or remove the manifest, or rerun `tagger run`"
        )
    return float(cost)
