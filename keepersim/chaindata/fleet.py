"""A scenario from one epoch the chain recorded (``keepersim scenarios from-chain``).

What comes from where (docs/mainnet-epochs.md says why):

* **Fleet**: every member of the epoch's model sub-groups with a weight > 0. Its weight in each
  model is the sub-group's (``epoch_group_data_N__MODEL.json``): ``weight`` is that of its first
  model (models ordered by traffic share), ``model_weights`` the others where they differ.
  Weights never come from the recorded counts.
* **Heights**: the run covers ``effective_block_height .. last_block_height``; run height ``h`` is
  chain height ``effective_block_height - 1 + h`` (``source.height_offset`` holds
  ``effective_block_height - 1``). ``epoch_length`` is the run's blocks + 1: no boundary inside.
* **Traffic**: the parent group's ``number_of_requests`` counts the epoch's *completed*
  inferences (the validation end block increments it once per finished inference,
  x/inference/module/inference_validation_endblock.go:78 at 8a35022b); the requests are those
  and the misses: ``number_of_requests x (inferences + misses) / inferences`` of the summaries'
  totals (totals only), over the epoch's blocks (``arrivals_per_block``), split among models by
  their sub-groups' total weight (the sub-groups' own ``number_of_requests`` are 0 in every file).
  When the summaries count more than :data:`DEVSHARD_RATIO` times as many inferences as
  ``number_of_requests`` (from epoch 251: devshard escrows; 248: 1.24x), the traffic is the
  summaries' total, and (``selection_path="auto"``, the default) the scenario sends the
  devshard part through the devshard path (:mod:`keepersim.chaindata.devshard_fleet`);
  ``"classic"`` spreads it as ``MsgStartInference`` traffic and says the path is not modelled.
  ``traffic="requests"`` or ``"summaries"`` forces one source. ``profile="trend"`` (default)
  shapes the rate over the epoch geometrically from the previous epoch's requests to this
  one's (``arrival_shape``; the group's ``previous_epoch_requests``): the one exponential rate
  that is continuous across the epoch boundary and whose per-epoch totals are the two recorded
  ones (clients do not see epochs; the chain itself carries the previous epoch's count as the
  traffic level into the new one, inference_validation_endblock.go:79-82 at d8b8e907).
  ``"flat"`` keeps the rate constant (a step at each boundary). The trend needs both totals
  of the same measure, ``number_of_requests``: an epoch whose traffic is the summaries' total
  runs flat.
* **Misses**: participant ``a``'s probability is ``missed_a / (inference_count_a +
  missed_a)``: the chain counts a finished inference in ``inference_count`` and an expired one in
  ``missed_requests`` only (x/inference/keeper/msg_server_finish_inference.go:315 at 8a35022b;
  module/module.go:378 at ee730031), and its downtime check takes their sum as the requests
  (keeper/accountsettle.go:116 at ee730031). No recorded request: the fleet's rate.
  When in the epoch it missed is not recorded: :data:`MISS_TIMINGS`.
* **Exclusions**: each recorded one is an ``events`` entry at its mapped height (before the first
  block: height 1). Confirmation-PoC rounds are recorded in ``source`` only: keepersim models no
  confirmation PoC; its effect on selection is the exclusions it caused, which are replayed.
* **Params**: :func:`~keepersim.chaindata.epoch_params.compute_epoch_params_patch`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from keepersim.chaindata.devshard_fleet import (
    DEVSHARD_PATH,
    SELECTION_PATHS,
    compute_devshard_key,
    is_devshard_epoch,
)
from keepersim.chaindata.epoch_folder import (
    ChainDataError,
    EpochRecord,
    load_epoch_source,
)
from keepersim.chaindata.epoch_params import compute_epoch_params_patch, get_epoch_timing
from keepersim.sim.scenario import Scenario, ScenarioError, parse_scenario
from keepersim.types.epoch_layout import compute_model_file_name

__all__ = [
    "DEFAULT_TRAFFIC_PROFILE",
    "DEVSHARD_RATIO",
    "MISS_TIMINGS",
    "TRAFFIC_PROFILES",
    "TRAFFIC_SOURCES",
    "build_epoch_scenario",
    "compute_miss_schedule",
    "compute_model_traffic",
    "get_epoch_numbers",
    "get_epoch_traffic",
    "load_epoch_scenarios",
]

#: ``constant``: p all epoch; ``bursts``: the same expected misses concentrated in
#: :data:`BURST_WINDOWS` windows covering :data:`BURST_SHARE` of the epoch, placed
#: deterministically from the seed and the address.
MISS_TIMINGS: Final = ("constant", "bursts")
#: ``trend`` (the default): a geometric ramp; ``flat``: the same rate all epoch (see the module
#: docstring).
TRAFFIC_PROFILES: Final = ("trend", "flat")
DEFAULT_TRAFFIC_PROFILE: Final = "trend"
#: Segments of a ``trend`` arrival shape.
TREND_SEGMENTS: Final = 100
TRAFFIC_SOURCES: Final = ("auto", "requests", "summaries")
#: Summaries counting more than this times the group's requests: traffic outside
#: MsgStartInference (devshard), taken from the summaries.
DEVSHARD_RATIO: Final = 1.1
BURST_WINDOWS: Final = 3
BURST_SHARE: Final = 0.1
NOT_MODELLED: Final = "not modelled: devshard"


def get_epoch_traffic(record: EpochRecord, traffic: str = "auto") -> tuple[float, str]:
    """(requests of the epoch, selection path): ``"MsgStartInference"`` or
    :data:`NOT_MODELLED` (see the module docstring)."""
    recorded = record.get_recorded_requests()
    done = record.get_recorded_inferences()
    if traffic == "requests" or (
        traffic == "auto" and done <= DEVSHARD_RATIO * record.number_of_requests
    ):
        scale = recorded / done if done else 1.0
        return record.number_of_requests * scale, "MsgStartInference"
    return float(recorded), NOT_MODELLED


def compute_trend_shape(previous: int, current: int, blocks: int) -> list[list[float]]:
    """A geometric arrival shape from the previous epoch's rate toward the next: factor
    ``r**x / mean`` over the epoch (``x`` in [0, 1), ``r = current / previous``), in
    :data:`TREND_SEGMENTS` steps whose block-weighted mean is 1. Flat when either is 0."""
    segments = min(TREND_SEGMENTS, blocks)
    if previous <= 0 or current <= 0 or segments < 2:
        return [[0, 1.0]]
    ratio = current / previous
    starts = [1 + (blocks * k) // segments for k in range(segments)]
    ends = [*starts[1:], blocks + 1]
    raw = [ratio ** ((s - 1 + (e - s) / 2) / blocks) for s, e in zip(starts, ends, strict=True)]
    mean = sum(f * (e - s) for f, s, e in zip(raw, starts, ends, strict=True)) / blocks
    shape = [[s, f / mean] for s, f in zip(starts, raw, strict=True)]
    shape[0][0] = 0
    return shape


def compute_model_traffic(record: EpochRecord) -> list[tuple[str, float]]:
    """Each model with members and its share of requests, largest first (ties by name): by the
    sub-groups' own ``number_of_requests`` when any is set, else by their total weight (their
    ``number_of_requests`` are 0 in every file seen so far)."""
    totals = {m: sum(w for _, w in members) for m, members in record.subgroups.items()}
    if any(record.subgroup_requests.values()):
        totals = {m: record.subgroup_requests.get(m, 0) if t > 0 else 0 for m, t in totals.items()}
    shares = {m: float(t) for m, t in totals.items() if t > 0}
    if not shares:  # the set requests fall on models without members: back to weights
        shares = {m: float(sum(w for _, w in ms)) for m, ms in record.subgroups.items()}
        shares = {m: s for m, s in shares.items() if s > 0}
    total = sum(shares.values())
    if total <= 0:
        return []
    return sorted(((m, s / total) for m, s in shares.items()), key=lambda x: (-x[1], x[0]))


def _unit(*parts: object) -> float:
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def compute_miss_schedule(
    p: float, blocks: int, timing: str, seed: int, address: str
) -> list[list[float]]:
    """The ``miss`` entries of a participant whose requests miss with probability ``p`` on
    average over ``blocks`` (``timing``: :data:`MISS_TIMINGS`)."""
    if timing == "constant" or p <= 0.0 or blocks < 2 * BURST_WINDOWS:
        return [[0, p]]
    segment = blocks // BURST_WINDOWS
    width = max(1, round(blocks * BURST_SHARE / BURST_WINDOWS))
    width = min(width, segment)
    covered = width * BURST_WINDOWS / blocks
    p_in = min(1.0, p / covered)
    p_out = max(0.0, (p - covered * p_in) / (1.0 - covered)) if covered < 1 else p_in
    out: list[list[float]] = [[0, p_out]]
    for k in range(BURST_WINDOWS):
        start = 1 + k * segment + int(_unit(seed, address, "burst", k) * (segment - width + 1))
        if start <= out[-1][0]:
            start = int(out[-1][0]) + 1
        out.append([start, p_in])
        out.append([start + width, p_out])
    merged: list[list[float]] = []
    for entry in out:
        if merged and merged[-1][0] == entry[0]:
            merged[-1] = entry
        elif not merged or merged[-1][1] != entry[1]:
            merged.append(entry)
    return merged


def build_epoch_scenario(
    record: EpochRecord,
    *,
    seed: int = 1,
    miss_timing: str = "constant",
    traffic: str = "auto",
    profile: str = DEFAULT_TRAFFIC_PROFILE,
    selection_path: str = "auto",
) -> Scenario:
    """The scenario of one recorded epoch (see the module docstring)."""
    if selection_path not in SELECTION_PATHS:
        raise ValueError(f"selection path {selection_path!r}: expected one of {SELECTION_PATHS}")
    if profile not in TRAFFIC_PROFILES:
        raise ValueError(f"traffic profile {profile!r}: expected one of {TRAFFIC_PROFILES}")
    if miss_timing not in MISS_TIMINGS:
        raise ValueError(f"miss timing {miss_timing!r}: expected one of {MISS_TIMINGS}")
    if traffic not in TRAFFIC_SOURCES:
        raise ValueError(f"traffic {traffic!r}: expected one of {TRAFFIC_SOURCES}")
    blocks = record.blocks
    offset = record.effective_block_height - 1
    requests, path = get_epoch_traffic(record, traffic)
    devshard = None
    if path == NOT_MODELLED and selection_path == "auto" and is_devshard_epoch(record):
        devshard, path = compute_devshard_key(record), DEVSHARD_PATH
    if path != "MsgStartInference":
        profile = "flat"  # the trend's totals measure MsgStartInference traffic only
    shares = compute_model_traffic(record)
    order = [m for m, _ in shares]
    weights: dict[str, dict[str, int]] = {}
    for model in order:
        for address, weight in record.subgroups[model]:
            if weight > 0:
                weights.setdefault(address, {})[model] = weight
    if not weights:
        names = ", ".join(compute_model_file_name(record.epoch, m) for m in record.subgroups)
        raise ChainDataError(
            f"{record.folder}: no sub-group member with a weight > 0 "
            f"({names or 'the parent group lists no sub_group_models'}): no fleet to build"
        )
    counts = {s.address: (s.inference_count, s.missed_requests) for s in record.summaries}
    total_done = sum(c[0] for c in counts.values())
    total_missed = sum(c[1] for c in counts.values())
    fleet_p = total_missed / (total_done + total_missed) if total_done + total_missed else 0.0
    participants: list[dict[str, Any]] = []
    for address, by_model in weights.items():
        done, missed = counts.get(address, (0, 0))
        p = missed / (done + missed) if done + missed else fleet_p
        models = list(by_model)
        first = by_model[models[0]]
        part: dict[str, Any] = {
            "address": address,
            "weight": first,
            "miss": compute_miss_schedule(p, blocks, miss_timing, seed, address),
            "capacity": None,
            "models": models,
        }
        others = {m: w for m, w in by_model.items() if w != first}
        if others:
            part["model_weights"] = others
        participants.append(part)
    events = [
        {
            "height": min(blocks, max(1, x.height - offset)),
            "address": x.address,
            "kind": "exclude",
            "reason": x.reason,
        }
        for x in sorted(record.exclusions, key=lambda x: (x.height, x.address))
        if x.address in weights and x.height <= record.last_block_height
    ]
    description = (
        f"Gonka mainnet epoch {record.epoch} as the chain recorded it: {len(participants)} "
        f"participants, {requests:.0f} requests over {blocks} blocks "
        f"(chain heights {record.effective_block_height}..{record.last_block_height}), "
        f"{len(events)} exclusions replayed, misses {miss_timing}, traffic {profile}; "
        f"selection path: {path}."
    )
    if devshard is not None:
        description += (
            f" The summaries count {record.get_recorded_requests()} requests against the "
            f"group's {record.number_of_requests}: a share {devshard['share']} goes through "
            "devshard escrows (slots sampled by weight at escrow creation, nonce round-robin)."
        )
    if path == NOT_MODELLED:
        description += (
            f" The summaries count {record.get_recorded_requests()} requests against the "
            f"group's {record.number_of_requests}: most went through devshard escrows "
            "(MsgCreateDevshardEscrow samples its slots by weight), not MsgStartInference; "
            "here they are spread as MsgStartInference traffic."
        )
    data: dict[str, Any] = {
        "name": f"mainnet-epoch-{record.epoch}",
        "description": description,
        "seed": seed,
        "blocks": blocks,
        "epoch_length": blocks + 1,
        "expiration_blocks": _get_expiration(record),
        "arrivals_per_block": requests / blocks,
        "model_traffic": dict(shares),
        "params": compute_epoch_params_patch(record.params, record.folder / "params.json"),
        "source": _get_source(record, offset, path, miss_timing, traffic, requests, profile),
        "events": events,
        "participants": participants,
    }
    if devshard is not None:
        data["devshard"] = devshard
    if len(shares) <= 1:
        del data["model_traffic"]
    if profile == "trend":
        shape = compute_trend_shape(
            record.previous_epoch_requests, record.number_of_requests, blocks
        )
        if len(shape) > 1:
            data["arrival_shape"] = shape
    try:
        return parse_scenario(data, f"{record.folder} (built scenario)")
    except ScenarioError as exc:
        more = f" (and {len(exc.problems) - 1} more)" if len(exc.problems) > 1 else ""
        raise ChainDataError(
            f"{record.folder}: the epoch does not fit a scenario: {exc.problems[0]}{more}"
        ) from exc


def _get_expiration(record: EpochRecord) -> int:
    validation = record.params.get("validation_params")
    value = validation.get("expiration_blocks") if isinstance(validation, Mapping) else None
    return int(value) if isinstance(value, str | int) and str(value).isdigit() else 150


def _get_source(
    record: EpochRecord,
    offset: int,
    path: str,
    miss_timing: str,
    traffic: str,
    requests: float,
    profile: str,
) -> dict[str, Any]:
    return {
        "kind": "gonka-epoch",
        "epoch": record.epoch,
        "folder": record.folder.name,
        "files": dict(record.files),
        "effective_block_height": record.effective_block_height,
        "last_block_height": record.last_block_height,
        "height_offset": offset,
        "number_of_requests": record.number_of_requests,
        "recorded_requests": record.get_recorded_requests(),
        "previous_epoch_requests": record.previous_epoch_requests,
        "traffic": {"option": traffic, "requests": requests, "profile": profile},
        "selection_path": path,
        "miss_timing": miss_timing,
        "epoch_params": get_epoch_timing(record.params),
        "confirmation_poc_events": [dict(e) for e in record.cpoc_events],
    }


def get_epoch_numbers(text: str) -> Sequence[int]:
    """``A-B`` or ``A`` (an --epochs value) as the epochs it names; ValueError otherwise."""
    lo, sep, hi = text.partition("-")
    if not lo.isdigit() or (sep and not hi.isdigit()):
        raise ValueError(f"expected A-B or A (epoch numbers), got {text!r}")
    first, last = int(lo), int(hi) if sep else int(lo)
    if last < first:
        raise ValueError(f"expected A <= B, got {text!r}")
    if last - first > 100_000:
        raise ValueError(f"at most 100,000 epochs, got {text!r}")
    return range(first, last + 1)


def load_epoch_scenarios(
    path: str | Path,
    epochs: Sequence[int] | None = None,
    *,
    seed: int = 1,
    miss_timing: str = "constant",
    traffic: str = "auto",
    profile: str = DEFAULT_TRAFFIC_PROFILE,
    selection_path: str = "auto",
) -> list[Scenario]:
    """The scenario of each epoch folder of ``path`` (an ``epoch_N`` folder or one holding
    them; ``epochs`` picks some). Raises ChainDataError naming a bad file."""
    return [
        build_epoch_scenario(
            r,
            seed=seed,
            miss_timing=miss_timing,
            traffic=traffic,
            profile=profile,
            selection_path=selection_path,
        )
        for r in load_epoch_source(path, epochs)
    ]
