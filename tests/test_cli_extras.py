"""A command whose optional extra (pyproject.toml: server, export, plots) is not installed exits 2
with one line naming ``pip install 'keepersim[...]'``, before any work; without the need (e.g.
``--no-plots``) it runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from keepersim.cli import main
from keepersim.cli.common import EXTRAS


def hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make ``modules`` look uninstalled (find_spec None, import fails)."""
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


@pytest.mark.parametrize(
    ("argv", "missing", "line"),
    [
        (
            ["serve", "--memory", "--genesis", "g.json"],
            "uvicorn",
            "keepersim serve needs uvicorn: pip install 'keepersim[server]'",
        ),
        (
            ["serve", "--scenario", "sparse"],
            "starlette",
            "keepersim serve needs starlette: pip install 'keepersim[server]'",
        ),
        (
            ["export", "--node", "http://x", "--epochs", "1-2", "--out", "OUT/t.jsonl"],
            "httpx",
            "keepersim export needs httpx: pip install 'keepersim[export]'",
        ),
        (
            ["compare", "sparse", "--out", "OUT"],
            "matplotlib",
            "plotting needs matplotlib: pip install 'keepersim[plots]' (or --no-plots)",
        ),
        (
            ["sweep", "spec.json", "--out", "OUT"],
            "matplotlib",
            "plotting needs matplotlib: pip install 'keepersim[plots]' (or --no-plots)",
        ),
        (
            ["proposal", "p.json", "--out", "OUT"],
            "matplotlib",
            "plotting needs matplotlib: pip install 'keepersim[plots]' (or --no-plots)",
        ),
        (
            ["replay", "t.jsonl", "--out", "OUT"],
            "matplotlib",
            "replay --out (exclusions.png) needs matplotlib: pip install 'keepersim[plots]'",
        ),
    ],
)
def test_a_missing_extra_is_one_line_naming_it(
    argv: list[str],
    missing: str,
    line: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert any(missing in modules for modules in EXTRAS.values())
    monkeypatch.chdir(tmp_path)
    hide(monkeypatch, missing)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err == f"keepersim: error: {line}\n" and out == ""
    assert not (tmp_path / "OUT").exists()  # checked before the outputs


def test_no_plots_needs_no_plotting_library(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[bool] = []

    def fake_compare(*args: Any, plots: bool, **kw: Any) -> dict[str, Any]:
        calls.append(plots)
        return {"runs": []}

    monkeypatch.setattr("keepersim.runs.compare.compare", fake_compare)
    hide(monkeypatch, "matplotlib")
    assert main(["compare", "sparse", "--out", str(tmp_path / "o"), "--no-plots"]) == 0
    assert calls == [False]
    assert main(["compare", "sparse", "--out", str(tmp_path / "o")]) == 2
    assert calls == [False] and "keepersim[plots]" in capsys.readouterr().err
