"""The example proposal as a document to mutate, and a writer of proposal files."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

EXAMPLE = (
    Path(__file__).resolve().parents[2] / "examples" / "governance_tests" / "stricter-breaker.json"
)


@pytest.fixture
def proposal_doc() -> dict[str, Any]:
    """A fresh copy of the example proposal (both messages)."""
    return copy.deepcopy(json.loads(EXAMPLE.read_text()))


@pytest.fixture
def write_proposal(tmp_path: Path) -> Callable[[Any], Path]:
    """Write a document (or raw text) as a proposal file; its path."""
    count = 0

    def write(doc: Any) -> Path:
        nonlocal count
        count += 1
        path = tmp_path / f"proposal-{count}.json"
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        return path

    return write


@pytest.fixture
def example_proposal() -> Path:
    """The example proposal file (examples/governance_tests/stricter-breaker.json)."""
    return EXAMPLE
