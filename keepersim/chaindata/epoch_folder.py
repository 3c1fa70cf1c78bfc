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

Every file is required except ``metadata.json``; each must be JSON of the route's shape and of
epoch N (its ``epoch_index`` fields). A problem raises :class:`ChainDataError` naming the file
and the field. Numbers the gateway prints as strings (uint64) are read as integers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keepersim.inputs import InputError, parse_json_input, read_input_bytes
from keepersim.types.epoch_layout import (
    compute_file_name,
    compute_model_file_name,
    get_folder_epoch,
)
from keepersim.types.errors import KeepersimError

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

    def get(self, obj: Any, key: str, where: str, kind: type | tuple[type, ...]) -> Any:
        if not isinstance(obj, Mapping):
            raise self.fail(where or "top level", "expected a JSON object")
        if key not in obj:
            raise self.fail(where or "top level", f"missing field {key!r}")
        value = obj[key]
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise self.fail(_join(where, key), f"expected {_kind_name(kind)}, got {value!r:.60}")
        return value

    def get_uint(self, obj: Any, key: str, where: str, default: int | None = None) -> int:
        """A uint64 field (the gateway prints it as a string); ``default`` when absent."""
        if default is not None and isinstance(obj, Mapping) and obj.get(key) is None:
            return default
        value = self.get(obj, key, where, (str, int))
        text = str(value)
        if not text.isdigit() or len(text) > 20:
            raise self.fail(_join(where, key), f"expected an unsigned integer, got {value!r:.60}")
        return int(text)

    def get_list(self, obj: Any, key: str, where: str) -> list[Any]:
        """A repeated field; absent or null is empty (the gateway omits empty lists)."""
        if isinstance(obj, Mapping) and obj.get(key) is None:
            return []
        return list(self.get(obj, key, where, list))

    def check_epoch(self, obj: Any, where: str, epoch: int) -> None:
        got = self.get_uint(obj, "epoch_index", where)
        if got != epoch:
            raise self.fail(_join(where, "epoch_index"), f"is {got}, expected {epoch}")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {list: "a list", dict: "an object", str: "a string", int: "an integer"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _read_weights(f: _File, group: Any, where: str) -> tuple[tuple[str, int], ...]:
    out: list[tuple[str, int]] = []
    seen: set[str] = set()
    for i, member in enumerate(f.get_list(group, "validation_weights", where)):
        at = f"{where}.validation_weights[{i}]"
        address = f.get(member, "member_address", at, str)
        if not address:
            raise f.fail(f"{at}.member_address", "is empty")
        if address in seen:
            raise f.fail(f"{at}.member_address", f"duplicate member {address!r}")
        seen.add(address)
        out.append((address, f.get_uint(member, "weight", at, default=0)))
    return tuple(out)


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

    params_file = read(compute_file_name("params", epoch))
    params = params_file.get(params_file.data, "params", "", dict)

    g = read(compute_file_name("epoch_group_data", epoch))
    group = g.get(g.data, "epoch_group_data", "", dict)
    where = "epoch_group_data"
    g.check_epoch(group, where, epoch)
    effective = g.get_uint(group, "effective_block_height", where)
    last = g.get_uint(group, "last_block_height", where)
    if last < effective:
        raise g.fail(
            f"{where}.last_block_height",
            f"{last} is before effective_block_height {effective} (the epoch has not ended)",
        )
    requests = g.get_uint(group, "number_of_requests", where, default=0)
    previous = g.get_uint(group, "previous_epoch_requests", where, default=0)
    parent = _read_weights(g, group, where)
    models = g.get_list(group, "sub_group_models", where)
    subgroups: dict[str, tuple[tuple[str, int], ...]] = {}
    subgroup_requests: dict[str, int] = {}
    for i, model in enumerate(models):
        if not isinstance(model, str) or not model:
            raise g.fail(f"{where}.sub_group_models[{i}]", "expected a non-empty string")
        s = read(compute_model_file_name(epoch, model))
        sub = s.get(s.data, "epoch_group_data", "", dict)
        s.check_epoch(sub, where, epoch)
        got = s.get(sub, "model_id", where, str)
        if got != model:
            raise s.fail(f"{where}.model_id", f"is {got!r}, expected {model!r}")
        subgroups[model] = _read_weights(s, sub, where)
        subgroup_requests[model] = s.get_uint(sub, "number_of_requests", where, default=0)

    p = read(compute_file_name("epoch_performance_summary", epoch))
    summaries: list[SummaryRecord] = []
    for i, row in enumerate(p.get_list(p.data, "epochPerformanceSummary", "")):
        at = f"epochPerformanceSummary[{i}]"
        p.check_epoch(row, at, epoch)
        summaries.append(
            SummaryRecord(
                p.get(row, "participant_id", at, str),
                p.get_uint(row, "inference_count", at, default=0),
                p.get_uint(row, "missed_requests", at, default=0),
            )
        )

    x = read(compute_file_name("excluded_participants", epoch))
    exclusions: list[ExclusionRecord] = []
    for i, row in enumerate(x.get_list(x.data, "items", "")):
        at = f"items[{i}]"
        x.check_epoch(row, at, epoch)
        exclusions.append(
            ExclusionRecord(
                x.get(row, "address", at, str),
                x.get_uint(row, "exclusion_block_height", at),
                x.get(row, "reason", at, str),
            )
        )

    c = read(compute_file_name("confirmation_poc_events", epoch))
    events: list[Mapping[str, Any]] = []
    for i, row in enumerate(c.get_list(c.data, "events", "")):
        at = f"events[{i}]"
        c.check_epoch(row, at, epoch)
        events.append(
            {
                "event_sequence": c.get_uint(row, "event_sequence", at, default=0),
                "trigger_height": c.get_uint(row, "trigger_height", at),
                "generation_start_height": c.get_uint(row, "generation_start_height", at, 0),
                "phase": str(row.get("phase", "")),
            }
        )
    return EpochRecord(
        epoch=epoch,
        folder=root,
        effective_block_height=effective,
        last_block_height=last,
        number_of_requests=requests,
        previous_epoch_requests=previous,
        parent_weights=parent,
        subgroups=subgroups,
        subgroup_requests=subgroup_requests,
        summaries=tuple(summaries),
        exclusions=tuple(exclusions),
        cpoc_events=tuple(events),
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
