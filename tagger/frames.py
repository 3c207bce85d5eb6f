"""pandas DataFrames in and out: optional (`pip install 'tagger[pandas]'`), imported on use."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

from tagger.errors import ConfigError

__all__ = ["frame_items", "is_frame", "require_pandas"]
INSTALL = "pip install 'tagger[pandas]'"


def require_pandas() -> ModuleType:
    """The pandas module; ConfigError saying what to install when it is missing."""
    import importlib

    try:
        return importlib.import_module("pandas")
    except ImportError:
        raise ConfigError(f"DataFrames need pandas, which is not installed: {INSTALL}") from None


def is_frame(value: object) -> bool:
    """Whether value is a pandas DataFrame (without importing pandas to find out)."""
    kind = type(value)
    return kind.__name__ == "DataFrame" and kind.__module__.split(".")[0] == "pandas"


def frame_items(
    frame: Any, text: str = "abstract", title: str | None = "title", id: str | None = "id"
) -> Iterator[dict[str, Any]]:
    """One mapping per row, in order: the abstract from column `text`, title and id if present.

    Missing values (NaN, None) count as absent; other columns stay out of the request.
    """
    pandas = require_pandas()
    if text not in frame.columns:
        columns = ", ".join(map(str, frame.columns))
        raise ConfigError(
            f"the DataFrame has no column {text!r} (columns: {columns}): "
            "pass text='<the column with the abstracts>'"
        )
    wanted = {"abstract": text, "title": title, "id": id}
    present = {key: column for key, column in wanted.items() if column in frame.columns}
    for values in frame[list(present.values())].itertuples(index=False, name=None):
        item: dict[str, Any] = {}
        for key, value in zip(present, values, strict=True):
            if value is None or (not isinstance(value, str) and bool(pandas.isna(value))):
                continue
            item[key] = value.item() if hasattr(value, "item") else value  # numpy scalars
        yield item
