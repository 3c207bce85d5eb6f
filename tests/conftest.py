"""Shared pytest fixtures."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakeserver import FakeLLM


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """A started fake OpenAI-compatible server, stopped after the test."""
    with FakeLLM() as server:
        yield server
