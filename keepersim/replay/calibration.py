"""The what-if estimator's calibration error, as every what-if report states it.

The numbers come from the committed calibration (``scripts/calibrate_what_if.py``, the figure in
docs/results/what-if-calibration/): what-if on traces recorded by ``simulate --policy none``
against ``simulate``'s real run of each policy with the same seed. The summary is a small JSON
file next to this module (``calibration.json``), written by the script with ``--write-summary``.

A report also says when its own run is outside what the calibration covers: other estimator
settings, or a capacity-limited recording (declines, per-participant capacity, a scenario the
calibration lists as not calibratable), where load changes miss rates and a what-if over a
recording cannot reproduce them.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Any, Final

__all__ = [
    "CALIBRATION_PATH",
    "compute_calibration_note",
    "compute_rank_agreement",
    "compute_wilson",
    "get_calibration",
]

CALIBRATION_PATH: Final = Path(__file__).with_name("calibration.json")
_Z95: Final = 1.959963984540054


@cache
def get_calibration() -> dict[str, Any] | None:
    """The committed calibration summary, or None when the file is missing or unreadable."""
    try:
        data = json.loads(CALIBRATION_PATH.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _is_capacity_limited(scenario: object, declines: int, not_calibratable: list[str]) -> bool:
    if declines > 0:
        return True
    if isinstance(scenario, str):
        return scenario in not_calibratable
    if isinstance(scenario, dict):
        if scenario.get("name") in not_calibratable or scenario.get("pushback"):
            return True
        participants = scenario.get("participants")
        if isinstance(participants, list):
            return any(isinstance(p, dict) and p.get("capacity") for p in participants)
    return False


def compute_calibration_note(
    settings: dict[str, Any], policy: str | None, scenario: object, declines: int
) -> dict[str, Any]:
    """What the report states: the calibration error (per policy), and whether it applies."""
    calibration = get_calibration()
    if calibration is None:
        return {"available": False, "warnings": ["no calibration data shipped with keepersim"]}
    per_policy = calibration.get("per_policy", {})
    warnings: list[str] = []
    if calibration.get("estimator") != settings:
        warnings.append(
            f"estimator settings {json.dumps(settings, sort_keys=True)} differ from the "
            f"calibrated {json.dumps(calibration.get('estimator'), sort_keys=True)}: the "
            "calibration error stated does not apply"
        )
    not_calibratable = list(calibration.get("not_calibratable", []))
    if _is_capacity_limited(scenario, declines, not_calibratable):
        warnings.append(
            "capacity-limited recording (declines, capacities or a capacity scenario): load "
            "changes miss rates, which what-if does not model; its miss rates are not calibrated"
        )
    if policy is not None and policy not in per_policy:
        warnings.append(f"policy {policy!r} is not in the calibration")
    return {
        "available": True,
        "source": calibration.get("source", "docs/results/what-if-calibration"),
        "tolerance": calibration.get("tolerance"),
        "share_within": calibration.get("calibratable_share_within"),
        "cells": calibration.get("calibratable_cells"),
        "share_within_all": calibration.get("share_within"),
        "rank_disagreements": calibration.get("calibratable_rank_disagreements"),
        "separated_pairs": calibration.get("calibratable_separated_pairs"),
        "scenarios": calibration.get("scenarios"),
        "seeds": calibration.get("seeds"),
        "per_policy": per_policy if policy is None else {policy: per_policy.get(policy)},
        "warnings": warnings,
    }


def compute_wilson(misses: int, n: int) -> tuple[float, float]:
    """The 95% Wilson interval of a binomial rate."""
    if n == 0:
        return (0.0, 1.0)
    p = misses / n
    z2 = _Z95 * _Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = _Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return (centre - half, centre + half)


def compute_rank_agreement(
    real: dict[str, dict[str, Any]], what_if: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Pairs whose simulate intervals separate, and whether what-if orders them the same way."""
    separated = []
    disagree = []
    names = [p for p in real if p in what_if]
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            lo_a, hi_a = compute_wilson(real[a]["misses"], real[a]["inferences"])
            lo_b, hi_b = compute_wilson(real[b]["misses"], real[b]["inferences"])
            if hi_a < lo_b or hi_b < lo_a:
                separated.append([a, b])
                real_order = real[a]["miss_rate"] < real[b]["miss_rate"]
                wi_order = what_if[a]["miss_rate"] < what_if[b]["miss_rate"]
                if real_order != wi_order:
                    disagree.append([a, b])
    return {"separated_pairs": len(separated), "disagreements": disagree}
