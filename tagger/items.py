"""What `tag()` and `estimate()` take as items: strings, mappings, objects with an `abstract`,
a DataFrame, or paths of input files; checked as `tagger run` checks its input files."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tagger.files.abstracts import Abstract, InputScan, given_record, scan, scan_given

GIVEN = "<items>"  # the `source` of abstracts passed in memory
_OPTIONAL = ("title", "id", "venue", "year")


def read_items(items: object) -> InputScan:
    """The abstracts of `items`, checked like input files (InputError names the item)."""
    from tagger.frames import frame_items, is_frame

    if isinstance(items, str | bytes):
        raise TypeError("pass a list of abstracts (a single string is one abstract: [text])")
    if isinstance(items, os.PathLike):
        return scan([Path(items)])
    if is_frame(items):
        items = frame_items(items)
    if not isinstance(items, Iterable):
        raise TypeError(f"items must be an iterable of abstracts, not {type(items).__name__}")
    listed = list(items)
    if listed and all(isinstance(item, os.PathLike) for item in listed):
        return scan([Path(item) for item in listed])
    return scan_given([_abstract(number, item) for number, item in enumerate(listed, 1)])


def _abstract(number: int, item: object) -> Abstract:
    if isinstance(item, str):
        fields: Mapping[str, Any] = {"abstract": item}
    elif isinstance(item, Mapping):
        fields = item
    else:  # an object with attributes: a dataclass, a pydantic model, a namedtuple
        names = ("abstract", *_OPTIONAL)
        fields = {name: getattr(item, name) for name in names if hasattr(item, name)}
    return given_record(GIVEN, number, fields)
