"""The epoch's live params as the fleet uses them: the one place ``params.json`` becomes a
scenario's ``params`` patch.

The node's answer goes through the one reader of the chain's params JSON
(:func:`~keepersim.types.chain_params_json.parse_chain_params`: an older node's absent fields are
filled as the upgrade handlers fill them, with a warning naming each). The patch is every field of
the live params except ``epoch_params``: the fleet covers the epoch's effective blocks as one
epoch after its PoC, so the live epoch length and PoC stage durations would open the run with a
PoC phase the record does not describe. They are kept as recorded in the scenario's ``source``
(:func:`get_epoch_timing`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from keepersim.types.chain_params_json import parse_chain_params

__all__ = ["compute_epoch_params_patch", "get_epoch_timing"]


def compute_epoch_params_patch(params: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """The scenario ``params`` patch from the body of ``params.json`` (its ``params``): the live
    params, read by the shared reader, without ``epoch_params``. Raises ChainJsonError naming
    the file and field."""
    parsed = parse_chain_params(params, where=f"{path}: params")
    parsed.ClearField("epoch_params")
    patch: dict[str, Any] = json_format.MessageToDict(
        parsed, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    patch.pop("epoch_params", None)
    return patch


def get_epoch_timing(params: Mapping[str, Any]) -> dict[str, Any]:
    """The epoch_params of the file as recorded (for the scenario's ``source``)."""
    epoch = params.get("epoch_params")
    return dict(epoch) if isinstance(epoch, Mapping) else {}
