"""Running the CLI in-process on a bad input and checking the refusal."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

from keepersim import cli

#: A small valid scenario: the base every scenario case mutates.
SCENARIO: dict[str, Any] = {
    "name": "corpus",
    "seed": 3,
    "blocks": 60,
    "epoch_length": 30,
    "expiration_blocks": 10,
    "arrivals_per_block": 1.0,
    "participants": [
        {"address": "a", "weight": 1000, "miss": [[0, 0.01]]},
        {"address": "b", "weight": 700, "latency_blocks": [1, 3], "miss": [[0, 0.05]]},
        {"address": "c", "weight": 500, "miss": [[0, 0.0], [20, 0.5]], "capacity": 4},
    ],
}


def get_scenario() -> dict[str, Any]:
    return json.loads(json.dumps(SCENARIO))


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def run_main(argv: list[str]) -> tuple[int, str]:
    """``keepersim.cli.main(argv)`` with stdout dropped; returns (status, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = cli.main(argv)
    return status, err.getvalue()


def assert_refused(status: int, err: str, *named: str) -> None:
    """Exit 2, one ``keepersim: error:`` message naming every string of ``named``, no
    traceback."""
    assert status == 2, err
    assert "Traceback" not in err, err
    assert err.startswith("keepersim: error: "), err
    for name in named:
        assert name in err, (name, err)
