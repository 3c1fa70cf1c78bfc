"""The one reader of the chain's ``Params`` JSON, as a node serves it (docs/design/mainnet-preset.md).

What it reads (the REST gateway's ``/productscience/inference/inference/params`` body's
``params``, a proposal's ``MsgUpdateParams.params``, a trace's params record, ``keepersim
params``' output): :func:`~keepersim.types.chain_json.parse_chain_json`'s rules (``null`` for an
unset message, decimals as ``{value, exponent}`` with the value a string or a number, 64-bit
integers as strings or numbers, enums by name or number; an unknown field is an error, or with
``ignore_unknown`` is listed), and one more: a field whose key is *absent* belongs to a newer
chain version than the node's. The gateway prints every field its binary knows (gogo jsonpb
``EmitDefaults``), so a missing key means an older binary, never a zero value.

An absent field is filled as the chain filled it when it upgraded to v0.2.14 (gonka ee730031):
its value after running the upgrade handlers v0.2.13 and v0.2.14
(:mod:`keepersim.types.chain_upgrades`) on the node's params, for the fields those versions
added (:data:`~keepersim.types.chain_upgrades.UPGRADE_FIELD_SOURCES` cites the handler of
each). A field they leave alone keeps the zero the chain keeps. Any other absent field (a node
older than v0.2.12) takes ``DefaultParams()``'s value, or the proto3 zero inside a list element.
Each fill is reported once, one line on stderr naming every field filled and its source
(:func:`warn_filled`), or to the caller's ``on_filled``.

A governance entry's params are a patch merged onto the params in force
(:func:`keepersim.sim.governance.parse_governance`); there a missing key keeps its value, so the
merged object is read with ``fill_absent=False``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from keepersim.types.chain_defaults import get_chain_default_params
from keepersim.types.chain_json import compute_chain_json, parse_chain_json
from keepersim.types.chain_upgrades import UPGRADE_FIELD_SOURCES, process_upgrades
from keepersim.types.errors import ChainJsonError
from keepersim.types.messages import Params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams, ModuleParams

__all__ = [
    "FilledField",
    "compute_module_params_json",
    "get_absent_fields",
    "parse_chain_params",
    "parse_module_params_json",
    "warn_filled",
]


@dataclass(frozen=True, slots=True)
class FilledField:
    """An absent field of a node's params and what it was filled with (``value``: as text)."""

    path: str
    value: str
    source: str


FillSink = Callable[[str, list[FilledField]], None]
_warned: set[str] = set()


def warn_filled(where: str, filled: list[FilledField]) -> None:
    """One ``keepersim: warning:`` line on stderr listing the fields filled, grouped by source
    (each distinct line once per process)."""
    groups: dict[str, list[str]] = {}
    for f in filled:
        groups.setdefault(f.source, []).append(f"{f.path}={f.value}")
    items = "; ".join(f"{source}: {', '.join(fields)}" for source, fields in groups.items())
    line = (
        f"keepersim: warning: {where}: {len(filled)} field(s) absent (a node older than "
        f"v0.2.14), filled as the chain's upgrades filled them: {items}"
    )
    if line not in _warned:
        _warned.add(line)
        print(line, file=sys.stderr)


def get_absent_fields(data: Any, descriptor: Any = Params.DESCRIPTOR, path: str = "") -> list[str]:
    """Paths of the fields of ``descriptor`` whose key ``data`` lacks (list elements as
    ``[i]``), outermost only; members of a real ``oneof`` are never absent (gogo leaves an unset
    one out). Non-objects and nulls are left to the parser's errors."""
    if not isinstance(data, dict):
        return []
    out: list[str] = []
    for field in descriptor.fields:
        oneof = field.containing_oneof
        if oneof is not None and oneof.name != "_" + field.name:
            continue
        name = f"{path}.{field.name}" if path else field.name
        key = field.name if field.name in data else field.json_name
        if key not in data:
            out.append(name)
            continue
        value = data[key]
        message = field.message_type
        if message is None or message.GetOptions().map_entry:
            continue
        if message.full_name.startswith("google.protobuf."):
            continue
        if field.is_repeated:
            if isinstance(value, list):
                for i, item in enumerate(value):
                    out.extend(get_absent_fields(item, message, f"{name}[{i}]"))
        else:
            out.extend(get_absent_fields(value, message, name))
    return out


def parse_chain_params(
    data: Any,
    *,
    where: str,
    ignore_unknown: bool = False,
    ignored: list[str] | None = None,
    fill_absent: bool = True,
    on_filled: FillSink | None = warn_filled,
) -> Params:
    """A node's ``Params`` JSON (the object inside ``{"params": ...}``) as v0.2.14 ``Params``.

    ``where`` starts every error (:class:`~keepersim.types.errors.ChainJsonError`, naming the
    field's path). ``ignore_unknown`` / ``ignored``: as :func:`parse_chain_json`. With
    ``fill_absent`` (the default) absent fields are filled as the module docstring says and
    ``on_filled(where, fields)`` is called once if any was (default :func:`warn_filled`;
    None: silent); without it they read as zero.
    """
    absent = get_absent_fields(data) if fill_absent else []
    params = parse_chain_json(
        data, Params, where=where, ignore_unknown=ignore_unknown, ignored=ignored
    )
    if absent:
        filled = _fill(params, absent)
        if on_filled is not None:
            on_filled(where, filled)
    return params


def parse_module_params_json(
    data: Any, *, where: str, fill_absent: bool = True, on_filled: FillSink | None = warn_filled
) -> ModuleParams:
    """``{"params": {...}, "extension_params": {...}}`` (``keepersim params``' output) as
    ModuleParams: the chain's part through :func:`parse_chain_params`, keepersim's through
    :func:`parse_chain_json` (an absent field of it is zero). Both keys are required; an
    error's path starts at that root (``params.fee_params``)."""
    if not isinstance(data, dict):
        raise ChainJsonError(where, "", f"expected a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - {"params", "extension_params"})
    if unknown:
        raise ChainJsonError(where, unknown[0], "unknown field (expected params, extension_params)")
    for key in ("params", "extension_params"):
        if key not in data:
            raise ChainJsonError(where, key, "required")
    try:
        chain = parse_chain_params(
            data["params"], where=where, fill_absent=fill_absent, on_filled=on_filled
        )
    except ChainJsonError as exc:
        raise ChainJsonError(where, _join("params", exc.path), exc.problem) from exc
    try:
        ext = parse_chain_json(data["extension_params"], ExtensionParams, where=where)
    except ChainJsonError as exc:
        raise ChainJsonError(where, _join("extension_params", exc.path), exc.problem) from exc
    return ModuleParams(params=chain, extension_params=ext)


def compute_module_params_json(params: ModuleParams) -> dict[str, Any]:
    """What :func:`parse_module_params_json` reads: both parts as the chain's gateway prints
    them (every field, ``null`` for an unset message), so that it reads back unchanged."""
    return {
        "params": compute_chain_json(params.params),
        "extension_params": compute_chain_json(params.extension_params),
    }


# --------------------------------------------------------------------------------------------


def _fill(params: Params, absent: list[str]) -> list[FilledField]:
    upgraded = Params()
    upgraded.CopyFrom(params)
    process_upgrades(upgraded)
    defaults = get_chain_default_params()
    out: list[FilledField] = []
    for path in absent:
        key = _strip_indices(path)
        if key in UPGRADE_FIELD_SOURCES:
            source = UPGRADE_FIELD_SOURCES[key] or "no upgrade handler sets it (the chain keeps 0)"
            origin: Message | None = upgraded
        elif key == path:
            source, origin = "no upgrade handler known, DefaultParams()", defaults
        else:
            source, origin = "no upgrade handler known, the proto3 zero", None
        value = _copy_at(params, origin, path)
        out.append(FilledField(path, value, source))
    return out


def _join(root: str, path: str) -> str:
    return f"{root}.{path}" if path else root


def _strip_indices(path: str) -> str:
    parts = [part.split("[", 1)[0] for part in path.split(".")]
    return ".".join(parts)


def _resolve(message: Message, parts: list[str]) -> Message:
    """The message at ``parts`` (``name`` or ``name[i]``), creating none."""
    for part in parts:
        name, _, index = part.partition("[")
        value = getattr(message, name)
        message = value[int(index[:-1])] if index else value
    return message


def _copy_at(target: Params, origin: Message | None, path: str) -> str:
    """Set ``target``'s field at ``path`` to ``origin``'s (None: leave the zero); the value
    as text for the warning."""
    *parents, name = path.split(".")
    into = _resolve(target, parents)
    if origin is None:
        return "0"
    source = _resolve(origin, parents)
    field = source.DESCRIPTOR.fields_by_name[name]
    if field.is_repeated:
        into.ClearField(name)
        getattr(into, name).extend(getattr(source, name))
        return f"[{len(getattr(source, name))} items]"
    if field.message_type is not None:
        if source.HasField(name):
            getattr(into, name).CopyFrom(getattr(source, name))
            return f"{field.message_type.name}{{...}}"
        into.ClearField(name)
        return "null"
    value = getattr(source, name)
    setattr(into, name, value)
    return str(value).lower() if isinstance(value, bool) else str(value)
