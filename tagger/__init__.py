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
    from tagger.api import Run, atag, tag
    from tagger.files.rows import Row

__all__ = ["Row", "Run", "__version__", "atag", "tag"]


def __getattr__(name: str) -> Any:
    """Import a public name on first use (PEP 562)."""
    if name in ("Run", "atag", "tag"):
        from tagger import api

        return getattr(api, name)
    if name == "Row":
        from tagger.files.rows import Row

        return Row
    raise AttributeError(f"module 'tagger' has no attribute {name!r}")
