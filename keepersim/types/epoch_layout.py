"""The layout of ``keepersim export --aggregate`` (pure): an epoch folder's files, the route each
is the answer of, how an answer is checked and printed, and the folder's ``metadata.json``.

The layout is that of the shared mainnet data (``../shared/data/gonka-mainnet``, its README):
per epoch N a folder ``epoch_N/`` with ``params.json``, ``epoch_group_data_N.json``,
``epoch_group_data_N__MODEL.json`` per model sub-group (each ``/`` of the model id as ``_``),
``epoch_performance_summary_N.json``, ``excluded_participants_N.json``,
``confirmation_poc_events_N.json`` and ``metadata.json``. Each file is one answer's JSON body
printed as those files are: indent 2, keys sorted, a final newline (so an export of the same
answers gives the same bytes). None of these routes is paginated on the chain
(``x/inference/keeper/query_*.go`` at ee730031 return whole lists).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from keepersim.types.chain_json import parse_chain_json
from keepersim.types.errors import ChainJsonError
from keepersim.types.messages import (
    ConfirmationPoCEvent,
    EpochGroupData,
    EpochPerformanceSummary,
    ExcludedParticipant,
    Params,
)
from keepersim.types.rest_routes import (
    CONFIRMATION_POC_EVENTS,
    EPOCH_GROUP_DATA,
    EPOCH_PERFORMANCE_SUMMARY,
    EXCLUDED_PARTICIPANTS,
    PARAMS,
    compute_route_path,
)

__all__ = [
    "METADATA_FILE",
    "AggregateFile",
    "AggregateKind",
    "KINDS",
    "check_answer",
    "compute_aggregate_text",
    "compute_epoch_files",
    "compute_epoch_folder",
    "compute_file_entry",
    "compute_file_name",
    "compute_metadata",
    "compute_model_file_name",
    "compute_model_files",
    "get_folder_epoch",
]

METADATA_FILE = "metadata.json"


@dataclass(frozen=True, slots=True)
class AggregateKind:
    """One route's answer: its template, the body's key, the chain message of its records, and
    whether the key holds a list; ``epoch_field`` names the records' epoch (checked to be N)."""

    name: str
    template: str
    key: str
    message: type[Message]
    repeated: bool
    epoch_field: str | None = "epoch_index"


KINDS: dict[str, AggregateKind] = {
    k.name: k
    for k in (
        AggregateKind("params", PARAMS, "params", Params, False, None),
        AggregateKind(
            "epoch_group_data", EPOCH_GROUP_DATA, "epoch_group_data", EpochGroupData, False
        ),
        AggregateKind(
            "epoch_performance_summary",
            EPOCH_PERFORMANCE_SUMMARY,
            "epochPerformanceSummary",
            EpochPerformanceSummary,
            True,
        ),
        AggregateKind(
            "excluded_participants", EXCLUDED_PARTICIPANTS, "items", ExcludedParticipant, True
        ),
        AggregateKind(
            "confirmation_poc_events",
            CONFIRMATION_POC_EVENTS,
            "events",
            ConfirmationPoCEvent,
            True,
        ),
    )
}


@dataclass(frozen=True, slots=True)
class AggregateFile:
    """One file of an epoch folder: its name, kind, and the request (path and query)."""

    name: str
    kind: str
    epoch: int
    model: str = ""

    @property
    def route(self) -> str:
        return KINDS[self.kind].template

    @property
    def path(self) -> str:
        if self.kind == "params":
            return PARAMS
        return compute_route_path(self.route, epoch_index=self.epoch)

    @property
    def params(self) -> dict[str, str] | None:
        return {"model_id": self.model} if self.model else None


def compute_epoch_folder(epoch: int) -> str:
    return f"epoch_{epoch}"


def get_folder_epoch(name: str) -> int | None:
    """N of a folder named ``epoch_N`` (:func:`compute_epoch_folder`), else None."""
    match = re.fullmatch(r"epoch_(\d+)", name)
    return None if match is None else int(match.group(1))


def compute_file_name(kind: str, epoch: int) -> str:
    """The file of ``kind`` (a key of :data:`KINDS`) for epoch N: ``params.json``, or
    ``KIND_N.json`` (a model sub-group's: :func:`compute_model_file_name`)."""
    return "params.json" if kind == "params" else f"{kind}_{epoch}.json"


def compute_model_file_name(epoch: int, model_id: str) -> str:
    """``epoch_group_data_N__MODEL.json``, each ``/`` of the model id as ``_`` (the shared
    files: ``Qwen/Qwen3-235B-A22B-Instruct-2507-FP8`` -> ``Qwen_Qwen3-235B-A22B-...``)."""
    return f"epoch_group_data_{epoch}__{model_id.replace('/', '_')}.json"


def compute_epoch_files(epoch: int) -> tuple[list[AggregateFile], list[AggregateFile]]:
    """An epoch's files in the shared metadata's order, before and after the model sub-groups
    (which need the parent group's ``sub_group_models``: :func:`compute_model_files`)."""

    def file(kind: str) -> AggregateFile:
        return AggregateFile(compute_file_name(kind, epoch), kind, epoch)

    before = [
        file(kind)
        for kind in (
            "params",
            "epoch_group_data",
            "epoch_performance_summary",
            "excluded_participants",
        )
    ]
    return before, [file("confirmation_poc_events")]


def compute_model_files(epoch: int, models: Sequence[str]) -> list[AggregateFile]:
    """The model sub-groups' files, in ``sub_group_models`` order; two models whose ids map to
    one file name raise ValueError (one would overwrite the other)."""
    files = [
        AggregateFile(compute_model_file_name(epoch, m), "epoch_group_data", epoch, m)
        for m in models
    ]
    names = [f.name for f in files]
    if len(set(names)) != len(names):
        raise ValueError(f"epoch {epoch}: model ids {list(models)} map to the same file name")
    return files


def check_answer(file: AggregateFile, body: Any, where: str, ignored: list[str]) -> list[Message]:
    """The records of one answer, read with the chain's messages (fields a newer chain added are
    appended to ``ignored`` by path), each of epoch N (a group also of its model); raises
    ValueError naming ``where`` and what is wrong."""
    kind = KINDS[file.kind]
    if not isinstance(body, dict) or kind.key not in body:
        raise ValueError(f"{where}: the answer has no {kind.key!r} field")
    value = body[kind.key]
    if kind.repeated and not isinstance(value, list):
        raise ValueError(f"{where}: {kind.key!r} is not a list")
    records = value if kind.repeated else [value]
    out: list[Message] = []
    for i, record in enumerate(records):
        at = f"{where}: {kind.key}" + (f"[{i}]" if kind.repeated else "")
        if not isinstance(record, dict):
            raise ValueError(f"{at}: expected a {kind.message.__name__} object")
        try:
            message = parse_chain_json(
                record, kind.message, where=at, ignore_unknown=True, ignored=ignored
            )
        except ChainJsonError as exc:
            raise ValueError(f"{exc} (as {kind.message.__name__})") from exc
        if kind.epoch_field is not None:
            got = getattr(message, kind.epoch_field)
            if got != file.epoch:
                raise ValueError(f"{at}.{kind.epoch_field}: expected epoch {file.epoch}, got {got}")
        if isinstance(message, EpochGroupData) and message.model_id != file.model:
            raise ValueError(f"{at}.model_id: expected {file.model!r}, got {message.model_id!r}")
        out.append(message)
    return out


def compute_aggregate_text(body: Any) -> str:
    """An answer's body printed as the shared files are: indent 2, keys sorted, newline."""
    return json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def compute_file_entry(epoch: int, name: str, data: bytes) -> dict[str, Any]:
    """The metadata's ``files`` entry: path (relative to ``--out``), sha256, size."""
    return {
        "path": f"{compute_epoch_folder(epoch)}/{name}",
        "sha256": hashlib.sha256(data).hexdigest(),
        "size_bytes": len(data),
    }


def compute_metadata(
    *,
    epoch: int,
    node_url: str,
    endpoints: list[dict[str, Any]],
    files: dict[str, dict[str, Any]],
    fetched_at_utc: str,
    pinned_height: int,
    block_time: str | None,
    latest_epoch: int,
    api_base: str,
) -> dict[str, Any]:
    """``metadata.json``: the shared one's keys (``endpoints`` with each file's ``status``,
    ``epoch``, ``fetched_at_utc``, ``files``, ``mode``, ``node_url``), each endpoint also with
    its ``route`` and ``url``, and the pin every answer was read at (``pinned_height``, its
    ``block_time`` when the node serves blocks, ``latest_epoch``, ``api_base``).
    ``fetched_at_utc`` is the wall clock of the snapshot: a record, it decides nothing."""
    return {
        "api_base": api_base,
        "block_time": block_time,
        "endpoints": endpoints,
        "epoch": epoch,
        "fetched_at_utc": fetched_at_utc,
        "files": dict(sorted(files.items())),
        "latest_epoch": latest_epoch,
        "mode": "live",
        "node_url": node_url,
        "pinned_height": pinned_height,
        "source": "keepersim export --aggregate",
    }
