"""Scenario files: the fleet of executors and how each behaves over time.

The format is specified in ``shared/spec/scenario-format.md``; the JSON Schema keepersim ships is
``keepersim/sim/schema/scenario.schema.json`` (see :func:`keepersim.sim.scenario_problems.get_schema_path`). Reading is strict:
an unknown key anywhere is an error naming the key, so a typo cannot silently change an
experiment. keepersim accepts a few optional keys beyond the spec (each documented in the schema):

* top level ``description`` (string, default ``""``),
* top level ``max_reselects`` (integer >= 0, default 2): how many times a requester re-selects
  after capacity pushback,
* top level ``pushback`` (boolean, default false): a participant over capacity declines with
  pushback (a neutral outcome) instead of silently missing,
* top level ``devshard`` (object, default absent): a share of the requests goes through
  devshard escrows instead of ``MsgStartInference`` (:mod:`keepersim.sim.devshard_spec`),
* per participant ``models`` (non-empty list of strings, default ``["default"]``),
* per participant ``capacity`` may be omitted (same as null),
* top level ``model_traffic``, ``events``, ``params``, ``source`` and per participant
  ``model_weights``: a fleet built from the chain's record (:mod:`keepersim.sim.scenario_extras`).

Validation runs the JSON Schema first, then the semantic rules (unique addresses; ``miss`` starts
at from_block 0 with strictly increasing from_blocks; latency ``[min, max]`` with min <= max;
finite numbers; the limits below). All problems found are reported together in one
:class:`ScenarioError`, each with the JSON location (e.g. ``participants[3].miss[1][0]``) and what
was expected.

Limits (``MAX_*``, defined in :mod:`keepersim.limits` with every other input limit, also in the
schema): a weight fits the chain's int32; a run holds at most
``MAX_EXPECTED_REQUESTS`` expected requests (``blocks x arrivals_per_block``) and
``MAX_PARTICIPANTS`` participants, so it finishes in about 10 minutes and well under 1 GB
(measured: mainnet_like, 55,000 requests, 7 s and 66 MB; 200,000 requests, 19 s and 79 MB). They are checked before any work: a scenario beyond them is
refused while it is read. Integers may be written as integral numbers (``1e3`` is 1000, as JSON
Schema counts them).
"""

from __future__ import annotations

import bisect
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from keepersim.inputs import InputError, get_json_type, read_json_input
from keepersim.limits import (
    MAX_ARRIVALS_PER_BLOCK,
    MAX_BLOCKS,
    MAX_CAPACITY,
    MAX_EPOCH_LENGTH,
    MAX_EXPECTED_REQUESTS,
    MAX_EXPIRATION_BLOCKS,
    MAX_LATENCY_BLOCKS,
    MAX_PARTICIPANTS,
    MAX_RESELECTS,
    MAX_SEED,
    MAX_WEIGHT,
)
from keepersim.sim.devshard_spec import DevshardSpec, dump_devshard, parse_devshard
from keepersim.sim.scenario_extras import ScenarioEvent
from keepersim.sim.scenario_problems import (
    SCENARIO_LIMITS,
    ScenarioError,
    compute_expected_requests_problem,
    get_schema,
    get_schema_path,
    is_bool,
    process_duplicate_keys,
    process_scenario_problems,
)

__all__ = [
    "get_json_type",
    "DEFAULT_EXPIRATION_BLOCKS",
    "DEFAULT_LATENCY_BLOCKS",
    "DEFAULT_MAX_RESELECTS",
    "DEFAULT_MODELS",
    "DEFAULT_PUSHBACK",
    "MAX_ARRIVALS_PER_BLOCK",
    "MAX_BLOCKS",
    "MAX_CAPACITY",
    "MAX_EPOCH_LENGTH",
    "MAX_EXPECTED_REQUESTS",
    "MAX_EXPIRATION_BLOCKS",
    "MAX_LATENCY_BLOCKS",
    "MAX_PARTICIPANTS",
    "MAX_RESELECTS",
    "MAX_SEED",
    "MAX_WEIGHT",
    "ParticipantSpec",
    "Scenario",
    "ScenarioError",
    "ScenarioEvent",
    "dump_scenario",
    "format_scenario_json",
    "get_schema",
    "get_schema_path",
    "load_scenario",
    "parse_scenario",
    "save_scenario",
]

DEFAULT_EXPIRATION_BLOCKS: Final = 150
DEFAULT_LATENCY_BLOCKS: Final = 2
DEFAULT_MAX_RESELECTS: Final = 2
DEFAULT_PUSHBACK: Final = False
DEFAULT_MODELS: Final[tuple[str, ...]] = ("default",)


# --------------------------------------------------------------------------------------------
# Data model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParticipantSpec:
    """One executor: its weight, latency range, miss-probability schedule and capacity.

    ``miss`` is a tuple of ``(from_block, p)``: ``p`` applies to requests assigned at heights
    ``from_block`` up to (excluding) the next entry's ``from_block``. ``capacity`` None means
    unlimited. Construction validates the invariants (raises :class:`ScenarioError`).
    """

    address: str
    weight: int
    latency_min: int
    latency_max: int
    miss: tuple[tuple[int, float], ...]
    capacity: int | None = None
    models: tuple[str, ...] = DEFAULT_MODELS
    #: ``(model, weight)``: its weight in that model's sub-group where not ``weight``.
    model_weights: tuple[tuple[str, int], ...] = ()
    _miss_from: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _miss_p: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        miss = tuple((int(b), float(p)) for b, p in self.miss)
        object.__setattr__(self, "miss", miss)
        object.__setattr__(self, "models", tuple(self.models))
        who = f"participant {self.address!r}"
        if not isinstance(self.address, str) or not self.address:
            raise ScenarioError(f"{who}: address must be a non-empty string")
        if is_bool(self.weight) or not isinstance(self.weight, int) or self.weight <= 0:
            raise ScenarioError(f"{who}: weight must be an integer > 0, got {self.weight!r}")
        if self.weight > MAX_WEIGHT:
            raise ScenarioError(
                f"{who}: weight {self.weight} is above the chain's int32 limit {MAX_WEIGHT}"
            )
        if not 1 <= self.latency_min <= self.latency_max <= MAX_LATENCY_BLOCKS:
            raise ScenarioError(
                f"{who}: latency must satisfy 1 <= min <= max <= {MAX_LATENCY_BLOCKS}, "
                f"got [{self.latency_min}, {self.latency_max}]"
            )
        if not miss or miss[0][0] != 0:
            raise ScenarioError(f"{who}: miss must start with from_block 0, got {miss!r}")
        for (b0, _), (b1, _) in zip(miss, miss[1:], strict=False):
            if b1 <= b0:
                raise ScenarioError(f"{who}: miss from_blocks must strictly increase, got {miss!r}")
        for _, p in miss:
            if not 0.0 <= p <= 1.0:  # also rejects NaN
                raise ScenarioError(f"{who}: miss probability must be in [0, 1], got {p!r}")
        if self.capacity is not None and (
            is_bool(self.capacity) or not isinstance(self.capacity, int) or self.capacity <= 0
        ):
            raise ScenarioError(f"{who}: capacity must be None or an integer > 0")
        if self.capacity is not None and self.capacity > MAX_CAPACITY:
            raise ScenarioError(
                f"{who}: capacity {self.capacity} is above the limit {MAX_CAPACITY}"
            )
        if not self.models or any(not isinstance(m, str) or not m for m in self.models):
            raise ScenarioError(f"{who}: models must be a non-empty tuple of non-empty strings")
        object.__setattr__(self, "_miss_from", tuple(b for b, _ in miss))
        object.__setattr__(self, "_miss_p", tuple(p for _, p in miss))

    def get_miss_probability(self, height: int) -> float:
        """Miss probability of a request assigned at ``height`` (heights < 0 count as 0)."""
        i = bisect.bisect_right(self._miss_from, height) - 1
        return self._miss_p[i if i >= 0 else 0]


@dataclass(frozen=True, slots=True)
class Scenario:
    """A whole scenario; see the module docstring and the spec for each field's meaning."""

    name: str
    seed: int
    blocks: int
    epoch_length: int
    expiration_blocks: int
    arrivals_per_block: float
    participants: tuple[ParticipantSpec, ...]
    max_reselects: int = DEFAULT_MAX_RESELECTS
    pushback: bool = DEFAULT_PUSHBACK
    description: str = ""
    #: The devshard path (None: every request is classic ``MsgStartInference`` traffic).
    devshard: DevshardSpec | None = None
    #: ``(from_block, factor)``: the arrival rate's factor from that block on (empty: 1).
    arrival_shape: tuple[tuple[int, float], ...] = ()
    #: ``(model, share)``: a request's model drawn with these shares (empty: uniform).
    model_traffic: tuple[tuple[str, float], ...] = ()
    events: tuple[ScenarioEvent, ...] = ()
    #: A patch of the chain's Params JSON merged onto the run's defaults (None: none).
    params: Mapping[str, Any] | None = field(default=None, hash=False)
    #: Where the scenario came from (no effect on a run).
    source: Mapping[str, Any] | None = field(default=None, hash=False)
    _total_weight: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "participants", tuple(self.participants))
        object.__setattr__(self, "arrivals_per_block", float(self.arrivals_per_block))
        who = f"scenario {self.name!r}"
        for knob in ("seed", "blocks", "epoch_length", "expiration_blocks", "max_reselects"):
            value = getattr(self, knob)
            if is_bool(value) or not isinstance(value, int):
                raise ScenarioError(f"{who}: {knob} must be an integer, got {value!r}")
        for knob in ("blocks", "epoch_length", "expiration_blocks"):
            if getattr(self, knob) <= 0:
                raise ScenarioError(f"{who}: {knob} must be > 0, got {getattr(self, knob)!r}")
        if self.max_reselects < 0:
            raise ScenarioError(f"{who}: max_reselects must be >= 0, got {self.max_reselects}")
        if self.seed < 0:
            raise ScenarioError(f"{who}: seed must be >= 0, got {self.seed}")
        for knob, limit in SCENARIO_LIMITS:
            if getattr(self, knob) > limit:
                raise ScenarioError(
                    f"{who}: {knob} {getattr(self, knob)} is above the limit {limit}"
                )
        if not (math.isfinite(self.arrivals_per_block) and self.arrivals_per_block >= 0):
            raise ScenarioError(
                f"{who}: arrivals_per_block must be a finite number >= 0, "
                f"got {self.arrivals_per_block!r}"
            )
        expected = self.blocks * self.arrivals_per_block
        if expected > MAX_EXPECTED_REQUESTS:
            raise ScenarioError(
                f"{who}: {compute_expected_requests_problem(self.blocks, expected)}"
            )
        if not self.participants:
            raise ScenarioError(f"{who}: needs at least one participant")
        if len(self.participants) > MAX_PARTICIPANTS:
            raise ScenarioError(
                f"{who}: {len(self.participants)} participants, above the limit {MAX_PARTICIPANTS}"
            )
        seen: set[str] = set()
        for p in self.participants:
            if p.address in seen:
                raise ScenarioError(f"{who}: duplicate participant address {p.address!r}")
            seen.add(p.address)
        object.__setattr__(self, "_total_weight", sum(p.weight for p in self.participants))

    def get_total_weight(self) -> int:
        """Sum of all participants' weights."""
        return self._total_weight


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


def parse_scenario(obj: object, source: str) -> Scenario:
    """Validate a decoded JSON value and build a :class:`Scenario`.

    ``source`` names where ``obj`` came from (a file path) in error messages. Raises
    :class:`ScenarioError` listing every problem found.
    """
    return _parse(obj, source)


def _parse(obj: object, source: str) -> Scenario:
    process_scenario_problems(obj, source)
    assert isinstance(obj, Mapping)
    try:
        return _build(obj)
    except ScenarioError as exc:  # pragma: no cover - the checks above should catch everything
        raise ScenarioError(f"{source}: {exc}") from exc


def _build(obj: Mapping[str, Any]) -> Scenario:
    participants: list[ParticipantSpec] = []
    for part in obj["participants"]:
        latency = part.get("latency_blocks", DEFAULT_LATENCY_BLOCKS)
        if isinstance(latency, list):
            lat_min, lat_max = int(latency[0]), int(latency[1])
        else:
            lat_min = lat_max = int(latency)
        capacity = part.get("capacity")
        participants.append(
            ParticipantSpec(
                address=part["address"],
                weight=int(part["weight"]),
                latency_min=lat_min,
                latency_max=lat_max,
                miss=tuple((int(b), float(p)) for b, p in part["miss"]),
                capacity=None if capacity is None else int(capacity),
                models=tuple(part.get("models", DEFAULT_MODELS)),
                model_weights=tuple(
                    (m, int(w)) for m, w in sorted(part.get("model_weights", {}).items())
                ),
            )
        )
    return Scenario(
        name=obj["name"],
        seed=int(obj["seed"]),
        blocks=int(obj["blocks"]),
        epoch_length=int(obj["epoch_length"]),
        expiration_blocks=int(obj.get("expiration_blocks", DEFAULT_EXPIRATION_BLOCKS)),
        arrivals_per_block=float(obj["arrivals_per_block"]),
        participants=tuple(participants),
        max_reselects=int(obj.get("max_reselects", DEFAULT_MAX_RESELECTS)),
        pushback=bool(obj.get("pushback", DEFAULT_PUSHBACK)),
        description=obj.get("description", ""),
        devshard=None if obj.get("devshard") is None else parse_devshard(obj["devshard"]),
        arrival_shape=tuple((int(b), float(f)) for b, f in obj.get("arrival_shape", ())),
        model_traffic=tuple((m, float(v)) for m, v in obj.get("model_traffic", {}).items()),
        events=tuple(
            ScenarioEvent(int(e["height"]), e["address"], e["kind"], e["reason"])
            for e in obj.get("events", ())
        ),
        params=obj.get("params"),
        source=obj.get("source"),
    )


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read, validate and build a scenario file (UTF-8 JSON).

    Raises :class:`ScenarioError` naming the file: unreadable file, invalid JSON (with line and
    column), duplicate keys, schema or semantic problems (with their JSON locations).
    """
    source = os.fspath(path)
    try:  # NaN and Infinity pass, to be named by their field (_semantic_problems)
        obj = read_json_input(source, "scenario file", allow_nan=True, allow_duplicates=True)
    except InputError as exc:
        raise ScenarioError(str(exc)) from exc
    process_duplicate_keys(obj, source)
    return _parse(obj, source)


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def _dump_participant(p: ParticipantSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"address": p.address, "weight": p.weight}
    out["latency_blocks"] = (
        p.latency_min if p.latency_min == p.latency_max else [p.latency_min, p.latency_max]
    )
    out["miss"] = [[b, prob] for b, prob in p.miss]
    out["capacity"] = p.capacity
    if p.models != DEFAULT_MODELS:
        out["models"] = list(p.models)
    if p.model_weights:
        out["model_weights"] = dict(p.model_weights)
    return out


def dump_scenario(s: Scenario) -> dict[str, Any]:
    """The scenario as a JSON-ready dict; ``parse_scenario(dump_scenario(s), ...) == s``.

    keepersim's extension keys are written only when they differ from their defaults, so a
    scenario that uses none of them is a plain spec-format file.
    """
    out: dict[str, Any] = {"name": s.name}
    if s.description:
        out["description"] = s.description
    out.update(
        {
            "seed": s.seed,
            "blocks": s.blocks,
            "epoch_length": s.epoch_length,
            "expiration_blocks": s.expiration_blocks,
            "arrivals_per_block": s.arrivals_per_block,
        }
    )
    if s.max_reselects != DEFAULT_MAX_RESELECTS:
        out["max_reselects"] = s.max_reselects
    if s.pushback != DEFAULT_PUSHBACK:
        out["pushback"] = s.pushback
    if s.devshard is not None:
        out["devshard"] = dump_devshard(s.devshard)
    if s.arrival_shape:
        out["arrival_shape"] = [[b, f] for b, f in s.arrival_shape]
    if s.model_traffic:
        out["model_traffic"] = dict(s.model_traffic)
    if s.params is not None:
        out["params"] = s.params
    if s.source is not None:
        out["source"] = s.source
    if s.events:
        out["events"] = [e.to_dict() for e in s.events]
    out["participants"] = [_dump_participant(p) for p in s.participants]
    return out


def format_scenario_json(s: Scenario) -> str:
    """The scenario as JSON text: indented, one participant per line (diff-friendly)."""
    obj = dump_scenario(s)
    participants = obj.pop("participants")
    events = obj.pop("events", None)
    shape = obj.pop("arrival_shape", None)
    head = json.dumps(obj, indent=2, ensure_ascii=False)[:-2]
    if shape:
        head += ',\n  "arrival_shape": ' + json.dumps(shape)
    if events:
        lines = ",\n".join("    " + json.dumps(e, ensure_ascii=False) for e in events)
        head += ',\n  "events": [\n' + lines + "\n  ]"
    rows = ",\n".join(
        "    " + json.dumps(p, ensure_ascii=False, allow_nan=False) for p in participants
    )
    return head + ',\n  "participants": [\n' + rows + "\n  ]\n}\n"


def save_scenario(s: Scenario, path: str | os.PathLike[str]) -> None:
    """Write the scenario as a JSON file (see :func:`format_scenario_json`).

    Saving matters for exactness: built-in and generated scenarios are reproducible only on the
    same numpy build; a saved file reproduces the same fleet everywhere.
    """
    from keepersim.outputs import write_text_atomic

    write_text_atomic(path, format_scenario_json(s))
