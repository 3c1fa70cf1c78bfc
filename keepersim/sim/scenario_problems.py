"""What is wrong with a scenario file, all of it at once: the JSON Schema keepersim ships, the
semantic rules and limits (:mod:`keepersim.sim.scenario` has the format), each problem with its
JSON location and what was expected, raised together as one :class:`ScenarioError`."""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable, Mapping, Sequence, Sized
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Final

import jsonschema

from keepersim.inputs import find_duplicate_keys, format_json_path, get_json_type
from keepersim.limits import (
    MAX_ARRIVALS_PER_BLOCK,
    MAX_BLOCKS,
    MAX_EPOCH_LENGTH,
    MAX_EXPECTED_REQUESTS,
    MAX_EXPIRATION_BLOCKS,
    MAX_PARTICIPANTS,
    MAX_RESELECTS,
    MAX_SEED,
)
from keepersim.sim.scenario_extras import get_extra_problems

__all__ = [
    "SCENARIO_LIMITS",
    "ScenarioError",
    "compute_expected_requests_problem",
    "get_schema",
    "get_schema_path",
    "is_bool",
    "process_duplicate_keys",
    "process_scenario_problems",
]

_SCHEMA_FILE: Final = "scenario.schema.json"
_MAX_LISTED_PROBLEMS: Final = 50

_Path = tuple[str | int, ...]
_Problem = tuple[_Path, str]


class ScenarioError(ValueError):
    """An invalid scenario (file). ``problems`` holds one ``"location: message"`` per problem."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems: tuple[str, ...] = tuple(problems) if problems else (message,)


SCENARIO_LIMITS: Final = (
    ("seed", MAX_SEED),
    ("blocks", MAX_BLOCKS),
    ("epoch_length", MAX_EPOCH_LENGTH),
    ("expiration_blocks", MAX_EXPIRATION_BLOCKS),
    ("max_reselects", MAX_RESELECTS),
    ("arrivals_per_block", MAX_ARRIVALS_PER_BLOCK),
)


def compute_expected_requests_problem(blocks: float, expected: float) -> str:
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


def is_bool(value: object) -> bool:
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
    if keyword == "maximum" and not is_bool(instance) and schema["maximum"] > 1:
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
        and not is_bool(arrivals)
        and blocks <= MAX_BLOCKS  # else that limit is the one reported
        and 0 <= arrivals <= MAX_ARRIVALS_PER_BLOCK
        and blocks * arrivals > MAX_EXPECTED_REQUESTS
    ):
        problems.append((("blocks",), compute_expected_requests_problem(blocks, blocks * arrivals)))
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


def process_scenario_problems(obj: object, source: str) -> None:
    """Raise :class:`ScenarioError` listing every problem of a decoded scenario: its size first
    (a huge participant list is refused at once), non-finite numbers, the JSON Schema, the
    semantic rules, then the chain-record keys (:mod:`keepersim.sim.scenario_extras`)."""
    problems: list[_Problem] = []
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


def _duplicate_key_problems(value: object) -> list[_Problem]:
    return [
        (path, f"duplicate key {key!r} (each key may appear once)")
        for path, key in find_duplicate_keys(value)
    ]


def process_duplicate_keys(obj: object, source: str) -> None:
    """Raise :class:`ScenarioError` naming every duplicate key: which value counts is unclear,
    so the duplicates alone are reported, not what follows."""
    duplicates = _duplicate_key_problems(obj)
    if duplicates:
        _raise_problems(source, duplicates)
