"""One epoch of the chain's REST answers, read and checked: ``epoch_N/`` holding

* ``params.json`` (route ``params``),
* ``epoch_group_data_N.json`` (the parent group: heights, ``number_of_requests``,
  ``sub_group_models``),
* ``epoch_group_data_N__MODEL.json`` for each of its ``sub_group_models`` (``/`` written ``_``:
  the sub-group's members and weights),
* ``epoch_performance_summary_N.json`` (per participant ``inference_count``,
  ``missed_requests``),
* ``excluded_participants_N.json`` (who was excluded, at which height, why),
* ``confirmation_poc_events_N.json`` (the epoch's confirmation-PoC rounds),
* ``metadata.json`` (optional: when and whence the files were fetched; not read).

Every file is required except ``metadata.json``; each is read with the chain's own messages by
the layout's one check (``types.epoch_layout.check_answer``, as ``export --aggregate`` checks
what it writes): the route's shape, epoch N in every record, a sub-group's model. A problem
raises :class:`ChainDataError` naming the file and the field.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from keepersim.inputs import InputError, parse_json_input, read_input_bytes
from keepersim.types.epoch_layout import (
    AggregateFile,
    check_answer,
    compute_file_name,
    compute_model_file_name,
    get_folder_epoch,
)
from keepersim.types.errors import KeepersimError
from keepersim.types.messages import EpochGroupData
from keepersim.types.pb.inference.inference.confirmation_poc_event_pb2 import (
    ConfirmationPoCPhase,
)

__all__ = [
    "ChainDataError",
    "EpochRecord",
    "ExclusionRecord",
    "SummaryRecord",
    "find_epoch_folders",
    "load_epoch_folder",
]


class ChainDataError(KeepersimError, ValueError):
    """A file of an epoch folder is missing, unreadable, not JSON, or not of the route's shape
    or of the epoch (the message names the file and field)."""


@dataclass(frozen=True, slots=True)
class SummaryRecord:
    """A participant's epoch performance summary (only the counts keepersim reads)."""

    address: str
    inference_count: int
    missed_requests: int


@dataclass(frozen=True, slots=True)
class ExclusionRecord:
    address: str
    height: int
    reason: str


@dataclass(frozen=True, slots=True)
class EpochRecord:
    """What one epoch folder holds, checked. ``subgroups``: model -> ((address, weight), ...)
    in the file's order; ``files``: file name -> sha256 of its bytes."""

    epoch: int
    folder: Path
    effective_block_height: int
    last_block_height: int
    number_of_requests: int
    previous_epoch_requests: int
    parent_weights: tuple[tuple[str, int], ...]
    subgroups: Mapping[str, tuple[tuple[str, int], ...]]
    #: Each sub-group's own ``number_of_requests`` (0 in every file seen so far).
    subgroup_requests: Mapping[str, int]
    summaries: tuple[SummaryRecord, ...]
    exclusions: tuple[ExclusionRecord, ...]
    cpoc_events: tuple[Mapping[str, Any], ...]
    params: Mapping[str, Any]
    files: Mapping[str, str] = field(default_factory=dict)

    @property
    def blocks(self) -> int:
        """The epoch's blocks, ``effective_block_height .. last_block_height`` inclusive."""
        return self.last_block_height - self.effective_block_height + 1

    def get_recorded_inferences(self) -> int:
        """Every inference the summaries count (the total only; devshard's included)."""
        return sum(s.inference_count for s in self.summaries)

    def get_recorded_requests(self) -> int:
        """Every request the summaries count: inferences plus misses (the total only)."""
        return sum(s.inference_count + s.missed_requests for s in self.summaries)


def find_epoch_folders(path: str | Path) -> list[Path]:
    """``path`` itself if it is an ``epoch_N`` folder, else its ``epoch_N`` subfolders in epoch
    order. Raises :class:`ChainDataError` when there is none."""
    root = Path(path)
    if not root.is_dir():
        raise ChainDataError(f"{root}: not a folder (expected epoch_N/ or a folder holding them)")
    if get_folder_epoch(root.name) is not None:
        return [root]
    found = [p for p in root.iterdir() if p.is_dir() and get_folder_epoch(p.name) is not None]
    if not found:
        raise ChainDataError(
            f"{root}: a folder with no epoch_N/ folder in it (expected a scenario file, a "
            "built-in scenario name, or a chain epoch folder epoch_N/ or one holding them)"
        )
    return sorted(found, key=lambda p: get_folder_epoch(p.name) or 0)


class _File:
    """One JSON file of the folder: its decoded body, its sha256, and errors naming it."""

    def __init__(self, folder: Path, name: str) -> None:
        self.path = folder / name
        self.name = name
        if not self.path.exists() and not self.path.is_symlink():
            raise ChainDataError(f"{self.path}: missing (a required file of the epoch)")
        # The one reader of input files: stat first (a FIFO or device is refused, not read),
        # the size and depth limits, one problem per line.
        try:
            raw = read_input_bytes(self.path, "epoch file")
            self.data: Any = parse_json_input(raw, str(self.path), "epoch file")
        except InputError as exc:
            raise ChainDataError(str(exc)) from exc
        self.sha256 = hashlib.sha256(raw).hexdigest()

    def fail(self, where: str, what: str) -> ChainDataError:
        return ChainDataError(f"{self.path}: {where}: {what}")

    def read_records(self, file: AggregateFile) -> list[Message]:
        """The answer's records as the chain's messages, through the layout's one check
        (``epoch_layout.check_answer``: the route's shape, epoch N, a group's model). Fields a
        newer chain added are left out, as the export leaves them."""
        try:
            return check_answer(file, self.data, str(self.path), ignored=[])
        except ValueError as exc:
            raise ChainDataError(str(exc)) from exc


def _read_weights(f: _File, group: EpochGroupData, where: str) -> tuple[tuple[str, int], ...]:
    out: list[tuple[str, int]] = []
    seen: set[str] = set()
    for i, member in enumerate(group.validation_weights):
        at = f"{where}.validation_weights[{i}]"
        address = member.member_address
        if not address:
            raise f.fail(f"{at}.member_address", "is empty")
        if address in seen:
            raise f.fail(f"{at}.member_address", f"duplicate member {address!r}")
        if member.weight < 0:
            raise f.fail(f"{at}.weight", f"expected a weight >= 0, got {member.weight}")
        seen.add(address)
        out.append((address, member.weight))
    return tuple(out)


def _read_group(f: _File, epoch: int, model: str = "") -> EpochGroupData:
    (group,) = f.read_records(AggregateFile(f.name, "epoch_group_data", epoch, model))
    assert isinstance(group, EpochGroupData)
    return group


def load_epoch_folder(folder: str | Path) -> EpochRecord:
    """Read and check one ``epoch_N`` folder (see the module docstring)."""
    root = Path(folder)
    epoch = get_folder_epoch(root.name)
    if epoch is None or not root.is_dir():
        raise ChainDataError(f"{root}: not an epoch folder (expected a folder named epoch_N)")
    files: dict[str, str] = {}

    def read(name: str) -> _File:
        f = _File(root, name)
        files[name] = f.sha256
        return f

    # params stay JSON: their one reader is chain_params_json (through epoch_params), which
    # fills what an older node lacks and names what a newer one adds.
    params_file = read(compute_file_name("params", epoch))
    params = params_file.data.get("params") if isinstance(params_file.data, dict) else None
    if not isinstance(params, dict):
        raise params_file.fail("params", "expected an object (the route's answer)")

    g = read(compute_file_name("epoch_group_data", epoch))
    group = _read_group(g, epoch)
    where = "epoch_group_data"
    effective = group.effective_block_height
    last = group.last_block_height
    if last < effective:
        raise g.fail(
            f"{where}.last_block_height",
            f"{last} is before effective_block_height {effective} (the epoch has not ended)",
        )
    parent = _read_weights(g, group, where)
    subgroups: dict[str, tuple[tuple[str, int], ...]] = {}
    subgroup_requests: dict[str, int] = {}
    for i, model in enumerate(group.sub_group_models):
        if not model:
            raise g.fail(f"{where}.sub_group_models[{i}]", "expected a non-empty string")
        s = read(compute_model_file_name(epoch, model))
        sub = _read_group(s, epoch, model)
        subgroups[model] = _read_weights(s, sub, where)
        subgroup_requests[model] = sub.number_of_requests

    def records(kind: str) -> list[Any]:
        f = read(compute_file_name(kind, epoch))
        return f.read_records(AggregateFile(f.name, kind, epoch))

    summaries = tuple(
        SummaryRecord(s.participant_id, s.inference_count, s.missed_requests)
        for s in records("epoch_performance_summary")
    )
    exclusions = tuple(
        ExclusionRecord(x.address, x.exclusion_block_height, x.reason)
        for x in records("excluded_participants")
    )
    events = tuple(
        {
            "event_sequence": c.event_sequence,
            "trigger_height": c.trigger_height,
            "generation_start_height": c.generation_start_height,
            "phase": ConfirmationPoCPhase.Name(c.phase),
        }
        for c in records("confirmation_poc_events")
    )
    return EpochRecord(
        epoch=epoch,
        folder=root,
        effective_block_height=effective,
        last_block_height=last,
        number_of_requests=group.number_of_requests,
        previous_epoch_requests=group.previous_epoch_requests,
        parent_weights=parent,
        subgroups=subgroups,
        subgroup_requests=subgroup_requests,
        summaries=summaries,
        exclusions=exclusions,
        cpoc_events=events,
        params=params,
        files=dict(sorted(files.items())),
    )


def load_epoch_source(path: str | Path, epochs: Sequence[int] | None = None) -> list[EpochRecord]:
    """Every epoch folder of ``path`` (see :func:`find_epoch_folders`), or those of ``epochs``
    (an epoch asked for and absent is an error)."""
    folders = find_epoch_folders(path)
    if epochs is not None:
        by_epoch = {get_folder_epoch(f.name) or 0: f for f in folders}
        missing = [e for e in epochs if e not in by_epoch]
        if missing:
            raise ChainDataError(
                f"{path}: no folder for epoch(s) {', '.join(map(str, missing))} "
                f"(has {', '.join(map(str, sorted(by_epoch))) or 'none'})"
            )
        folders = [by_epoch[e] for e in epochs]
    return [load_epoch_folder(f) for f in folders]
