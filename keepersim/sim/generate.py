"""Generate scenarios from a few knobs (and the building blocks the built-in suite shares).

Generation is a deterministic function of its arguments on one numpy build: it draws from
``numpy.random.default_rng(seed)``, whose streams numpy does not promise to keep identical across
versions. When exactness across machines or numpy upgrades matters, SAVE the generated scenario
(:func:`keepersim.sim.scenario.save_scenario`) and run from the file.

Addresses are real bech32 strings with the ``gonka`` prefix (20-byte account addresses, checksum
included: ``gonka1`` + 38 characters) derived with SHA-256 from (name, seed, index), so they do
not depend on numpy.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Collection, Sequence
from typing import Final

import numpy as np

from keepersim.limits import MAX_LATENCY_BLOCKS
from keepersim.sim.scenario import ParticipantSpec, Scenario
from keepersim.types.bech32 import ACCOUNT_ADDRESS_PREFIX, compute_bech32

__all__ = [
    "ADDRESS_PREFIX",
    "EPOCH158_PARTICIPANTS",
    "EPOCH158_WEIGHT_CAP",
    "OUTAGE_BLOCKS",
    "SHARE_TOLERANCE",
    "WEIGHT_FLOOR",
    "WEIGHT_MEDIAN",
    "WEIGHT_MODELS",
    "WEIGHT_SIGMA",
    "draw_epoch158_weights",
    "draw_weights",
    "generate_scenario",
    "make_address",
    "select_by_weight_share",
    "weight_share",
]

ADDRESS_PREFIX: Final = ACCOUNT_ADDRESS_PREFIX
# PoC weights are large integers; at 10,000 the smallest of 150 lognormal nodes stays far above 100,
# so the fork's reputation floor (weight // 100 while reputation is 0 in the first epoch) keeps
# weights proportional instead of zeroing small nodes.
WEIGHT_MEDIAN: Final = 10000.0
WEIGHT_SIGMA: Final = 1.0

# The "epoch158" weight model (mainnet_like), fitted to the real per-participant weights of Gonka's
# epoch 158: the public audit huxuxuya/epoch158, commit 44248ff0d42fe14550e3ece6081975c866b576d7,
# artifacts/epoch_158/inference_slot_reward_check.csv, column parent_base_weight (279 participants
# with weight > 0; analysis and fit in docs/design/chain-rest-api.md section 2). Only these summary
# parameters are kept here, not the list. A participant's weight is (ML nodes) x (weight per node):
# - ML nodes: 1 with probability EPOCH158_ONE_NODE_SHARE (real: 128 of 279), else a lognormal count
#   (median 6 = the real multi-node participants' geometric mean e^1.79; sigma 0.9, their 1.08
#   narrowed by the fit)
#   rounded and clipped to [2, 200] (real max 184);
# - weight per node: a "standard" node (share 0.5, median 3,450, sigma 0.1: the real spike, 49% of
#   participants average 2.5k-4.5k per node) or another node (lognormal median 1,200, sigma 1.4);
# - the product is capped at 500,000 (real max 490,576) and floored at WEIGHT_FLOOR.
# Node count and per-node weight are independent (real corr of their logs: -0.003).
EPOCH158_PARTICIPANTS: Final = 279
EPOCH158_ONE_NODE_SHARE: Final = 0.46
EPOCH158_NODES_MEDIAN: Final = 6.0
EPOCH158_NODES_SIGMA: Final = 0.9
EPOCH158_NODES_MAX: Final = 200
EPOCH158_STANDARD_NODE_SHARE: Final = 0.5
EPOCH158_STANDARD_NODE_WEIGHT: Final = 3450.0
EPOCH158_STANDARD_NODE_SIGMA: Final = 0.1
EPOCH158_OTHER_NODE_WEIGHT: Final = 1200.0
EPOCH158_OTHER_NODE_SIGMA: Final = 1.4
EPOCH158_WEIGHT_CAP: Final = 500_000
# The reputation floor (weight // 100 at reputation 0) zeroes weights below 100: epoch 158 had 4
# (29, 68, 85, 94; the chain gives them 0 too). The model lifts its ~1% of draws below 100 to 100
# (< 0.01% of the weight) so every generated participant stays selectable in the first epoch.
WEIGHT_FLOOR: Final = 100

# Outages (outage_share > 0): each outage node goes to p = 1.0 for OUTAGE_BLOCKS (inclusive
# range, clipped to half the run) starting somewhere in the first 80% of the run.
OUTAGE_BLOCKS: Final = (300, 1500)
# Selections by weight share land within this relative tolerance of the target when possible.
SHARE_TOLERANCE: Final = 0.05


# --------------------------------------------------------------------------------------------
# Addresses
# --------------------------------------------------------------------------------------------


def make_address(name: str, seed: int, index: int) -> str:
    """A deterministic, checksum-valid bech32 ``gonka1...`` address (44 characters)."""
    digest = hashlib.sha256(f"keepersim-address\x00{name}\x00{seed}\x00{index}".encode()).digest()
    return compute_bech32(ADDRESS_PREFIX, digest[:20])


# --------------------------------------------------------------------------------------------
# Weights and selections
# --------------------------------------------------------------------------------------------


def draw_weights(rng: np.random.Generator, n: int) -> list[int]:
    """``n`` lognormal integer weights (median ~10,000, sigma 1.0), each >= 1."""
    raw = rng.lognormal(mean=math.log(WEIGHT_MEDIAN), sigma=WEIGHT_SIGMA, size=n)
    return [max(1, round(float(w))) for w in raw]


def draw_epoch158_weights(rng: np.random.Generator, n: int) -> list[int]:
    """``n`` integer weights shaped like epoch 158's (ML nodes x weight per node; see the
    EPOCH158_* constants), each in [WEIGHT_FLOOR, EPOCH158_WEIGHT_CAP].

    Draws five vectors of ``n`` values in a fixed order, whatever the outcome.
    """
    one_node = rng.random(n) < EPOCH158_ONE_NODE_SHARE
    counts = rng.lognormal(math.log(EPOCH158_NODES_MEDIAN), EPOCH158_NODES_SIGMA, size=n)
    standard = rng.random(n) < EPOCH158_STANDARD_NODE_SHARE
    standard_w = rng.lognormal(
        math.log(EPOCH158_STANDARD_NODE_WEIGHT), EPOCH158_STANDARD_NODE_SIGMA, size=n
    )
    other_w = rng.lognormal(math.log(EPOCH158_OTHER_NODE_WEIGHT), EPOCH158_OTHER_NODE_SIGMA, size=n)
    weights: list[int] = []
    for i in range(n):
        nodes = 1 if one_node[i] else min(EPOCH158_NODES_MAX, max(2, round(float(counts[i]))))
        per_node = float(standard_w[i] if standard[i] else other_w[i])
        weights.append(min(EPOCH158_WEIGHT_CAP, max(WEIGHT_FLOOR, round(nodes * per_node))))
    return weights


#: Weight models for :func:`generate_scenario`'s ``weight_model``.
WEIGHT_MODELS: Final[dict[str, Callable[[np.random.Generator, int], list[int]]]] = {
    "lognormal": draw_weights,
    "epoch158": draw_epoch158_weights,
}


def select_by_weight_share(
    rng: np.random.Generator,
    weights: Sequence[int],
    share: float,
    exclude: Collection[int] = (),
    *,
    size_bias: float = 0.0,
    tolerance: float = SHARE_TOLERANCE,
) -> list[int]:
    """Indices (sorted) of a random set of nodes holding about ``share`` of the total weight.

    Nodes are visited in a random order and taken while they fit under
    ``share * (1 + tolerance)``; the walk stops as soon as the set holds at least
    ``share * (1 - tolerance)`` (so the count stays near what a random draw gives, instead of
    topping up with many small nodes). ``size_bias`` b > 0 favours large nodes: the order is a
    weighted random order with weights ``w ** b`` (b = 0: uniform order; b = 0.5 makes the chosen
    nodes ~1.6x the average size under lognormal sigma-1 weights, b = 1 ~2.7x). ``share`` >= 1
    takes every node not in ``exclude``, ``share`` <= 0 none. Always draws ``len(weights)``
    uniforms from ``rng``, whatever the arguments (keeps later draws stable).
    """
    u = rng.random(len(weights))
    candidates = [i for i in range(len(weights)) if i not in exclude]
    if share <= 0:
        return []
    if share >= 1:
        return candidates
    if size_bias:
        # Efraimidis-Spirakis: key u ** (1 / w) (here in logs, with 1 - u in (0, 1]).
        keys = [math.log(1.0 - float(u[i])) / weights[i] ** size_bias for i in candidates]
    else:
        keys = [float(u[i]) for i in candidates]
    order = [i for _, i in sorted(zip(keys, candidates, strict=True), reverse=True)]
    total = sum(weights)
    lower, upper = share * (1 - tolerance) * total, share * (1 + tolerance) * total
    taken: list[int] = []
    acc = 0
    for i in order:
        if acc + weights[i] <= upper:
            taken.append(i)
            acc += weights[i]
            if acc >= lower:
                break
    return sorted(taken)


def weight_share(scenario: Scenario, indices: Collection[int]) -> float:
    """Share of the scenario's total weight held by the participants at ``indices``."""
    held = sum(scenario.participants[i].weight for i in indices)
    return held / scenario.get_total_weight()


# --------------------------------------------------------------------------------------------
# The generator
# --------------------------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_range(
    knob: str, value: object, lo: float, hi: float, *, integer: bool = False
) -> tuple[float, float]:
    """Validate a (low, high) pair with lo <= low <= high <= hi."""
    ok_type = _is_int if integer else _is_real
    kind = "integers" if integer else "numbers"
    if not (isinstance(value, tuple | list) and len(value) == 2 and all(ok_type(v) for v in value)):
        raise ValueError(f"generate_scenario: {knob} must be a pair of {kind}, got {value!r}")
    a, b = float(value[0]), float(value[1])
    if not (math.isfinite(a) and math.isfinite(b) and lo <= a <= b <= hi):
        raise ValueError(
            f"generate_scenario: {knob} must satisfy {lo:g} <= low <= high <= {hi:g}, got {value!r}"
        )
    return a, b


def _check_knobs(
    name: object,
    seed: object,
    participants: object,
    blocks: object,
    epoch_length: object,
    arrivals_per_block: object,
    degraded_share: object,
    outage_share: object,
    capacity: object,
    expiration_blocks: object,
) -> None:
    def fail(knob: str, rule: str, value: object) -> None:
        raise ValueError(f"generate_scenario: {knob} must be {rule}, got {value!r}")

    if not isinstance(name, str) or not name:
        fail("name", "a non-empty string", name)
    if not _is_int(seed) or seed < 0:  # type: ignore[operator]
        fail("seed", "an integer >= 0", seed)
    for knob, value in (
        ("participants", participants),
        ("blocks", blocks),
        ("epoch_length", epoch_length),
        ("expiration_blocks", expiration_blocks),
    ):
        if not _is_int(value) or value < 1:  # type: ignore[operator]
            fail(knob, "an integer >= 1", value)
    if (
        not _is_real(arrivals_per_block)
        or not math.isfinite(arrivals_per_block)  # type: ignore[arg-type]
        or arrivals_per_block < 0  # type: ignore[operator]
    ):
        fail("arrivals_per_block", "a finite number >= 0", arrivals_per_block)
    for knob, value in (("degraded_share", degraded_share), ("outage_share", outage_share)):
        if not _is_real(value) or not 0.0 <= value <= 1.0:  # type: ignore[operator]
            fail(knob, "a number in [0, 1] (a share of the total weight)", value)
    if degraded_share + outage_share > 1.0:  # type: ignore[operator]
        raise ValueError(
            "generate_scenario: degraded_share + outage_share must be <= 1, "
            f"got {degraded_share!r} + {outage_share!r}"
        )
    if capacity is not None and (not _is_int(capacity) or capacity < 1):  # type: ignore[operator]
        fail("capacity", "None or an integer >= 1", capacity)


def generate_scenario(
    name: str,
    seed: int,
    participants: int = 150,
    blocks: int = 12000,
    epoch_length: int = 4000,
    arrivals_per_block: float = 4.6,
    degraded_share: float = 0.1,
    degraded_miss: tuple[float, float] = (0.15, 0.3),
    healthy_miss: tuple[float, float] = (0.005, 0.02),
    outage_share: float = 0.0,
    capacity: int | None = None,
    latency: tuple[int, int] = (1, 8),
    expiration_blocks: int = 150,
    *,
    selection_bias: float = 0.0,
    weight_model: str = "lognormal",
) -> Scenario:
    """A scenario with random weights and three kinds of nodes.

    * healthy: constant miss probability drawn uniformly from ``healthy_miss``;
    * degraded (nodes holding about ``degraded_share`` of the total weight, within 5%
      relative when the fleet allows; see :func:`select_by_weight_share`):
      constant miss probability drawn uniformly from ``degraded_miss`` from block 0;
    * outage (about ``outage_share`` of the weight, disjoint from the degraded nodes): healthy,
      then p = 1.0 for 300-1500 blocks starting at a node-specific (staggered) height in the first
      80% of the run, then healthy again.

    Every participant has latency range ``latency`` ([min, max] blocks, drawn per request by the
    simulator) and capacity ``capacity`` (None: unlimited). ``selection_bias`` (keyword-only,
    >= 0, an addition to the original knob list) makes the degraded and outage nodes larger
    than average (fewer nodes for the same weight share): it is ``size_bias`` of
    :func:`select_by_weight_share`. ``weight_model`` (keyword-only, a key of
    :data:`WEIGHT_MODELS`) picks the weights: ``"lognormal"`` (median ~10,000, sigma 1.0) or
    ``"epoch158"`` (shaped like mainnet epoch 158's). Probabilities are rounded to 4
    decimals. Knobs are validated (``ValueError`` naming the knob and the rule). Deterministic on
    one numpy build; save the result when exactness across machines matters.
    """
    _check_knobs(
        name,
        seed,
        participants,
        blocks,
        epoch_length,
        arrivals_per_block,
        degraded_share,
        outage_share,
        capacity,
        expiration_blocks,
    )
    d_lo, d_hi = _check_range("degraded_miss", degraded_miss, 0.0, 1.0)
    h_lo, h_hi = _check_range("healthy_miss", healthy_miss, 0.0, 1.0)
    lat_lo, lat_hi = _check_range("latency", latency, 1, MAX_LATENCY_BLOCKS, integer=True)
    if not _is_real(selection_bias) or not 0.0 <= selection_bias <= 4.0:
        raise ValueError(
            f"generate_scenario: selection_bias must be a number in [0, 4], got {selection_bias!r}"
        )

    draw = WEIGHT_MODELS.get(weight_model) if isinstance(weight_model, str) else None
    if draw is None:
        raise ValueError(
            f"generate_scenario: weight_model must be one of {', '.join(WEIGHT_MODELS)}, "
            f"got {weight_model!r}"
        )

    rng = np.random.default_rng(seed)
    n = participants
    # Every per-node vector is drawn for all nodes, in a fixed order, before the selections:
    # changing a share changes which nodes are affected, not the other nodes' draws.
    weights = draw(rng, n)
    healthy_p = rng.uniform(h_lo, h_hi, size=n)
    degraded_p = rng.uniform(d_lo, d_hi, size=n)
    outage_len = rng.integers(OUTAGE_BLOCKS[0], OUTAGE_BLOCKS[1] + 1, size=n)
    outage_pos = rng.uniform(0.0, 1.0, size=n)
    degraded = set(select_by_weight_share(rng, weights, degraded_share, size_bias=selection_bias))
    outage = set(
        select_by_weight_share(
            rng, weights, outage_share, exclude=degraded, size_bias=selection_bias
        )
    )

    specs: list[ParticipantSpec] = []
    for i in range(n):
        healthy = round(float(healthy_p[i]), 4)
        miss: tuple[tuple[int, float], ...]
        if i in degraded:
            miss = ((0, round(float(degraded_p[i]), 4)),)
        elif i in outage:
            length = max(1, min(int(outage_len[i]), blocks // 2))
            first = max(1, blocks // 10)
            last = max(first, int(blocks * 0.8) - length)
            start = first + int(outage_pos[i] * (last - first + 1))
            miss = ((0, healthy), (start, 1.0), (start + length, healthy))
        else:
            miss = ((0, healthy),)
        specs.append(
            ParticipantSpec(
                address=make_address(name, seed, i),
                weight=weights[i],
                latency_min=int(lat_lo),
                latency_max=int(lat_hi),
                miss=miss,
                capacity=capacity,
            )
        )
    total = sum(weights)
    description = (
        f"generated: {n} participants; {len(degraded)} degraded "
        f"({sum(weights[i] for i in degraded) / total:.1%} of weight) at "
        f"{d_lo:g}-{d_hi:g} miss; {len(outage)} with an outage "
        f"({sum(weights[i] for i in outage) / total:.1%} of weight); "
        f"others at {h_lo:g}-{h_hi:g}; latency {int(lat_lo)}-{int(lat_hi)} blocks; "
        f"capacity {capacity if capacity is not None else 'unlimited'}"
    )
    return Scenario(
        name=name,
        seed=seed,
        blocks=blocks,
        epoch_length=epoch_length,
        expiration_blocks=expiration_blocks,
        arrivals_per_block=float(arrivals_per_block),
        participants=tuple(specs),
        description=description,
    )
