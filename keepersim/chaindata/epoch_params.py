"""The epoch's live params as the fleet uses them: the one place ``params.json`` becomes a
scenario's ``params`` patch.

The node's answer goes through the one reader of the chain's params JSON
(:func:`~keepersim.types.chain_params_json.parse_chain_params`: an older node's absent fields are
filled as the upgrade handlers fill them, with a warning naming each). The patch is every field of
the live params except ``epoch_params``: the fleet covers the epoch's effective blocks as one
epoch after its PoC, so the live epoch length and PoC stage durations would open the run with a
PoC phase the record does not describe. They are kept as recorded in the scenario's ``source``
(:func:`get_epoch_timing`).

A node newer than keepersim's vendored v0.2.14 protos prints fields they do not have (the
gateway prints every field its binary knows). Such a field cannot act in keepersim's rules, so
it is left out of the patch with one ``keepersim: warning:`` line naming each path, as
``export`` lists them in ``unknown_fields`` (docs/mainnet-epochs.md, "The folder"); a value of
a known field that does not fit stays an error.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from keepersim.types.chain_params_json import parse_chain_params

__all__ = ["compute_epoch_params_patch", "get_epoch_timing", "warn_unknown"]


def compute_epoch_params_patch(params: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """The scenario ``params`` patch from the body of ``params.json`` (its ``params``): the live
    params, read by the shared reader, without ``epoch_params``. Raises ChainJsonError naming
    the file and field; warns of fields unknown to v0.2.14 (:func:`warn_unknown`)."""
    where = f"{path}: params"
    ignored: list[str] = []
    parsed = parse_chain_params(params, where=where, ignore_unknown=True, ignored=ignored)
    if ignored:
        warn_unknown(where, ignored)
    parsed.ClearField("epoch_params")
    patch: dict[str, Any] = json_format.MessageToDict(
        parsed, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    patch.pop("epoch_params", None)
    return patch


def warn_unknown(where: str, paths: list[str]) -> None:
    """One ``keepersim: warning:`` line on stderr naming the fields left out."""
    print(
        f"keepersim: warning: {where}: {len(paths)} field(s) unknown to keepersim's v0.2.14 "
        f"params (a newer node), left out of the scenario: {', '.join(paths)}",
        file=sys.stderr,
    )


def get_epoch_timing(params: Mapping[str, Any]) -> dict[str, Any]:
    """The epoch_params of the file as recorded (for the scenario's ``source``)."""
    epoch = params.get("epoch_params")
    return dict(epoch) if isinstance(epoch, Mapping) else {}
