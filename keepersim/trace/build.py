"""Direct protobuf construction from a schema-valid line's dict, without ``ParseDict``.

``json_format.ParseDict`` costs ~180 us per inference line, too slow for traces with millions of
lines. The reader builds the message here from a line that passed the schema
(:mod:`keepersim.trace.validate`) and falls back to
:func:`keepersim.types.chain_json.parse_chain_json`, the reference, for the error when the direct
build meets a value it does not take. ``tests/trace/test_schema.py`` checks the two agree on
generated and mutated lines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from keepersim.types.chain_json import NON_NULLABLE_FIELDS

__all__ = ["FastParseError", "MessageBuilder", "get_builder"]


class FastParseError(ValueError):
    """The direct build met a value it does not take; ParseDict gives the real error."""


_U64_MAX: Final = (1 << 64) - 1
_I64_MIN: Final = -(1 << 63)
_I64_MAX: Final = (1 << 63) - 1
_U32_MAX: Final = (1 << 32) - 1
_I32_MIN: Final = -(1 << 31)
_I32_MAX: Final = (1 << 31) - 1

_INT_RANGES: Final[dict[int, tuple[int, int]]] = {
    FieldDescriptor.TYPE_INT64: (_I64_MIN, _I64_MAX),
    FieldDescriptor.TYPE_SINT64: (_I64_MIN, _I64_MAX),
    FieldDescriptor.TYPE_SFIXED64: (_I64_MIN, _I64_MAX),
    FieldDescriptor.TYPE_UINT64: (0, _U64_MAX),
    FieldDescriptor.TYPE_FIXED64: (0, _U64_MAX),
    FieldDescriptor.TYPE_INT32: (_I32_MIN, _I32_MAX),
    FieldDescriptor.TYPE_SINT32: (_I32_MIN, _I32_MAX),
    FieldDescriptor.TYPE_SFIXED32: (_I32_MIN, _I32_MAX),
    FieldDescriptor.TYPE_UINT32: (0, _U32_MAX),
    FieldDescriptor.TYPE_FIXED32: (0, _U32_MAX),
}

Convert = Callable[[Any], Any]


def compute_decimal(text: str, lo: int, hi: int) -> int:
    """A decimal string (an optional "-", then ASCII digits) as an integer in [lo, hi]."""
    digits = text[1:] if text[:1] == "-" else text
    if not (digits.isascii() and digits.isdigit()):  # int() would take " 5", "1_0"
        raise FastParseError("not a decimal string")
    n = int(digits) if digits is text else -int(digits)
    if not lo <= n <= hi:
        raise FastParseError("out of range")
    return n


def _int_converter(lo: int, hi: int) -> Convert:
    def convert(value: Any) -> int:
        if isinstance(value, str):
            return compute_decimal(value, lo, hi)
        if isinstance(value, bool | float):  # parse_chain_json takes neither (gogo's rule)
            raise FastParseError("not an integer or a decimal string")
        if not isinstance(value, int):
            raise FastParseError("not an integer")
        if not lo <= value <= hi:
            raise FastParseError("out of range")
        return value

    return convert


def _scalar_converter(field: FieldDescriptor) -> Convert:
    if field.type in _INT_RANGES:
        return _int_converter(*_INT_RANGES[field.type])
    if field.type == FieldDescriptor.TYPE_ENUM:
        enum_type = field.enum_type
        assert enum_type is not None
        by_name = {v.name: v.number for v in enum_type.values}

        def convert_enum(value: Any) -> int:
            if isinstance(value, str) and value in by_name:
                return by_name[value]
            raise FastParseError("not an enum name")

        return convert_enum
    if field.type == FieldDescriptor.TYPE_BOOL:

        def convert_bool(value: Any) -> bool:
            if isinstance(value, bool):
                return value
            raise FastParseError("not a boolean")

        return convert_bool
    if field.type == FieldDescriptor.TYPE_STRING:

        def convert_str(value: Any) -> str:
            if isinstance(value, str):
                return value
            raise FastParseError("not a string")

        return convert_str
    raise FastParseError(f"field type {field.type} has no fast path")


def _map_converter(entry: Descriptor | Any) -> Convert:
    """A map field with string keys and scalar values (a JSON object)."""
    convert_value = _scalar_converter(entry.fields_by_name["value"])

    def convert_map(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise FastParseError("not an object")
        return {str(k): convert_value(v) for k, v in value.items()}

    return convert_map


class MessageBuilder:
    """Builds a protobuf message from a schema-valid protobuf-JSON dict, without ParseDict.

    As :func:`~keepersim.types.chain_json.parse_chain_json`: ``null`` is unset, and a field
    upstream marks non-nullable reads as set (empty) when it is absent or ``null``."""

    def __init__(self, descriptor: Descriptor | Any, message_class: type[Message]) -> None:
        self._class = message_class
        self._fields: dict[str, tuple[bool, bool, Convert]] = {}
        # Fast paths of build for the values of nearly every line, without the converters'
        # type dispatch: a singular string field given a str, a singular integer field (name ->
        # its range) given a decimal string (compute_decimal, the converters' own rule).
        self._strings: frozenset[str] = frozenset(
            f.name
            for f in descriptor.fields
            if not f.is_repeated and f.type == FieldDescriptor.TYPE_STRING
        )
        self._integers: dict[str, tuple[int, int]] = {
            f.name: _INT_RANGES[f.type]
            for f in descriptor.fields
            if not f.is_repeated and f.type in _INT_RANGES
        }
        # Enum fields: name -> number (a flat line's status).
        self._enums: dict[str, dict[str, int]] = {
            f.name: {v.name: v.number for v in f.enum_type.values}
            for f in descriptor.fields
            if not f.is_repeated and f.type == FieldDescriptor.TYPE_ENUM and f.enum_type
        }
        self._non_nullable: tuple[str, ...] = tuple(
            f.name
            for f in descriptor.fields
            if f"{descriptor.full_name}.{f.name}" in NON_NULLABLE_FIELDS
        )
        for field in descriptor.fields:
            repeated = bool(field.is_repeated)
            entry = field.message_type
            if entry is not None and entry.GetOptions().map_entry:
                self._fields[field.name] = (False, False, _map_converter(entry))
                continue
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                sub_type = field.message_type
                assert sub_type is not None
                sub_builder = MessageBuilder(sub_type, _message_class_of(message_class, field))
                self._fields[field.name] = (repeated, True, sub_builder.build)
            else:
                self._fields[field.name] = (repeated, False, _scalar_converter(field))

    def compute_flat_kwargs(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """The class's constructor arguments of a schema-valid ``data`` whose every value is a
        string of a singular scalar field (a string, a decimal integer, an enum name: nearly
        every inference line); None for anything else, which :meth:`build` takes. Raises
        FastParseError as build does."""
        kwargs = data.copy()
        strings, integers, enums = self._strings, self._integers, self._enums
        for key, value in data.items():
            if value.__class__ is not str:
                return None
            if key in strings:
                continue
            bounds = integers.get(key)
            if bounds is not None:
                if value.isdigit() and value.isascii():  # compute_decimal's rule, unsigned
                    n = int(value)
                    if n <= bounds[1]:
                        kwargs[key] = n
                        continue
                kwargs[key] = compute_decimal(value, *bounds)  # the rest, or its error
                continue
            names = enums.get(key)
            if names is None:
                return None
            number = names.get(value)
            if number is None:
                raise FastParseError("not an enum name")
            kwargs[key] = number
        return kwargs

    def construct(self, kwargs: dict[str, Any]) -> Message:
        """The message of :meth:`compute_flat_kwargs`' arguments."""
        built = self._class(**kwargs)
        for name in self._non_nullable:
            if name not in kwargs:
                getattr(built, name).SetInParent()
        return built

    def build(self, data: Any) -> Message:
        if not isinstance(data, dict):
            raise FastParseError("not an object")
        kwargs: dict[str, Any] = {}
        fields, strings, integers = self._fields, self._strings, self._integers
        for key, value in data.items():
            if value.__class__ is str:
                if key in strings:
                    kwargs[key] = value
                    continue
                bounds = integers.get(key)
                if bounds is not None:
                    kwargs[key] = compute_decimal(value, *bounds)
                    continue
            spec = fields.get(key)
            if spec is None:
                raise FastParseError(f"unknown field {key!r}")
            if value is None:
                continue  # null: unset (the schema said where null may stand)
            repeated, _, convert = spec
            if repeated:
                if not isinstance(value, list):
                    raise FastParseError("not a list")
                kwargs[key] = [convert(v) for v in value]
            else:
                kwargs[key] = convert(value)
        built = self._class(**kwargs)
        for name in self._non_nullable:
            if name not in kwargs:
                getattr(built, name).SetInParent()
        return built


def _message_class_of(owner: type[Message], field: FieldDescriptor) -> type[Message]:
    """The generated class of a message field's values (singular or repeated)."""
    value = getattr(owner(), field.name)
    if field.is_repeated:
        value = value.add()
    return type(value)


_BUILDERS: dict[type[Message], MessageBuilder] = {}


def get_builder(message_class: type[Message]) -> MessageBuilder:
    """The (cached) builder of ``message_class``."""
    builder = _BUILDERS.get(message_class)
    if builder is None:
        builder = MessageBuilder(message_class.DESCRIPTOR, message_class)
        _BUILDERS[message_class] = builder
    return builder
