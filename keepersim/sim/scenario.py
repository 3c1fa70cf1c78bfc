"""Scenario files: the fleet of executors and how each behaves over time.

The format is specified in ``shared/spec/scenario-format.md``; the JSON Schema keepersim ships is
``keepersim/sim/schema/scenario.schema.json`` (see :func:`get_schema_path`). Reading is strict:
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
import difflib
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Final

import jsonschema

from keepersim.inputs import (
    InputError,
    find_duplicate_keys,
    format_json_path,
    get_json_type,
    read_json_input,
)
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
from keepersim.sim.scenario_extras import ScenarioEvent, get_extra_problems

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


_SCHEMA_FILE: Final = "scenario.schema.json"
_MAX_LISTED_PROBLEMS: Final = 50

_Path = tuple[str | int, ...]
_Problem = tuple[_Path, str]


class ScenarioError(ValueError):
    """An invalid scenario (file). ``problems`` holds one ``"location: message"`` per problem."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems: tuple[str, ...] = tuple(problems) if problems else (message,)


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
        if _is_bool(self.weight) or not isinstance(self.weight, int) or self.weight <= 0:
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
            _is_bool(self.capacity) or not isinstance(self.capacity, int) or self.capacity <= 0
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
            if _is_bool(value) or not isinstance(value, int):
                raise ScenarioError(f"{who}: {knob} must be an integer, got {value!r}")
        for knob in ("blocks", "epoch_length", "expiration_blocks"):
            if getattr(self, knob) <= 0:
                raise ScenarioError(f"{who}: {knob} must be > 0, got {getattr(self, knob)!r}")
        if self.max_reselects < 0:
            raise ScenarioError(f"{who}: max_reselects must be >= 0, got {self.max_reselects}")
        if self.seed < 0:
            raise ScenarioError(f"{who}: seed must be >= 0, got {self.seed}")
        for knob, limit in _SCENARIO_LIMITS:
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
            raise ScenarioError(f"{who}: {_expected_requests_problem(self.blocks, expected)}")
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


_SCENARIO_LIMITS: Final = (
    ("seed", MAX_SEED),
    ("blocks", MAX_BLOCKS),
    ("epoch_length", MAX_EPOCH_LENGTH),
    ("expiration_blocks", MAX_EXPIRATION_BLOCKS),
    ("max_reselects", MAX_RESELECTS),
    ("arrivals_per_block", MAX_ARRIVALS_PER_BLOCK),
)


def _expected_requests_problem(blocks: float, expected: float) -> str:
    return (
        f"blocks x arrivals_per_block = {expected:.6g} expected requests ({_show(blocks)} blocks), "
        f"above the limit {MAX_EXPECTED_REQUESTS:,}; use fewer blocks or arrivals"
    )


# --------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------


def get_schema_path() -> Path:
    """Path of the shipped JSON Schema (draft 2020-12) of the scenario format."""
    return Path(str(resources.files("keepersim.sim").joinpath("schema", _SCHEMA_FILE)))


@cache
def _schema_text() -> str:
    return resources.files("keepersim.sim").joinpath("schema", _SCHEMA_FILE).read_text("utf-8")


def get_schema() -> dict[str, Any]:
    """A fresh copy of the scenario JSON Schema."""
    schema: dict[str, Any] = json.loads(_schema_text())
    return schema


@cache
def _validator() -> Any:
    schema = get_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


# --------------------------------------------------------------------------------------------
# Error messages
# --------------------------------------------------------------------------------------------


def _is_bool(value: object) -> bool:
    return isinstance(value, bool)


def _is_int(value: object) -> bool:
    """An integer in the JSON Schema sense (1.0 counts; booleans do not)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _format_location(path: Iterable[str | int]) -> str:
    return format_json_path(path)


def _show(value: object) -> str:
    try:
        text = json.dumps(value, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _pair_name(path: _Path) -> str | None:
    """What a 2-item list at ``path`` holds, for messages."""
    if path and path[-1] == "latency_blocks":
        return "[min, max]"
    if len(path) >= 2 and path[-2] == "miss" and isinstance(path[-1], int):
        return "[from_block, p]"
    return None


def _bounds(schema: Mapping[str, Any]) -> str:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if hi is not None and hi > 1:
        hi = None  # a size limit, reported on its own (see _schema_problems), not a range
    if lo is not None and hi is not None:
        return f" in [{lo}, {hi}]"
    if schema.get("exclusiveMinimum") is not None:
        return f" > {schema['exclusiveMinimum']}"
    if lo is not None:
        return f" >= {lo}"
    if hi is not None:
        return f" <= {hi}"
    return ""


def _describe(schema: Mapping[str, Any], path: _Path) -> str:
    """What a value matching ``schema`` looks like, e.g. 'an integer > 0 or null'."""
    types = schema.get("type", [])
    types = [types] if isinstance(types, str) else list(types)
    parts: list[str] = []
    for t in types:
        if t in ("integer", "number"):
            parts.append(("an integer" if t == "integer" else "a number") + _bounds(schema))
        elif t == "array":
            pair = _pair_name(path)
            if pair is not None:
                parts.append(f"a list {pair}")
            elif schema.get("minItems", 0) >= 1:
                parts.append("a non-empty list")
            else:
                parts.append("a list")
        elif t == "string":
            parts.append("a non-empty string" if schema.get("minLength", 0) >= 1 else "a string")
        elif t == "boolean":
            parts.append("a boolean (true or false)")
        elif t == "object":
            parts.append("an object")
        elif t == "null":
            parts.append("null")
    return " or ".join(parts) if parts else "a valid value"


def _schema_problems(error: Any) -> list[_Problem]:
    """Translate one jsonschema ValidationError into located, readable problems."""
    path: _Path = tuple(error.absolute_path)
    keyword: str = error.validator
    schema: Mapping[str, Any] = error.schema
    instance: Any = error.instance
    got = f"got {get_json_type(instance)} {_show(instance)}"
    if keyword == "additionalProperties" and isinstance(instance, Mapping):
        allowed = sorted(schema.get("properties", {}))
        problems: list[_Problem] = []
        for key in instance:
            if key in allowed:
                continue
            close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
            hint = (
                f" (did you mean {close[0]!r}?)" if close else f" (allowed: {', '.join(allowed)})"
            )
            problems.append((path, f"unknown key {key!r}{hint}"))
        return problems
    if keyword == "required" and isinstance(instance, Mapping):
        return [
            (path, f"missing required key {key!r}")
            for key in error.validator_value
            if key not in instance
        ]
    if keyword == "type":
        return [(path, f"expected {_describe(schema, path)}, {got}")]
    if keyword == "maximum" and not _is_bool(instance) and schema["maximum"] > 1:
        reason = "the chain's int32 limit" if path and path[-1] == "weight" else "the limit"
        return [(path, f"{_show(instance)} is above {reason} {schema['maximum']}")]
    if keyword == "maxItems" and path == ("participants",):
        n = len(instance) if isinstance(instance, Sized) else "?"
        return [(path, f"{n} participants, above the limit {MAX_PARTICIPANTS}")]
    if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return [(path, f"expected {_describe(schema, path)}, got {_show(instance)}")]
    if keyword in ("minItems", "maxItems", "items", "prefixItems"):
        n = len(instance) if isinstance(instance, Sized) else "?"
        pair = _pair_name(path)
        if pair is not None:
            return [(path, f"expected a list of exactly 2 items {pair}, got {n} items")]
        if keyword == "minItems" and schema.get("minItems") == 1:
            what = "participant" if path == ("participants",) else "item"
            return [(path, f"expected a non-empty list (at least one {what})")]
        return [(path, f"expected {_describe(schema, path)}, got {n} items")]
    if keyword == "minLength":
        return [(path, f"expected a non-empty string, got {_show(instance)}")]
    if keyword == "uniqueItems":
        return [(path, f"expected distinct items (no duplicates), got {_show(instance)}")]
    return [(path, str(error.message))]


def _semantic_problems(obj: object) -> list[_Problem]:
    """Rules the schema cannot express. Defensive: runs on any object, checks what it can."""
    problems: list[_Problem] = []
    if not isinstance(obj, Mapping):
        return problems
    arrivals = obj.get("arrivals_per_block")
    seed = obj.get("seed")
    if _is_int(seed) and not 0 <= seed <= MAX_SEED:  # type: ignore[operator]
        problems.append((("seed",), f"expected an integer in [0, 2^63-1], got {_show(seed)}"))
    blocks = obj.get("blocks")
    if (
        isinstance(blocks, int | float)
        and _is_int(blocks)
        and isinstance(arrivals, int | float)
        and not _is_bool(arrivals)
        and blocks <= MAX_BLOCKS  # else that limit is the one reported
        and 0 <= arrivals <= MAX_ARRIVALS_PER_BLOCK
        and blocks * arrivals > MAX_EXPECTED_REQUESTS
    ):
        problems.append((("blocks",), _expected_requests_problem(blocks, blocks * arrivals)))
    participants = obj.get("participants")
    if not isinstance(participants, list):
        return problems
    first_use: dict[str, int] = {}
    for i, part in enumerate(participants):
        if not isinstance(part, Mapping):
            continue
        base: _Path = ("participants", i)
        address = part.get("address")
        if isinstance(address, str):
            if address in first_use:
                problems.append(
                    (
                        (*base, "address"),
                        f"duplicate address {address!r} "
                        f"(already used by participants[{first_use[address]}]); "
                        "expected unique addresses",
                    )
                )
            else:
                first_use[address] = i
        latency = part.get("latency_blocks")
        if (
            isinstance(latency, list)
            and len(latency) == 2
            and all(_is_int(x) for x in latency)
            and latency[0] > latency[1]
        ):
            problems.append(
                (
                    (*base, "latency_blocks"),
                    f"expected [min, max] with min <= max, got {_show(latency)}",
                )
            )
        miss = part.get("miss")
        if not isinstance(miss, list):
            continue
        previous: float | None = None
        for j, entry in enumerate(miss):
            if not isinstance(entry, list) or not entry:
                previous = None
                continue
            from_block = entry[0]
            if not _is_int(from_block):
                previous = None
                continue
            if j == 0 and from_block > 0:
                problems.append(
                    (
                        (*base, "miss", 0, 0),
                        f"expected the first from_block to be 0, got {_show(from_block)}",
                    )
                )
            if previous is not None and from_block <= previous:
                problems.append(
                    (
                        (*base, "miss", j, 0),
                        f"expected from_block > {_show(previous)} "
                        f"(from_blocks must strictly increase), got {_show(from_block)}",
                    )
                )
            previous = from_block
    return problems


def _find_nonfinite(value: object, path: _Path) -> Iterable[tuple[_Path, float]]:
    """``(path, value)`` of every NaN or infinite number in a decoded JSON value."""
    if isinstance(value, float) and not math.isfinite(value):
        yield path, value
    elif isinstance(value, Mapping):
        for key, child in value.items():
            yield from _find_nonfinite(child, (*path, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _find_nonfinite(child, (*path, i))


def _sort_key(problem: _Problem) -> tuple[tuple[tuple[int, int, str], ...], str]:
    path, message = problem
    return (
        tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in path),
        message,
    )


def _raise_problems(source: str, problems: list[_Problem]) -> None:
    unique = sorted(set(problems), key=_sort_key)
    lines = [f"{_format_location(path)}: {message}" for path, message in unique]
    if len(lines) == 1:
        raise ScenarioError(f"{source}: {lines[0]}", lines)
    shown = lines[:_MAX_LISTED_PROBLEMS]
    text = f"{source}: {len(lines)} problems:\n" + "\n".join(f"  {line}" for line in shown)
    if len(lines) > len(shown):
        text += f"\n  ... and {len(lines) - len(shown)} more"
    raise ScenarioError(text, lines)


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


def parse_scenario(obj: object, source: str) -> Scenario:
    """Validate a decoded JSON value and build a :class:`Scenario`.

    ``source`` names where ``obj`` came from (a file path) in error messages. Raises
    :class:`ScenarioError` listing every problem found.
    """
    return _parse(obj, source, [])


def _parse(obj: object, source: str, problems: list[_Problem]) -> Scenario:
    problems = list(problems)
    participants = obj.get("participants") if isinstance(obj, Mapping) else None
    if (
        isinstance(obj, Mapping)
        and isinstance(participants, list)
        and len(participants) > MAX_PARTICIPANTS
    ):
        # Refused at once: validating every item of a huge list would itself take long.
        problems.append(
            (
                ("participants",),
                f"{len(participants)} participants, above the limit {MAX_PARTICIPANTS}",
            )
        )
        _raise_problems(source, problems + _semantic_problems({**obj, "participants": []}))
    # NaN and Infinity (and 1e400, read as Infinity): one problem each, whatever the schema
    # would also say of them (a type, a limit).
    nonfinite = dict(_find_nonfinite(obj, ()))
    problems.extend(
        (path, f"expected a finite number, got {_show(v)}") for path, v in nonfinite.items()
    )
    for error in _validator().iter_errors(obj):
        problems.extend(p for p in _schema_problems(error) if p[0] not in nonfinite)
    problems.extend(_semantic_problems(obj))
    if isinstance(obj, Mapping) and not problems:
        problems.extend(get_extra_problems(obj))
    if problems:
        _raise_problems(source, problems)
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


def _duplicate_key_problems(value: object) -> list[_Problem]:
    return [
        (path, f"duplicate key {key!r} (each key may appear once)")
        for path, key in find_duplicate_keys(value)
    ]


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
    duplicates = _duplicate_key_problems(obj)
    if duplicates:  # which value counts is unclear: the duplicates alone, not what follows
        _raise_problems(source, duplicates)
    return _parse(obj, source, [])


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
