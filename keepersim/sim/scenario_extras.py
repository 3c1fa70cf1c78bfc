"""The scenario keys a fleet built from the chain's record needs (``keepersim scenarios
from-chain``): recorded events, the traffic split among models, per-model weights, the epoch's
params and the record's provenance. Each is optional; a scenario without them runs as before.

* ``events``: ``[{"height": H, "address": A, "kind": "exclude", "reason": R}]``: at height ``H``
  the run delivers ``keepersim.v1.MsgExcludeParticipant`` and ``A`` leaves selection for the rest
  of the epoch (its effect on the chain: x/inference/keeper/participant_status.go, gonka
  ee730031). Heights are the run's (1 = the first block).
* ``arrival_shape``: ``[[from_block, factor], ...]``: the arrival rate of blocks from
  ``from_block`` on is ``arrivals_per_block x factor`` (default: factor 1 all run).
* ``model_traffic``: ``{"model": share}``: a request's model is drawn with these relative shares
  (default: uniformly among the fleet's models).
* per participant ``model_weights``: ``{"model": weight}``: its weight in that model's sub-group
  (default: its ``weight``).
* ``params``: a patch of the chain's Params JSON (proto field names, e.g.
  ``{"validation_params": {"expiration_blocks": "150"}}``) merged onto the run's default params.
* ``source``: free JSON recording where the scenario came from (no effect on a run).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from keepersim.limits import (
    MAX_ARRIVALS_PER_BLOCK,
    MAX_BLOCKS,
    MAX_EXPECTED_REQUESTS,
)
from keepersim.types.errors import InvalidParamsError
from keepersim.types.params import get_default_params, params_from_dict, params_to_dict

__all__ = [
    "EVENT_KINDS",
    "ScenarioEvent",
    "compute_arrival_factors",
    "compute_params_patch",
    "get_extra_problems",
]

#: What an event does: ``exclude`` (the participant leaves selection for the rest of the epoch).
EVENT_KINDS: Final = ("exclude",)

_Problem = tuple[tuple[str | int, ...], str]


@dataclass(frozen=True, slots=True)
class ScenarioEvent:
    """A recorded chain decision replayed at ``height`` (the run's height)."""

    height: int
    address: str
    kind: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "height": self.height,
            "address": self.address,
            "kind": self.kind,
            "reason": self.reason,
        }


def _merge(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def compute_params_patch(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` (a ``params_to_dict``) with the chain-params ``patch`` merged into its
    ``params``."""
    return {**base, "params": _merge(base.get("params", {}), patch)}


def compute_arrival_factors(shape: Sequence[tuple[int, float]], blocks: int) -> list[float]:
    """Each block's factor (blocks 1..``blocks``) of an ``arrival_shape``."""
    out = [1.0] * blocks
    for i, (start, factor) in enumerate(shape):
        end = shape[i + 1][0] if i + 1 < len(shape) else blocks + 1
        for h in range(max(1, start), min(end, blocks + 1)):
            out[h - 1] = factor
    return out


def _shape_problems(obj: Mapping[str, Any]) -> list[_Problem]:
    shape = obj.get("arrival_shape")
    if not isinstance(shape, list):
        return []
    problems: list[_Problem] = []
    previous = -1
    for j, entry in enumerate(shape):
        if not isinstance(entry, list) or len(entry) != 2:
            return problems
        start, factor = entry
        if isinstance(factor, float) and not math.isfinite(factor):
            problems.append((("arrival_shape", j, 1), f"expected a finite number, got {factor!r}"))
        if j == 0 and start != 0:
            problems.append(
                (("arrival_shape", 0, 0), f"expected the first from_block to be 0, got {start!r}")
            )
        elif start <= previous:
            problems.append(
                (
                    ("arrival_shape", j, 0),
                    f"expected from_block > {previous} (from_blocks must strictly increase), got {start!r}",
                )
            )
        previous = start
    arrivals, blocks = obj.get("arrivals_per_block"), obj.get("blocks")
    if problems or not isinstance(arrivals, int | float) or not isinstance(blocks, int):
        return problems
    if not 0 < blocks <= MAX_BLOCKS:
        return problems
    factors = compute_arrival_factors([(int(b), float(f)) for b, f in shape], blocks)
    expected = arrivals * sum(factors)
    if expected > MAX_EXPECTED_REQUESTS:
        problems.append(
            (
                ("arrival_shape",),
                f"the expected requests {expected:.6g} are above the limit "
                f"{MAX_EXPECTED_REQUESTS:,}",
            )
        )
    if arrivals * max(factors) > MAX_ARRIVALS_PER_BLOCK:
        problems.append(
            (
                ("arrival_shape",),
                f"arrivals_per_block x a factor is above the limit {MAX_ARRIVALS_PER_BLOCK:,}",
            )
        )
    return problems


def _params_problem(patch: Mapping[str, Any]) -> str | None:
    """Why the chain-params patch does not load, or None."""
    from keepersim.types.params import validate_params

    try:
        merged = compute_params_patch(params_to_dict(get_default_params()), patch)
        validate_params(params_from_dict(merged))
    except InvalidParamsError as exc:
        return str(exc)
    return None


def get_extra_problems(obj: Mapping[str, Any]) -> list[_Problem]:
    """The rules of these keys a JSON Schema cannot state (run after it, on any object)."""
    problems: list[_Problem] = []
    participants = obj.get("participants")
    parts = participants if isinstance(participants, list) else []
    addresses = {p.get("address") for p in parts if isinstance(p, Mapping)}
    models: set[str] = set()
    for i, part in enumerate(parts):
        if not isinstance(part, Mapping):
            continue
        served = part.get("models", ["default"])
        served = served if isinstance(served, list) else []
        models.update(m for m in served if isinstance(m, str))
        weights = part.get("model_weights")
        if isinstance(weights, Mapping):
            for model in weights:
                if model not in served:
                    problems.append(
                        (
                            ("participants", i, "model_weights", model),
                            f"model {model!r} is not one of the participant's models "
                            f"{json.dumps(served)}",
                        )
                    )
    traffic = obj.get("model_traffic")
    if isinstance(traffic, Mapping) and parts:
        for model in traffic:
            if model not in models:
                problems.append(
                    (
                        ("model_traffic", model),
                        f"no participant serves model {model!r}; expected one of "
                        f"{json.dumps(sorted(models))}",
                    )
                )
        shares = [v for v in traffic.values() if isinstance(v, int | float)]
        if shares and not any(v > 0 for v in shares):
            problems.append((("model_traffic",), "expected at least one share > 0"))
    events = obj.get("events")
    if isinstance(events, list):
        for j, event in enumerate(events):
            if (
                isinstance(event, Mapping)
                and isinstance(event.get("address"), str)
                and parts
                and event["address"] not in addresses
            ):
                problems.append(
                    (
                        ("events", j, "address"),
                        f"{event['address']!r} is not a participant of the scenario",
                    )
                )
    problems.extend(_shape_problems(obj))
    params = obj.get("params")
    if isinstance(params, Mapping):
        problem = _params_problem(params)
        if problem is not None:
            problems.append((("params",), f"expected a patch of the chain's Params: {problem}"))
    return problems
