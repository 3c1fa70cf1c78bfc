"""A stand-in mainnet node: the real epochs 247-252 of ``../shared/data/gonka-mainnet`` as its
state (their inferences pruned, as on mainnet; the aggregates kept).

Each epoch folder holds one mainnet node's answers (``README.md`` there): ``params``,
``epoch_group_data/N`` and ``?model_id=`` per model sub-group, ``epoch_performance_summary/N``,
``excluded_participants/N`` and ``confirmation_poc_events/N``. :func:`build_mainnet_history`
reads every record with the chain's messages (strictly: a field v0.2.14's protos do not know
fails), so the stand-in answers by printing its state as every other route does
(:meth:`ChainSnapshot.render`). The recording node predated some v0.2.14 fields (a params
message's newer fields, ``EpochGroupData.confirmation_weight_scales``): the fields the state
prints but no recorded answer holds become the snapshot's ``omitted_fields``, so the stand-in
answers as that node did (the raw gateway bodies among the files come back byte for byte:
tests/standin/test_mainnet.py).

The node is at the last height the files name (epoch 252's ``last_block_height``) with 252 as
its latest epoch; ``params`` is the latest folder's (the same file in every folder).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mainnet_data import get_mainnet_data_dir

from keepersim.types.chain_json import compute_chain_json, parse_chain_json
from keepersim.types.epoch_layout import compute_model_file_name
from keepersim.types.messages import (
    ConfirmationPoCEvent,
    Epoch,
    EpochGroupData,
    EpochPerformanceSummary,
    ExcludedParticipant,
    Params,
)
from standin.chain_node import ChainHistory, ChainSnapshot

__all__ = [
    "MAINNET_CHAIN_ID",
    "MAINNET_DATA",
    "MAINNET_EPOCHS",
    "build_mainnet_history",
    "get_mainnet_files",
]

ROOT = Path(__file__).resolve().parents[2]
#: The shared data (tests/mainnet_data.py says where it is looked for).
MAINNET_DATA = get_mainnet_data_dir() or Path("shared/data/gonka-mainnet (not found)")
MAINNET_EPOCHS = tuple(range(247, 253))
MAINNET_CHAIN_ID = "gonka-mainnet"


def get_mainnet_files(epoch: int, data: Path = MAINNET_DATA) -> dict[str, Any]:
    """The JSON bodies of one epoch folder, by file name (``metadata.json`` left out)."""
    folder = data / f"epoch_{epoch}"
    return {
        p.name: json.loads(p.read_text(encoding="utf-8"))
        for p in sorted(folder.glob("*.json"))
        if p.name != "metadata.json"
    }


def _collect_omitted(descriptor: Any, printed: Any, recorded: Any, out: set[str]) -> None:
    """Fields ``printed`` (compute_chain_json) has and ``recorded`` lacks, by message name."""
    if isinstance(printed, list):
        for p, r in zip(printed, recorded, strict=True):
            _collect_omitted(descriptor, p, r, out)
        return
    if not isinstance(printed, dict) or not isinstance(recorded, dict):
        return
    for fd in descriptor.fields:
        if fd.name not in recorded:
            out.add(f"{descriptor.full_name}.{fd.name}")
        elif fd.message_type is not None and not fd.message_type.GetOptions().map_entry:
            _collect_omitted(fd.message_type, printed.get(fd.name), recorded[fd.name], out)


def _parse_all(items: Iterable[Any], cls: type[Any], where: str, omitted: set[str]) -> list[Any]:
    out = []
    for item in items:
        message = parse_chain_json(item, cls, where=where)
        _collect_omitted(message.DESCRIPTOR, compute_chain_json(message), item, omitted)
        out.append(message)
    return out


def build_mainnet_history(
    data: Path = MAINNET_DATA, epochs: Iterable[int] = MAINNET_EPOCHS
) -> ChainHistory:
    """One snapshot holding ``epochs`` of the shared mainnet data (see the module docstring)."""
    omitted: set[str] = set()
    groups: list[EpochGroupData] = []
    summaries: list[EpochPerformanceSummary] = []
    excluded: list[ExcludedParticipant] = []
    events: list[ConfirmationPoCEvent] = []
    epoch_messages: list[Epoch] = []
    params = Params()
    heights: list[int] = []
    for epoch in sorted(epochs):
        files = get_mainnet_files(epoch, data)
        where = f"{data}/epoch_{epoch}"
        (params,) = _parse_all([files["params.json"]["params"]], Params, where, omitted)
        parent_body = files[f"epoch_group_data_{epoch}.json"]["epoch_group_data"]
        (parent,) = _parse_all([parent_body], EpochGroupData, where, omitted)
        groups.append(parent)
        for model in parent.sub_group_models:
            body = files[compute_model_file_name(epoch, model)]["epoch_group_data"]
            groups.extend(_parse_all([body], EpochGroupData, where, omitted))
        summaries.extend(
            _parse_all(
                files[f"epoch_performance_summary_{epoch}.json"]["epochPerformanceSummary"],
                EpochPerformanceSummary,
                where,
                omitted,
            )
        )
        excluded.extend(
            _parse_all(
                files[f"excluded_participants_{epoch}.json"]["items"],
                ExcludedParticipant,
                where,
                omitted,
            )
        )
        events.extend(
            _parse_all(
                files[f"confirmation_poc_events_{epoch}.json"]["events"],
                ConfirmationPoCEvent,
                where,
                omitted,
            )
        )
        epoch_messages.append(
            Epoch(index=epoch, poc_start_block_height=parent.poc_start_block_height)
        )
        heights += [parent.effective_block_height, parent.last_block_height]
    snapshot = ChainSnapshot(
        height=max(heights),
        params=params,
        effective_epoch=max(e.index for e in epoch_messages),
        epochs=tuple(epoch_messages),
        participants=(),
        epoch_groups=tuple(groups),
        inferences=(),
        summaries=tuple(summaries),
        excluded=tuple(excluded),
        confirmation_poc_events=tuple(events),
        omitted_fields=frozenset(omitted),
    )
    return ChainHistory(snapshots=(snapshot,), chain_id=MAINNET_CHAIN_ID)
