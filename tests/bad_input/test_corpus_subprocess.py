"""A handful of the corpus through a real process: exit status 2, one line on stderr, no
traceback reaches the terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from corpus_helpers import get_scenario, write_json

ENTRY = "import sys; from keepersim.cli import main; sys.exit(main(sys.argv[1:]))"
ROOT = Path(__file__).resolve().parents[2]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    heavy = get_scenario()
    heavy["participants"][0]["weight"] = 3_000_000_000
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"type": "header", "version": 1\n')
    return {
        "heavy": str(write_json(tmp_path / "heavy.json", heavy)),
        "ok": str(write_json(tmp_path / "ok.json", get_scenario())),
        "gov": str(
            write_json(
                tmp_path / "gov.json",
                [{"height": 1, "set": {"params.validation_params.downtime_good_percentage": "x"}}],
            )
        ),
        "blocked": str(blocker / "out.json"),
        "trace": str(trace),
    }


CASES = [
    (["serve", "--port", "99999"], "--port"),
    (["simulate", "{heavy}"], "participants[0].weight"),
    (["compare", "{ok}", "--policies", "gonka,,windowed"], "--policies"),
    (["simulate", "{ok}", "--out", "{blocked}"], "--out"),
    (["simulate", "{ok}", "--governance", "{gov}"], "downtime_good_percentage"),
    (["replay", "{trace}"], "bad.jsonl:1"),
]


@pytest.mark.parametrize(("argv", "named"), CASES, ids=[a[0] + " " + n for a, n in CASES])
def test_no_traceback_reaches_the_terminal(
    argv: list[str], named: str, files: dict[str, str]
) -> None:
    done = _run(*[a.format(**files) for a in argv])
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("keepersim: error: ") and named in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # one line
