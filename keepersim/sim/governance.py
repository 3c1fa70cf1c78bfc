"""Governance schedules: a run's params changes, parsed from JSON and checked, and the messages
that put them in force."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal as PyDecimal
from typing import Any

from keepersim.inputs import get_json_type
from keepersim.limits import MAX_GOVERNANCE_ENTRIES
from keepersim.sim.run_errors import GovernanceError
from keepersim.types.chain_decimal import compute_chain_decimal
from keepersim.types.chain_params_json import compute_module_params_json, parse_module_params_json
from keepersim.types.errors import ChainJsonError, InvalidParamsError
from keepersim.types.params import validate_params
from keepersim.types.pb.inference.inference.tx_pb2 import MsgUpdateParams
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgUpdateExtensionParams

__all__ = [
    "GOVERNANCE_HELP",
    "check_governance_schedule",
    "compute_governance_txs",
    "compute_params_with_changes",
    "parse_governance",
]

GOVERNANCE_HELP = """\
A governance schedule is a JSON list; each entry is sent from the governance authority in block
"height" (MsgUpdateParams for the chain's params, keepersim.v1.MsgUpdateExtensionParams for
keepersim's, whichever the entry changes) and takes effect from the next block. Entries apply in
height order (same height: file order), each to the params in force after the previous ones:
  {"height": 5000, "params": {...}, "extension_params": {...}}
                                       the chain's params JSON and/or
                                       keepersim's extension params, merged onto those in force:
                                       fields not given keep their values, null unsets a
                                       message (keepersim params' output reads back as is)
  {"height": 5000, "set": {"extension_params.cb_miss_threshold_pct": 10,
                           "extension_params.health_params.policy": "windowed",
                           "params.validation_params.downtime_good_percentage": "0.05"}}
                                       dotted field paths from {"params", "extension_params"}; a
                                       Decimal field takes a decimal string or number
Every resulting pair is validated before the run starts; an invalid entry fails with the rule it
breaks. The signer is the x/gov module account (not a param), and health_params.policy takes a
chain policy only (the oracle is the simulator's baseline, not a param). At most MAX_ENTRIES
entries (keepersim/limits.py).""".replace("MAX_ENTRIES", f"{MAX_GOVERNANCE_ENTRIES:,}")


def compute_governance_txs(params: ModuleParams, authority: str) -> list[Any]:
    """The messages that put ``params`` in force: the chain's update and keepersim's, each with
    the whole of its part."""
    return [
        MsgUpdateParams(authority=authority, params=params.params),
        MsgUpdateExtensionParams(authority=authority, extension_params=params.extension_params),
    ]


def _deep_merge(base: dict[str, Any], patch: Mapping[str, Any], where: str) -> dict[str, Any]:
    out = dict(base)
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value, f"{where}.{key}")
        else:
            out[key] = value
    return out


def _set_dotted(data: dict[str, Any], path: str, value: Any, where: str) -> None:
    parts = path.split(".")
    descriptor = ModuleParams.DESCRIPTOR
    node = data
    for i, part in enumerate(parts):
        fd = descriptor.fields_by_name.get(part)
        if fd is None:
            prefix = ".".join(parts[:i]) or "ModuleParams"
            known = ", ".join(sorted(descriptor.fields_by_name))
            hint = _get_root_hint(path) if i == 0 else ""
            raise GovernanceError(
                f"{where}: {prefix} has no field {part!r} (fields: {known}){hint}"
            )
        last = i == len(parts) - 1
        message_type = None if _is_repeated(fd) else fd.message_type
        if last:
            if (
                message_type is not None
                and message_type.full_name.endswith(".Decimal")
                and isinstance(value, str | int | float)
                and not isinstance(value, bool)
            ):
                dec = _get_decimal_arg(value, f"{where}: {path}")
                value = {"value": str(dec.value), "exponent": dec.exponent}
            node[part] = value
            return
        if message_type is None:
            raise GovernanceError(f"{where}: {'.'.join(parts[: i + 1])} is not a message field")
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
        descriptor = message_type


def _get_root_hint(path: str) -> str:
    """A path written from the old, single Params root: the path it now has."""
    head = path.split(".")[0]
    for root in ("params", "extension_params"):
        message = ModuleParams.DESCRIPTOR.fields_by_name[root].message_type
        if message is not None and head in message.fields_by_name:
            return f"; did you mean {root}.{path}?"
    return ""


def _get_decimal_arg(value: str | int | float, where: str) -> Any:
    """A chain Decimal from a governance value, or a GovernanceError saying what was expected."""
    expected = 'expected a decimal string (e.g. "0.05")'
    text = str(value).strip()
    try:
        finite = PyDecimal(text).is_finite()
    except ArithmeticError:
        finite = False
    if not finite:
        raise GovernanceError(f"{where}: {expected}, got {value!r}")
    try:
        return compute_chain_decimal(text)
    except (ValueError, ArithmeticError) as exc:
        raise GovernanceError(f"{where}: {expected}, got {value!r} ({exc})") from exc


def _check_params_patch(
    patch: Mapping[str, Any], descriptor: Any, where: str, path: str = ""
) -> None:
    """Name the first unknown field or non-object message value of a ``params`` patch (the
    field's path after ``where``, as the reader's errors do). ``null`` for a message unsets it:
    the chain's ``MsgUpdateParams`` replaces the whole Params, and ``keepersim params`` prints
    an unset message as ``null``."""
    by_name = {fd.name: fd for fd in descriptor.fields}
    by_name.update({fd.json_name: fd for fd in descriptor.fields})
    for key, value in patch.items():
        at = f"{path}.{key}" if path else key
        fd = by_name.get(key)
        if fd is None:
            known = ", ".join(sorted(fd.name for fd in descriptor.fields))
            raise GovernanceError(f"{where}: {at}: unknown field {key!r} (fields: {known})")
        message_type = None if _is_repeated(fd) else fd.message_type
        if message_type is None or value is None:
            continue
        if not isinstance(value, Mapping):
            what = 'a Decimal object {"value", "exponent"}'
            if not message_type.full_name.endswith(".Decimal"):
                what = f"an object ({message_type.name})"
            raise GovernanceError(
                f"{where}: {at}: expected {what}, got {get_json_type(value)} {value!r}"
                + ('; use "set" for a decimal string' if "Decimal" in what else "")
            )
        _check_params_patch(value, message_type, where, at)


def _is_repeated(fd: Any) -> bool:
    return bool(getattr(fd, "is_repeated", False) or getattr(fd, "label", 0) == 3)


def parse_governance(
    data: object, base: ModuleParams, source: str = "governance"
) -> list[tuple[int, ModuleParams]]:
    """A decoded governance schedule (see :data:`GOVERNANCE_HELP`) -> ``(height, ModuleParams)``
    pairs, each entry applied to the params in force after the previous ones (starting from
    ``base``) and validated. Raises :class:`GovernanceError` naming the entry."""
    if not isinstance(data, list):
        raise GovernanceError(
            f"{source}: expected a JSON list of entries, got {get_json_type(data)}"
        )
    if len(data) > MAX_GOVERNANCE_ENTRIES:
        raise GovernanceError(
            f"{source}: {len(data):,} entries, above the limit of {MAX_GOVERNANCE_ENTRIES:,} "
            "for a governance schedule"
        )
    indexed: list[tuple[int, int, Mapping[str, Any]]] = []
    for i, entry in enumerate(data):
        where = f"{source}[{i}]"
        if not isinstance(entry, Mapping):
            raise GovernanceError(f"{where}: expected an object, got {get_json_type(entry)}")
        unknown = sorted(set(entry) - {"height", "params", "extension_params", "set"})
        if unknown:
            raise GovernanceError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}")
        height = entry.get("height")
        if isinstance(height, bool) or not isinstance(height, int) or height < 1:
            raise GovernanceError(f"{where}: 'height' must be an integer >= 1, got {height!r}")
        patches = "params" in entry or "extension_params" in entry
        if patches == ("set" in entry):
            raise GovernanceError(
                f"{where}: needs 'params' and/or 'extension_params', or 'set' (not both)"
            )
        indexed.append((height, i, entry))
    indexed.sort(key=lambda item: (item[0], item[1]))
    current = ModuleParams()
    current.CopyFrom(base)
    out: list[tuple[int, ModuleParams]] = []
    for height, i, entry in indexed:
        where = f"{source}[{i}] (height {height})"
        data_now = compute_module_params_json(current)
        if "set" not in entry:
            patch = {k: entry[k] for k in ("params", "extension_params") if k in entry}
            for key, part in patch.items():
                if not isinstance(part, Mapping):
                    raise GovernanceError(f"{where}: '{key}' must be an object")
            _check_params_patch(patch, ModuleParams.DESCRIPTOR, where)
            merged = _deep_merge(data_now, patch, "")
        else:
            changes = entry["set"]
            if not isinstance(changes, Mapping) or not changes:
                raise GovernanceError(f"{where}: 'set' must be a non-empty object")
            merged = data_now
            for path, value in changes.items():
                _set_dotted(merged, str(path), value, where)
        new = _read_params(merged, where)
        out.append((height, new))
        current = new
    return out


def compute_params_with_changes(
    base: ModuleParams, changes: Mapping[str, Any], where: str
) -> ModuleParams:
    """``base`` with each ``{dotted path: value}`` of ``changes`` set (the rules of a governance
    entry's ``"set"``, :data:`GOVERNANCE_HELP`), validated. Raises :class:`GovernanceError`
    starting with ``where`` and naming the path or the rule broken."""
    data = compute_module_params_json(base)
    for path, value in changes.items():
        _set_dotted(data, str(path), value, where)
    return _read_params(data, where)


def _read_params(data: dict[str, Any], where: str) -> ModuleParams:
    """The merged params JSON through the one chain-params reader, validated. A key the
    entry did not give kept its value in the merge, so nothing is absent to fill: a message a
    ``set`` creates where ``null`` was gets zeros for the fields it does not give."""
    try:
        new = parse_module_params_json(data, where=where, fill_absent=False)
        validate_params(new)
    except ChainJsonError as exc:
        raise GovernanceError(str(exc)) from exc
    except InvalidParamsError as exc:
        raise GovernanceError(f"{where}: {exc}") from exc
    return new


def check_governance_schedule(
    governance: Sequence[tuple[int, ModuleParams]], blocks: int
) -> list[tuple[int, ModuleParams]]:
    out: list[tuple[int, ModuleParams]] = []
    for i, (height, params) in enumerate(governance):
        where = f"governance[{i}] (height {height})"
        if isinstance(height, bool) or not isinstance(height, int) or not 1 <= height <= blocks:
            raise GovernanceError(f"{where}: height must be an integer in [1, {blocks}]")
        try:
            validate_params(params)
        except InvalidParamsError as exc:
            raise GovernanceError(f"{where}: {exc}") from exc
        out.append((height, params))
    out.sort(key=lambda item: item[0])  # stable: same-height entries keep their order
    return out
