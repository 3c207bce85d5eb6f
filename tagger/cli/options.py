"""Options shared by several commands, declared without importing the core (fast --help)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from tagger import defaults

DEFAULT_MODEL = defaults.MODEL
DEFAULT_BASE_URL = defaults.BASE_URL
ModeName = Literal["json_schema", "json_object_schema", "json_object", "text"]
HttpName = Literal["httpx", "aiohttp"]

PathsArg = Annotated[
    list[Path],
    typer.Argument(
        help="Abstract files (.txt, .jsonl, .csv) or directories of them.", metavar="PATH"
    ),
]
BaseUrlOpt = Annotated[
    str | None,
    typer.Option(
        envvar="OPENAI_BASE_URL",
        help="OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio).",
        show_default=DEFAULT_BASE_URL,
        metavar="URL",
    ),
]
ApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        envvar="OPENAI_API_KEY",
        help="API key; better put in .env. Local servers accept anything.",
        show_default=False,
        metavar="KEY",
    ),
]
PromptsDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--prompts-dir",
        envvar="TAGGER_PROMPTS_DIR",
        help="Directory of prompts, taxonomies and synonyms.",
        show_default="./prompts, else the installed copy",
        metavar="DIR",
    ),
]


def _named_directory(raw: str | Path) -> Path:
    """An option's directory; an empty one would silently mean the current directory."""
    if not str(raw).strip():
        raise typer.BadParameter("empty: name a directory")
    return Path(raw)


CacheDirOpt = Annotated[
    Path,
    typer.Option(
        "--cache-dir",
        envvar="TAGGER_CACHE_DIR",
        help="Answer cache directory.",
        metavar="DIR",
        parser=_named_directory,
    ),
]
