"""The epoch's live params as the fleet uses them: the one place ``params.json`` becomes a
scenario's ``params`` patch.

Interim: only the few fields a fleet needs are read (``validation_params.expiration_blocks`` and
the downtime SPRT thresholds; the epoch timing is recorded in the scenario's ``source``), each
checked by the chain's own JSON reader (:func:`~keepersim.types.chain_json.parse_chain_json`,
newer fields ignored and listed). A shared reader of the whole params JSON (absent fields filled
as the upgrade handlers set them) replaces :func:`compute_epoch_params_patch` when it lands; note
then that the PoC stage durations must stay out of the patch (the fleet covers the epoch's
effective blocks, after its PoC: keepersim would otherwise open the run with a PoC phase).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from keepersim.types.chain_json import compute_chain_json, parse_chain_json
from keepersim.types.errors import ChainJsonError
from keepersim.types.messages import Params

__all__ = ["EPOCH_PARAMS_FIELDS", "compute_epoch_params_patch", "get_epoch_timing"]

#: The ``validation_params`` fields the fleet takes from the epoch's params.
EPOCH_PARAMS_FIELDS: Final = (
    "expiration_blocks",
    "downtime_good_percentage",
    "downtime_bad_percentage",
    "downtime_h_threshold",
)


def compute_epoch_params_patch(params: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """The scenario ``params`` patch from the body of ``params.json`` (its ``params``): the
    :data:`EPOCH_PARAMS_FIELDS` present in the file. Raises ChainJsonError naming the file."""
    validation = params.get("validation_params")
    picked = {
        k: v
        for k, v in (validation.items() if isinstance(validation, Mapping) else ())
        if k in EPOCH_PARAMS_FIELDS and v is not None
    }
    ignored: list[str] = []
    where = f"{path}: params"
    try:
        parsed = parse_chain_json(
            {"validation_params": picked},
            Params,
            where=where,
            ignore_unknown=True,
            ignored=ignored,
        )
    except ChainJsonError:
        raise
    printed = compute_chain_json(parsed).get("validation_params", {})
    return {"validation_params": {k: printed[k] for k in EPOCH_PARAMS_FIELDS if k in picked}}


def get_epoch_timing(params: Mapping[str, Any]) -> dict[str, Any]:
    """The epoch_params of the file as recorded (for the scenario's ``source``)."""
    epoch = params.get("epoch_params")
    return dict(epoch) if isinstance(epoch, Mapping) else {}
