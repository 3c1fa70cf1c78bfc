"""The devshard path of a fleet built from an epoch whose traffic went through devshard escrows.

From epoch 251 the summaries count far more inferences than the parent group's
``number_of_requests`` (``fleet.DEVSHARD_RATIO``): the group counts the completed inferences of
``MsgStartInference`` traffic only, the rest came through devshard escrows (gonka ee730031,
``x/inference/keeper/devshard_host_stats.go:114-118`` adds a settled escrow's completed
inferences to the same ``inference_count``). Such a fleet runs with the scenario key
``devshard`` (:mod:`keepersim.sim.devshard_path`): its ``share`` is the part of the recorded
requests that was not classic, ``1 - classic / recorded`` with ``classic`` the group's completed
requests plus their share of the misses (``number_of_requests x recorded / inferences``):
0.78 in epoch 251, 0.99 in 252. Only epochs whose summaries count at least
:data:`DEVSHARD_PATH_RATIO` times the group's inferences take the path (251: 4.5x, 252: 191x):
248's 1.24x is over ``DEVSHARD_RATIO`` but the data does not say where its extra traffic came
from (docs/mainnet-epochs.md), so it stays "not modelled". The other keys keep their defaults (16 slots from the params,
1,000 nonces per escrow, 5 s blocks).
"""

from __future__ import annotations

from typing import Any, Final

from keepersim.chaindata.epoch_folder import EpochRecord

__all__ = [
    "DEVSHARD_PATH",
    "DEVSHARD_PATH_RATIO",
    "SELECTION_PATHS",
    "compute_devshard_key",
    "is_devshard_epoch",
]

#: Summaries' inferences / the group's ``number_of_requests`` from which most of an epoch's
#: traffic is devshard's (module docstring).
DEVSHARD_PATH_RATIO: Final = 2.0

#: ``source.selection_path`` of a fleet that runs its devshard traffic on the devshard path.
DEVSHARD_PATH: Final = "devshard"
#: ``auto``: devshard epochs on the devshard path; ``classic``: every request through
#: ``MsgStartInference`` (the selection path then says "not modelled: devshard").
SELECTION_PATHS: Final = ("auto", "classic")


def is_devshard_epoch(record: EpochRecord) -> bool:
    """Whether most of the epoch's traffic went through devshard (module docstring)."""
    done = record.get_recorded_inferences()
    return done >= DEVSHARD_PATH_RATIO * record.number_of_requests and done > 0


def compute_devshard_key(record: EpochRecord) -> dict[str, Any]:
    """The scenario's ``devshard`` object for a devshard epoch (module docstring)."""
    recorded = record.get_recorded_requests()
    done = record.get_recorded_inferences()
    if not recorded or not done:
        return {"share": 1.0}
    classic = record.number_of_requests * recorded / done
    return {"share": round(max(0.0, min(1.0, 1.0 - classic / recorded)), 6)}
