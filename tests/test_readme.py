"""The README's library example runs as written."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_library_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None, "README has no python example"
    script = tmp_path / "example.py"
    script.write_text(code.group(1))
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "InferenceFinished" in out and "'policy': 'gonka'" in out


def test_readme_starts_with_the_two_commands() -> None:
    head = README.read_text().split("```")[1]
    assert "make demo" in head and "make test" in head
