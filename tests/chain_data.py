"""Where the tests find the real mainnet data: ``shared/data/gonka-mainnet`` beside the checkout
(CI), or beside the folder of worktrees (a checkout in ``wt/NAME``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
EPOCHS = range(247, 253)


def get_mainnet_data_dir() -> Path | None:
    for up in (ROOT / "..", ROOT / ".." / ".."):
        folder = up / "shared" / "data" / "gonka-mainnet"
        if folder.is_dir():
            return folder
    return None


def load_live_params(epoch: int) -> dict[str, Any]:
    """The inner ``params`` of epoch ``epoch``'s params.json (skips the test without data)."""
    folder = get_mainnet_data_dir()
    if folder is None:
        pytest.skip("shared/data/gonka-mainnet not found beside the checkout")
    data = json.loads((folder / f"epoch_{epoch}" / "params.json").read_text(encoding="utf-8"))
    assert set(data) == {"params"}
    params: dict[str, Any] = data["params"]
    return params
