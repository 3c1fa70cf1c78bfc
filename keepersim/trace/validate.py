"""Checks a trace line against the shipped JSON Schema with jsonschema-rs (a maintained,
compiled validator: ~3 us per inference line) and words the first violation in the format's
terms: ``(field path, "expected <the schema's title>, got <value>")``.

One validator per record kind (``#/$defs/<kind>``), compiled once. A valid line costs one
``is_valid`` call; only a bad one is walked for its errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any

import jsonschema_rs

from keepersim.trace.schema import get_schema

__all__ = ["check_line", "describe", "get_validator"]


@cache
def get_validator(kind: str) -> Any:
    """The compiled validator of one record kind's lines."""
    schema = {"$ref": f"#/$defs/{kind}", "$defs": get_schema()["$defs"]}
    return jsonschema_rs.validator_for(schema)


def check_line(kind: str, data: Any) -> tuple[str, str] | None:
    """None when ``data`` is a valid ``kind`` line, else (field path, reason) of its first
    violation (the shallowest one, as jsonschema's ``best_match`` picks)."""
    validator = get_validator(kind)
    if validator.is_valid(data):
        return None
    root = {"$defs": get_schema()["$defs"]}
    best = _get_best(validator.iter_errors(data))
    assert best is not None
    return _describe_error(kind, root, best)


def _get_best(errors: Iterable[Any]) -> Any:
    best: Any = None
    best_key: tuple[int, bool] | None = None
    for error in errors:
        key = (-len(error.instance_path), error.kind.name not in ("anyOf", "oneOf"))
        if best_key is None or key > best_key:
            best, best_key = error, key
    return best


def _get_subschema(root: dict[str, Any], schema_path: Sequence[str | int]) -> Any:
    """The schema object holding the failed keyword (the path without its last part)."""
    node: Any = root
    for part in list(schema_path)[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return {}
    return node


def _format_path(kind: str, path: Iterable[str | int]) -> str:
    out = kind
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def describe(instance: Any) -> str:
    try:
        text = json.dumps(instance)
    except (TypeError, ValueError):
        text = repr(instance)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_null_option(errors: Sequence[Any]) -> bool:
    return (
        len(errors) == 1
        and errors[0].kind.name == "type"
        and list(errors[0].kind.types) == ["null"]
    )


def _describe_error(kind: str, root: dict[str, Any], error: Any) -> tuple[str, str]:
    path = list(error.instance_path)
    name = error.kind.name
    schema = _get_subschema(root, error.schema_path)
    title = schema.get("title") if isinstance(schema, dict) else None
    if name == "required":
        return _format_path(kind, [*path, error.kind.property]), "missing (required)"
    if name == "additionalProperties":
        extra = sorted(error.kind.unexpected)
        known = sorted(schema.get("properties", {})) if isinstance(schema, dict) else []
        return (
            _format_path(kind, [*path, extra[0]]),
            f"unknown field (known: {', '.join(known)})",
        )
    if name == "anyOf" and not title:
        # A nullable field (the value, or null for unset): say what the value breaks.
        options = [list(option) for option in error.kind.context]
        kept = [option for option in options if not _is_null_option(option)]
        if len(kept) == 1 and kept[0]:
            return _describe_error(kind, root, _get_best(kept[0]))
    if name == "const" and isinstance(schema, dict) and "const" in schema:
        title = title or describe(schema["const"])
    if title:
        return _format_path(kind, path), f"expected {title}, got {describe(error.instance)}"
    return _format_path(kind, path), str(error.message)
