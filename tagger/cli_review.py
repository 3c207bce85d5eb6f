"""Review-loop commands: export, gold import, eval, compare, tags (filled in by issue 4)."""

from __future__ import annotations

import typer


def register_review_commands(app: typer.Typer) -> None:
    """Add the review commands to the main app."""
