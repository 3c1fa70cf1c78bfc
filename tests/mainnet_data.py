"""Where the tests find the real mainnet epochs: the one place.

``shared/data/gonka-mainnet`` beside the checkout (CI clones it with ``shared/`` beside it), or
beside the folder of worktrees (a checkout in ``wt/NAME``), or under ``KEEPERSIM_SHARED_DATA``
(a ``data`` folder). Without it, the tests that can run on fewer epochs use the copies shipped in
``examples/mainnet`` (epochs 249 and 250, its PROVENANCE.md); the others skip, naming the path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The epochs of the shared data.
EPOCHS = range(247, 253)
#: The shipped copies (a subset of the shared epochs, unchanged).
EXAMPLES = ROOT / "examples" / "mainnet"


def get_mainnet_data_dir() -> Path | None:
    """The shared ``gonka-mainnet`` folder, or None when it is not there."""
    env = os.environ.get("KEEPERSIM_SHARED_DATA")
    candidates = [Path(env)] if env else [ROOT / ".." / "shared" / "data"]
    candidates.append(ROOT / ".." / ".." / "shared" / "data")
    for data in candidates:
        folder = data / "gonka-mainnet"
        if folder.is_dir():
            return folder
    return None


#: The shared folder when present; else the shipped copies.
MAINNET_DATA: Path = get_mainnet_data_dir() or EXAMPLES


def get_epoch_dirs() -> list[Path]:
    """The ``epoch_N`` folders of :data:`MAINNET_DATA`, in epoch order."""
    found = [p for p in MAINNET_DATA.iterdir() if p.is_dir() and p.name.startswith("epoch_")]
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))


def require_shared() -> Path:
    """The shared folder (all six epochs); skips the test without it."""
    folder = get_mainnet_data_dir()
    if folder is None:
        pytest.skip("shared/data/gonka-mainnet not found beside the checkout")
    return folder


def load_live_params(epoch: int) -> dict[str, Any]:
    """The inner ``params`` of epoch ``epoch``'s params.json (skips the test without data)."""
    data = json.loads((require_shared() / f"epoch_{epoch}" / "params.json").read_text("utf-8"))
    assert set(data) == {"params"}
    params: dict[str, Any] = data["params"]
    return params
