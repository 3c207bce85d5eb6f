"""tagger: tag research-paper abstracts with an LLM, from Python or the command line.

    import tagger
    run = tagger.tag(["We propose ...", "A study of ..."], model="gpt-4o-mini")
    run.rows[0].task_area, run.stats.cost

The names below are imported when first used: `import tagger` stays fast, and the command
line (which lives in this package) does not pay for the API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tagger.__version__ import __version__

if TYPE_CHECKING:
    from tagger import errors
    from tagger.api import Run, atag, tag, tag_frame
    from tagger.dryrun import DryRunReport, estimate
    from tagger.files.rows import Row
    from tagger.reviewing import CompareReport, EvalReport, compare, evaluate, read_run, sample

__all__ = [
    "CompareReport",
    "DryRunReport",
    "EvalReport",
    "Row",
    "Run",
    "__version__",
    "atag",
    "compare",
    "errors",
    "estimate",
    "evaluate",
    "read_run",
    "sample",
    "tag",
    "tag_frame",
]


def __getattr__(name: str) -> Any:
    """Import a public name on first use (PEP 562)."""
    if name in ("Run", "atag", "tag", "tag_frame"):
        from tagger import api

        return getattr(api, name)
    if name in ("DryRunReport", "estimate"):
        from tagger import dryrun

        return getattr(dryrun, name)
    if name in ("CompareReport", "EvalReport", "compare", "evaluate", "read_run", "sample"):
        from tagger import reviewing

        return getattr(reviewing, name)
    if name == "Row":
        from tagger.files.rows import Row

        return Row
    if name == "errors":
        from tagger import errors

        return errors
    raise AttributeError(f"module 'tagger' has no attribute {name!r}")
