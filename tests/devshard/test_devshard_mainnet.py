"""The escrow slot draw against the live chain: in epoch 252 devshard carried most traffic
(146,668 inferences in the summaries, 762 classic requests in the parent group), and devshard
hosts are chosen only by the slot draw (no health filter) and the nonce round-robin, so each
participant's requests should follow its share of escrow slots. Escrows drawn with
``compute_escrow_slots`` over the epoch's Qwen group (one escrow per seed) give slot shares
whose correlation with the participants' recorded requests (inferences + misses) must be high.
The data: ../shared/data/gonka-mainnet (read-only, its README.md)."""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter

import pytest
from mainnet_data import MAINNET_DATA

from keepersim.keeper.devshard.slots import compute_escrow_slots
from keepersim.types.epoch_layout import compute_model_file_name

EPOCH = 252
MODEL = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"


def pearson(x: list[float], y: list[float]) -> float:
    mx, my = sum(x) / len(x), sum(y) / len(y)
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    return cov / math.sqrt(sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y))


def test_slot_shares_follow_recorded_devshard_traffic() -> None:
    folder = MAINNET_DATA / f"epoch_{EPOCH}"
    if not folder.is_dir():
        pytest.skip(f"epoch {EPOCH} not found in {MAINNET_DATA}")
    group = json.loads((folder / compute_model_file_name(EPOCH, MODEL)).read_text())[
        "epoch_group_data"
    ]
    weights = [(v["member_address"], int(v["weight"])) for v in group["validation_weights"]]
    assert len(weights) == 72
    slots: Counter[str] = Counter()
    for escrow_id in range(1, 401):
        app_hash = hashlib.sha256(f"block-{escrow_id}".encode()).digest()
        slots.update(compute_escrow_slots(app_hash, escrow_id, MODEL, weights, 16))
    assert sum(slots.values()) == 400 * 16
    summary = json.loads((folder / f"epoch_performance_summary_{EPOCH}.json").read_text())
    requests = {
        r["participant_id"]: int(r["inference_count"]) + int(r["missed_requests"])
        for r in summary["epochPerformanceSummary"]
    }
    members = [a for a, _ in weights if a in requests]
    assert len(members) >= 60
    corr = pearson([float(slots[a]) for a in members], [float(requests[a]) for a in members])
    assert corr > 0.95, corr
