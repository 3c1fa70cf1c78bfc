"""Fast paths for the trace reader: a compiled schema check and a direct protobuf builder.

``jsonschema`` (~500 us per inference line) and ``json_format.ParseDict`` (~180 us) are too slow
for traces with millions of lines. Both stay the reference: the reader runs the compiled check
first and asks ``jsonschema`` only for the message of a line that fails it; it builds the
protobuf directly from a line that passed, and falls back to
:func:`keepersim.types.chain_json.parse_chain_json` (for its error) when the direct build meets a
value it does not accept. ``tests/replay/test_trace_schema.py`` checks both against the
references on generated and mutated lines.

The compiler knows exactly the keywords the trace schema uses ($ref into ``$defs``, type, enum,
const, pattern, minLength, minimum, maximum, properties, required, additionalProperties, items,
anyOf, and the annotations title / description); any other keyword is an error at compile time,
so the schema cannot grow a rule the fast check would silently ignore.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from keepersim.types.chain_json import NON_NULLABLE_FIELDS

Check = Callable[[Any], bool]

_ANNOTATIONS: Final = frozenset({"title", "description", "$schema", "$id", "$comment"})
_KNOWN: Final = frozenset(
    {
        "$ref",
        "$defs",
        "type",
        "enum",
        "const",
        "pattern",
        "minLength",
        "minimum",
        "maximum",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "anyOf",
    }
)


def _is_integer(x: Any) -> bool:
    if isinstance(x, bool):
        return False
    if isinstance(x, int):
        return True
    return isinstance(x, float) and x.is_integer()


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


_TYPE_CHECKS: Final[dict[str, Check]] = {
    "string": lambda x: isinstance(x, str),
    "integer": _is_integer,
    "number": _is_number,
    "boolean": lambda x: isinstance(x, bool),
    "object": lambda x: isinstance(x, dict),
    "array": lambda x: isinstance(x, list),
    "null": lambda x: x is None,
}


def _json_equal(a: Any, b: Any) -> bool:
    """JSON Schema equality: 1 == 1.0, but True != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


def _conjoin(checks: list[Check]) -> Check:
    if not checks:
        return lambda x: True
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks
        return lambda x: first(x) and second(x)
    if len(checks) == 3:
        c0, c1, c2 = checks
        return lambda x: c0(x) and c1(x) and c2(x)
    return lambda x: all(c(x) for c in checks)


class SchemaCompiler:
    """Compiles (sub)schemas of one root document into predicates."""

    def __init__(self, root: dict[str, Any]) -> None:
        self._defs: dict[str, Any] = root.get("$defs", {})
        self._compiled: dict[str, Check] = {}

    def compile_ref(self, ref: str) -> Check:
        prefix = "#/$defs/"
        if not ref.startswith(prefix):
            raise ValueError(f"unsupported $ref {ref!r}")
        name = ref[len(prefix) :]
        found = self._compiled.get(name)
        if found is not None:
            return found
        cell: list[Check] = []

        def forward(x: Any) -> bool:
            return cell[0](x)

        self._compiled[name] = forward  # recursion guard
        check = self.compile(self._defs[name])
        cell.append(check)
        self._compiled[name] = check
        return check

    def compile(self, schema: dict[str, Any]) -> Check:
        unknown = set(schema) - _KNOWN - _ANNOTATIONS
        if unknown:
            raise ValueError(f"the fast schema check does not know keywords {sorted(unknown)}")
        checks: list[Check] = []
        if "$ref" in schema:
            checks.append(self.compile_ref(schema["$ref"]))
        if "type" in schema:
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            type_checks = [_TYPE_CHECKS[t] for t in types]
            if len(type_checks) == 1:
                checks.append(type_checks[0])
            else:
                checks.append(lambda x: any(c(x) for c in type_checks))
        if "enum" in schema:
            options = list(schema["enum"])
            if all(isinstance(o, str) for o in options):
                names = frozenset(options)
                checks.append(lambda x: isinstance(x, str) and x in names)
            else:
                checks.append(lambda x: any(_json_equal(x, o) for o in options))
        if "const" in schema:
            const = schema["const"]
            if isinstance(const, str):
                checks.append(lambda x: isinstance(x, str) and x == const)
            else:
                checks.append(lambda x: _json_equal(x, const))
        if "pattern" in schema:
            search = re.compile(schema["pattern"]).search
            if schema.get("type") == "string":
                # Fused with the type check: a string that matches.
                checks = [c for c in checks if c is not _TYPE_CHECKS["string"]]
                checks.append(lambda x: isinstance(x, str) and search(x) is not None)
            else:
                checks.append(lambda x: not isinstance(x, str) or search(x) is not None)
        if "minLength" in schema:
            n = schema["minLength"]
            checks.append(lambda x: not isinstance(x, str) or len(x) >= n)
        if "minimum" in schema:
            lo = schema["minimum"]
            checks.append(lambda x: not _is_number(x) or x >= lo)
        if "maximum" in schema:
            hi = schema["maximum"]
            checks.append(lambda x: not _is_number(x) or x <= hi)
        if "anyOf" in schema:
            options_checks = [self.compile(s) for s in schema["anyOf"]]
            checks.append(lambda x: any(c(x) for c in options_checks))
        if "items" in schema:
            item = self.compile(schema["items"])
            checks.append(lambda x: not isinstance(x, list) or all(item(v) for v in x))
        if "properties" in schema or "required" in schema or "additionalProperties" in schema:
            checks.append(self._compile_object(schema))
        return _conjoin(checks)

    def _compile_object(self, schema: dict[str, Any]) -> Check:
        props = {k: self.compile(v) for k, v in schema.get("properties", {}).items()}
        required = tuple(schema.get("required", ()))
        additional = schema.get("additionalProperties", True)
        if additional not in (True, False):
            raise ValueError("additionalProperties must be a boolean for the fast check")
        closed = additional is False

        def check(x: Any) -> bool:
            if not isinstance(x, dict):
                return True
            for name in required:
                if name not in x:
                    return False
            for key, value in x.items():
                c = props.get(key)
                if c is None:
                    if closed:
                        return False
                elif not c(value):
                    return False
            return True

        return check


# --------------------------------------------------------------------------------------------
# Direct protobuf construction from a schema-valid dict
# --------------------------------------------------------------------------------------------


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


def _int_converter(lo: int, hi: int) -> Convert:
    def convert(value: Any) -> int:
        if isinstance(value, bool | float):  # parse_chain_json takes neither (gogo's rule)
            raise FastParseError("not an integer or a decimal string")
        if isinstance(value, int):
            n = value
        elif isinstance(value, str):
            digits = value[1:] if value[:1] == "-" else value
            if not (digits.isascii() and digits.isdigit()):  # int() would take " 5", "1_0"
                raise FastParseError("not a decimal string")
            n = int(digits) if digits is value else -int(digits)
        else:
            raise FastParseError("not an integer")
        if not lo <= n <= hi:
            raise FastParseError("out of range")
        return n

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


class MessageBuilder:
    """Builds a protobuf message from a schema-valid protobuf-JSON dict, without ParseDict.

    As :func:`~keepersim.types.chain_json.parse_chain_json`: ``null`` is unset, and a field
    upstream marks non-nullable reads as set (empty) when it is absent or ``null``."""

    def __init__(self, descriptor: Descriptor | Any, message_class: type[Message]) -> None:
        self._class = message_class
        self._fields: dict[str, tuple[bool, bool, Convert]] = {}
        self._non_nullable: tuple[str, ...] = tuple(
            f.name
            for f in descriptor.fields
            if f"{descriptor.full_name}.{f.name}" in NON_NULLABLE_FIELDS
        )
        for field in descriptor.fields:
            repeated = bool(field.is_repeated)
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                sub_type = field.message_type
                assert sub_type is not None
                sub_builder = MessageBuilder(sub_type, _message_class_of(message_class, field))
                self._fields[field.name] = (repeated, True, sub_builder.build)
            else:
                self._fields[field.name] = (repeated, False, _scalar_converter(field))

    def build(self, data: Any) -> Message:
        if not isinstance(data, dict):
            raise FastParseError("not an object")
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            spec = self._fields.get(key)
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
