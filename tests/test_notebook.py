"""A notebook executed in a real Jupyter kernel (nbclient + ipykernel), as a user's would run:
progress shows as text without ipywidgets (no rich warning, no empty output), an expected
error is one line and a short traceback, and the dry run works from Python."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tests.harness import PROMPTS_DIR, REPO_ROOT, TEST_KEY

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

SETUP = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT)!r})
import tagger
from tests.fakeserver import FakeLLM
from tests.harness import seed_texts, taxonomy_ids

fake = FakeLLM(areas=taxonomy_ids(), api_key={TEST_KEY!r}).start()
options = dict(base_url=fake.base_url, api_key={TEST_KEY!r}, prompts_dir={str(PROMPTS_DIR)!r},
               cache_dir="cache")
"""
TAG = "run = tagger.tag(seed_texts()[:3], **options)\nprint('ok rows:', run.stats.ok)"
REFUSED = (
    "tagger.tag(['An abstract not yet asked.'], **{**options, 'api_key': 'sk-not-it-000000000'})"
)
ESTIMATE = "plan = tagger.estimate(seed_texts()[:5], **options)\nprint('cached:', plan.cached)"


def _execute(folder: Path) -> Any:
    book = nbformat.v4.new_notebook()
    cells = [SETUP, TAG, REFUSED, ESTIMATE, "fake.stop()"]
    book.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    book.cells[2].metadata["tags"] = ["raises-exception"]
    client = nbclient.NotebookClient(
        book, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
    )
    client.execute()
    return book


def _text(outputs: list[Any]) -> str:
    return "".join(out.get("text", "") for out in outputs if out["output_type"] == "stream")


def test_a_notebook_shows_progress_as_text_and_errors_in_one_line(tmp_path: Path) -> None:
    if importlib.util.find_spec("ipywidgets") is not None:
        pytest.skip("ipywidgets is installed: rich draws its own widget")
    book = _execute(tmp_path)
    setup, tagged, refused, estimated, _ = book.cells
    assert setup.outputs == []
    # Progress: plain text lines in the cell, the last one whole; nothing empty, no warning.
    assert all(out["output_type"] == "stream" for out in tagged.outputs), tagged.outputs
    shown = _text(tagged.outputs)
    assert "tagging 3/3 · ok 3 · failed 0" in shown, shown
    assert "ok rows: 3" in shown
    everything = "".join(str(cell.outputs) for cell in book.cells)
    assert "ipywidgets" not in everything and "Warning" not in everything
    # A refused key: the CLI's line, and a traceback of the caller's cell and tagger's tag().
    (error,) = [out for out in refused.outputs if out["output_type"] == "error"]
    assert error["ename"] == "FatalAPIError"
    assert "refused the API key (HTTP 401)" in error["evalue"]
    frames = [line for line in error["traceback"] if "File " in line or ".py:" in line]
    assert len(frames) <= 4, error["traceback"]
    shown_trace = "".join(error["traceback"])
    assert "base_events.py" not in shown_trace and "client.py" not in shown_trace, shown_trace
    assert "cached: 3" in _text(estimated.outputs)
