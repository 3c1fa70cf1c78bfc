"""The chain's JSON: protobuf messages as the Cosmos SDK REST gateway prints and reads them.

The gateway (and genesis export) prints with gogo ``jsonpb`` ``OrigName: true, EmitDefaults:
true`` (docs/design/chain-types-v0.2.14.md, section 6.1). :func:`compute_chain_json` reproduces
it from the message descriptors:

* keys are the proto field names, in .proto declaration order; every field is printed, zero
  values included;
* int64 / uint64 / sint64 / fixed64 / sfixed64 print as decimal strings, 32-bit integers as
  numbers; enums as their names (a number the enum does not know as a bare number);
* an unset singular message prints ``null``, except the fields upstream declares
  ``(gogoproto.nullable) = false`` (:data:`NON_NULLABLE_FIELDS`), which print an object even when
  empty; an empty repeated field prints ``[]``; map entries print in key order;
* bytes print as base64; empty bytes print ``null``. Go prints nil bytes ``null`` and ``""``
  only for a present, empty value, which the chain's proto3 store never holds (an empty bytes
  field is not on the wire, so it reads back as nil); proto3 cannot tell the two apart, so
  keepersim prints what the chain prints for its state;
* an unset member of a real ``oneof`` is left out (gogo skips a nil oneof); an unset proto3
  ``optional`` scalar (keepersim's own messages only; the chain's have none) prints ``null``, so
  that it reads back unset.

What ``json_format.MessageToDict(preserving_proto_field_name=True,
always_print_fields_with_no_presence=True)`` already gets right is kept: the names, 64-bit
strings, enum names and numbers, base64, floats (``"NaN"``, ``"Infinity"``), map values and the
well-known types. A post-pass over the descriptor fixes what it does not: the key order, ``null``
for unset messages and optional scalars, objects for non-nullable fields, ``null`` for empty
bytes, the map key order.

:func:`parse_chain_json` reads what the gateway prints and what gogo's ``Unmarshal`` accepts:
integers quoted or not, enums by name or number, ``null`` for unset, the proto name or the JSON
(camelCase) name of a field; a non-nullable field that is absent or ``null`` reads as set and
empty (in Go it is a value, and gogo's binary encoding always writes it). A pre-pass checks every value against its field and names the
field's path on the first bad one (``json_format``'s own errors name paths unevenly); unknown
fields are errors, or with ``ignore_unknown=True`` are removed and reported, never dropped
silently. ``json_format.ParseDict`` then builds the message from the checked data.
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from keepersim.types.errors import ChainJsonError

__all__ = ["NON_NULLABLE_FIELDS", "compute_chain_json", "parse_chain_json"]

M = TypeVar("M", bound=Message)

#: Singular message fields upstream marks ``(gogoproto.nullable) = false``, as
#: ``"<message full name>.<field name>"``: the gateway prints them as objects, never ``null``.
#: The vendored protos have the option stripped, so scripts/vendor_chain_protos.py reads it from
#: upstream's text (gonka ee730031: 52 uses in inference/inference/*.proto, 3 of them on singular
#: fields of the vendored messages; repeated fields need no entry, their elements are never null)
#: into proto/inference/non_nullable_fields.txt. The package reads no file outside keepersim/, so
#: the list is repeated here; tests/core/test_chain_conformance.py checks the two are equal.
NON_NULLABLE_FIELDS: frozenset[str] = frozenset(
    {
        "inference.inference.GenesisState.genesis_only_params",
        "inference.inference.GenesisState.params",
        "inference.inference.MsgUpdateParams.params",
    }
)

# Descriptors are typed loosely: the stubs union the upb and pure-Python classes and make every
# message_type / enum_type optional, which the field's type already decides.
_Field = Any
_Message = Any
_F = FieldDescriptor
_INT64 = {_F.TYPE_INT64, _F.TYPE_SINT64, _F.TYPE_SFIXED64}
_UINT64 = {_F.TYPE_UINT64, _F.TYPE_FIXED64}
_INT32 = {_F.TYPE_INT32, _F.TYPE_SINT32, _F.TYPE_SFIXED32}
_UINT32 = {_F.TYPE_UINT32, _F.TYPE_FIXED32}
_RANGES: dict[int, tuple[int, int, str]] = {
    **{t: (-(2**63), 2**63 - 1, "an int64") for t in _INT64},
    **{t: (0, 2**64 - 1, "a uint64") for t in _UINT64},
    **{t: (-(2**31), 2**31 - 1, "an int32") for t in _INT32},
    **{t: (0, 2**32 - 1, "a uint32") for t in _UINT32},
}
_FLOAT_WORDS = {"NaN", "Infinity", "-Infinity"}


def _is_map(field: _Field) -> bool:
    mt = field.message_type
    return mt is not None and mt.GetOptions().map_entry


def _is_repeated(field: _Field) -> bool:
    return bool(field.is_repeated)


def _is_well_known(descriptor: _Message) -> bool:
    return bool(descriptor.full_name.startswith("google.protobuf."))


def _is_synthetic_optional(field: _Field) -> bool:
    oneof = field.containing_oneof
    return oneof is not None and len(oneof.fields) == 1 and oneof.name == "_" + field.name


# --------------------------------------------------------------------------------------------
# Printing
# --------------------------------------------------------------------------------------------


def compute_chain_json(message: Message) -> dict[str, Any]:
    """``message`` as the chain's REST gateway prints it (see the module docstring)."""
    printed = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return _shape(message, printed)


def _shape(message: Message, printed: dict[str, Any]) -> dict[str, Any]:
    """The post-pass: declaration order, ``null`` where Go has a nil, over MessageToDict's
    values."""
    out: dict[str, Any] = {}
    descriptor = message.DESCRIPTOR
    for field in descriptor.fields:
        name = field.name
        optional = _is_synthetic_optional(field)
        if field.containing_oneof is not None and not optional and not message.HasField(name):
            continue
        if _is_map(field):
            out[name] = _shape_map(field, getattr(message, name), printed.get(name, {}))
        elif _is_repeated(field):
            values = printed.get(name, [])
            if field.type == _F.TYPE_MESSAGE and not _is_well_known(field.message_type):
                values = [_shape(m, p) for m, p in zip(getattr(message, name), values, strict=True)]
            out[name] = values
        elif field.type == _F.TYPE_MESSAGE:
            if message.HasField(name):
                sub = getattr(message, name)
                out[name] = (
                    printed[name]
                    if _is_well_known(field.message_type)
                    else _shape(sub, printed[name])
                )
            elif f"{descriptor.full_name}.{name}" in NON_NULLABLE_FIELDS:
                out[name] = compute_chain_json(getattr(message, name))
            else:
                out[name] = None
        elif optional and not message.HasField(name):
            out[name] = None
        elif field.type == _F.TYPE_BYTES and field.containing_oneof is None:
            out[name] = printed.get(name) or None
        else:
            out[name] = printed[name]
    return out


def _shape_map(field: _Field, value: Any, printed: dict[str, Any]) -> dict[str, Any]:
    """Entries in key order (gogo sorts map keys; Python's maps keep insertion order)."""
    key_field = field.message_type.fields_by_name["key"]
    value_field = field.message_type.fields_by_name["value"]
    nested = value_field.type == _F.TYPE_MESSAGE and not _is_well_known(value_field.message_type)
    out: dict[str, Any] = {}
    for key in sorted(value):
        text = ("true" if key else "false") if key_field.type == _F.TYPE_BOOL else str(key)
        out[text] = _shape(value[key], printed[text]) if nested else printed[text]
    return out


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


def parse_chain_json(
    data: Any,
    message_type: type[M],
    *,
    where: str,
    ignore_unknown: bool = False,
    ignored: list[str] | None = None,
) -> M:
    """The chain's JSON ``data`` (a decoded JSON object) as a ``message_type``.

    ``where`` says where the data came from (a file, a URL) and starts every error message.
    Raises :class:`~keepersim.types.errors.ChainJsonError` naming the field's path on the first
    value that does not fit and on an unknown field. With ``ignore_unknown=True`` (a newer
    chain's fields) unknown fields are skipped instead and their paths appended to ``ignored``,
    which is then required, so nothing is dropped unseen.
    """
    if ignore_unknown and ignored is None:
        raise ValueError("parse_chain_json: ignore_unknown=True needs an `ignored` list")
    sink = ignored if ignore_unknown else None
    checked = _check_message(data, message_type.DESCRIPTOR, "", where, sink)
    try:
        return json_format.ParseDict(checked, message_type())
    except json_format.ParseError as exc:  # pragma: no cover - the pre-pass rejects it first
        raise ChainJsonError(where, "", f"not a valid {message_type.__name__}: {exc}") from exc


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _got(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_message(
    data: Any, descriptor: _Message, path: str, where: str, ignored: list[str] | None
) -> Any:
    """``data`` checked against ``descriptor``: nulls and ignored fields removed."""
    if _is_well_known(descriptor):
        return data  # ParseDict reads their special forms (and names the field on error)
    if not isinstance(data, dict):
        raise ChainJsonError(
            where, path, f"expected a JSON object ({descriptor.name}), got {_got(data)}"
        )
    out: dict[str, Any] = {}
    seen: dict[str, str] = {}
    oneofs: dict[str, str] = {}
    for key, value in data.items():
        field_path = _join(path, key)
        field = descriptor.fields_by_name.get(key)
        if field is None:
            field = next((f for f in descriptor.fields if f.json_name == key), None)
        if field is None:
            if ignored is None:
                raise ChainJsonError(where, field_path, f"unknown field of {descriptor.full_name}")
            ignored.append(field_path)
            continue
        if field.name in seen:
            raise ChainJsonError(
                where, field_path, f"field {field.name!r} given twice (as {seen[field.name]!r})"
            )
        seen[field.name] = key
        if value is None:
            continue  # null: unset
        oneof = field.containing_oneof
        if oneof is not None and not _is_synthetic_optional(field):
            if oneof.name in oneofs:
                raise ChainJsonError(
                    where,
                    field_path,
                    f"oneof {oneof.name!r} already set by {oneofs[oneof.name]!r}",
                )
            oneofs[oneof.name] = field.name
        out[field.name] = _check_field(value, field, field_path, where, ignored)
    for field in descriptor.fields:  # a Go value, never nil: always set (gogo marshals it too)
        if field.name not in out and f"{descriptor.full_name}.{field.name}" in NON_NULLABLE_FIELDS:
            out[field.name] = {}
    return out


def _check_field(
    value: Any, field: _Field, path: str, where: str, ignored: list[str] | None
) -> Any:
    if _is_map(field):
        if not isinstance(value, dict):
            raise ChainJsonError(where, path, f"expected a JSON object (a map), got {_got(value)}")
        key_field = field.message_type.fields_by_name["key"]
        value_field = field.message_type.fields_by_name["value"]
        out: dict[str, Any] = {}
        for key, item in value.items():
            item_path = f"{path}[{key!r}]"
            _check_map_key(key, key_field, item_path, where)
            if item is None:
                raise ChainJsonError(where, item_path, "null is not a map value")
            out[key] = _check_single(item, value_field, item_path, where, ignored)
        return out
    if _is_repeated(field):
        if not isinstance(value, list):
            raise ChainJsonError(where, path, f"expected a JSON list, got {_got(value)}")
        items = []
        for i, item in enumerate(value):
            item_path = f"{path}[{i}]"
            if item is None:
                raise ChainJsonError(where, item_path, "null is not a list element")
            items.append(_check_single(item, field, item_path, where, ignored))
        return items
    return _check_single(value, field, path, where, ignored)


def _check_map_key(key: str, field: _Field, path: str, where: str) -> None:
    if field.type == _F.TYPE_BOOL:
        if key not in ("true", "false"):
            raise ChainJsonError(where, path, "expected a bool map key (true or false)")
    elif field.type in _RANGES:
        _check_int(key, field, path, where)


def _check_single(
    value: Any, field: _Field, path: str, where: str, ignored: list[str] | None
) -> Any:
    kind = field.type
    if kind == _F.TYPE_MESSAGE:
        return _check_message(value, field.message_type, path, where, ignored)
    if kind in _RANGES:
        return _check_int(value, field, path, where)
    if kind == _F.TYPE_ENUM:
        return _check_enum(value, field, path, where)
    if kind == _F.TYPE_BOOL:
        if not isinstance(value, bool):
            raise ChainJsonError(where, path, f"expected true or false, got {_got(value)}")
        return value
    if kind == _F.TYPE_STRING:
        if not isinstance(value, str):
            raise ChainJsonError(where, path, f"expected a JSON string, got {_got(value)}")
        return value
    if kind == _F.TYPE_BYTES:
        return _check_bytes(value, path, where)
    # float / double: a number, a numeric string or NaN / Infinity / -Infinity
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ChainJsonError(where, path, f"expected a JSON number, got {_got(value)}")
    if isinstance(value, str) and value not in _FLOAT_WORDS:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if math.isnan(number) or value.strip() != value:
            raise ChainJsonError(where, path, f"expected a JSON number, got {_got(value)}")
    return value


def _check_int(value: Any, field: _Field, path: str, where: str) -> int:
    """gogo's rule: a JSON integer, or a decimal string of one (quotes dropped)."""
    low, high, what = _RANGES[field.type]
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        digits = value[1:] if value.startswith("-") else value
        if digits.isascii() and digits.isdigit():
            number = int(value)
    if number is None:
        raise ChainJsonError(
            where, path, f"expected {what} (a JSON integer or a decimal string), got {_got(value)}"
        )
    if not low <= number <= high:
        raise ChainJsonError(where, path, f"{number} does not fit in {what}")
    return number


def _check_enum(value: Any, field: _Field, path: str, where: str) -> Any:
    enum = field.enum_type
    if isinstance(value, str):
        if value not in enum.values_by_name:
            names = ", ".join(v.name for v in enum.values)
            raise ChainJsonError(
                where, path, f"unknown {enum.name} name {value!r} (one of {names}, or a number)"
            )
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if not -(2**31) <= value < 2**31:
            raise ChainJsonError(where, path, f"{value} does not fit in an enum (int32)")
        return value
    raise ChainJsonError(where, path, f"expected a {enum.name} name or number, got {_got(value)}")


def _check_bytes(value: Any, path: str, where: str) -> str:
    """Standard or URL-safe base64, padded or not (what ParseDict and Go's decoder accept)."""
    if isinstance(value, str):
        raw = value.replace("-", "+").replace("_", "/")
        raw += "=" * (-len(raw) % 4)
        try:
            base64.b64decode(raw, validate=True)
            return value
        except (binascii.Error, ValueError):
            pass
    raise ChainJsonError(where, path, f"expected base64 bytes, got {_got(value)}")
