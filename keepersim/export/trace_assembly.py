"""The last step of a trace export: the trace assembled from the part files of the progress file
(:mod:`keepersim.export.progress_file`) and written atomically through the trace writer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message

from keepersim.export.chain_api import EpochMembers, compute_epoch_participants
from keepersim.export.export_run import ExportError, ExportResult
from keepersim.export.trace_io import TraceWriter
from keepersim.outputs import get_atomic_path
from keepersim.types.messages import (
    EpochPerformanceSummary,
    Inference,
    Params,
    Participant,
    ValidationWeight,
)
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams, ModuleParams
from keepersim.types.pb.keepersim.v1.state_pb2 import EpochDeclines, ParticipantNodes

__all__ = [
    "assemble_trace",
    "compute_group_weights",
    "read_messages",
    "read_part",
]

M = TypeVar("M", bound=Message)


def read_part(parts: Path, progress_path: Path, file_name: str) -> Iterator[str]:
    """The lines of a part file (a missing one: the progress file names a part that is gone)."""
    path = parts / file_name
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    yield line.rstrip("\n")
    except FileNotFoundError:
        raise ExportError(
            f"part file {path} named by {progress_path} is missing; rerun with --restart"
        ) from None


def read_messages(parts: Path, progress_path: Path, file_name: str, cls: type[M]) -> Iterator[M]:
    for line in read_part(parts, progress_path, file_name):
        yield json_format.ParseDict(json.loads(line), cls())


def assemble_trace(
    out: Path,
    parts: Path,
    progress_path: Path,
    snapshot: dict[str, Any],
    data: dict[str, Any],
    epochs: tuple[int, int],
    result: ExportResult,
) -> None:
    """Write the trace through the trace writer: params at epoch A's formation height, a
    participants line per epoch (members of its group, the group's weights, their models
    and ML nodes) at its formation height, each settled epoch's summaries at the next
    epoch's formation height, and the inferences."""
    snap = snapshot
    a, b = epochs
    listed: list[Participant] = []
    for page in data["listings"]["participants"]["pages"]:
        listed.extend(read_messages(parts, progress_path, page["file"], Participant))
    inferences: list[Inference] = []
    for page in data["listings"]["inferences"]["pages"]:
        inferences.extend(read_messages(parts, progress_path, page["file"], Inference))
    params = ModuleParams(
        params=json_format.ParseDict(snap["params"], Params()),
        extension_params=json_format.ParseDict(snap["extension_params"], ExtensionParams()),
    )
    counts = {"params": 1, "participants": 0, "inferences": len(inferences)}
    summaries_written = 0
    missing: list[str] = []
    with get_atomic_path(out) as tmp:
        writer = TraceWriter(
            tmp,
            chain_id=snap["chain_id"],
            first_height=snap["first_height"],
            last_height=snap["last_height"],
            policy=snap["policy"] or None,
            source="export",
        )
        try:
            writer.add_params(snap["epochs"][str(a)]["formed_at"], params)
            for epoch in range(a, b + 1):
                members = snap["members"][str(epoch)]
                epoch_members = EpochMembers(
                    weights={k: int(v) for k, v in members["weights"].items()},
                    reputations={k: int(v) for k, v in members["reputations"].items()},
                    nodes=[json_format.ParseDict(n, ParticipantNodes()) for n in members["nodes"]],
                )
                participants, lacking = compute_epoch_participants(listed, epoch_members)
                missing.extend(lacking)
                listed_addresses = {p.address for p in participants}
                nodes = [n for n in epoch_members.nodes if n.address in listed_addresses]
                writer.add_participants(
                    epoch,
                    snap["epochs"][str(epoch)]["formed_at"],
                    participants,
                    nodes,
                    compute_group_weights(epoch_members, participants, nodes),
                )
                counts["participants"] += len(participants)
            for epoch_text, unit in sorted(data["summaries"].items(), key=lambda kv: int(kv[0])):
                epoch = int(epoch_text)
                (line,) = [json.loads(x) for x in read_part(parts, progress_path, unit["file"])]
                summaries = [
                    json_format.ParseDict(s, EpochPerformanceSummary()) for s in line["summaries"]
                ]
                declines = None
                if "epoch_declines" in line:
                    declines = [
                        json_format.ParseDict(d, EpochDeclines()) for d in line["epoch_declines"]
                    ]
                height = snap["epochs"][str(epoch + 1)]["formed_at"]
                writer.add_epoch_summary(epoch, height, summaries, declines)
                summaries_written += len(summaries)
            writer.close(in_flight=inferences)
        except BaseException:
            writer.abort()
            raise
        result.records_written = writer.lines
    counts["epoch_summaries"] = summaries_written
    result.records = counts
    result.members_not_listed = sorted(set(missing))


def compute_group_weights(
    members: EpochMembers, participants: list[Participant], nodes: list[ParticipantNodes]
) -> list[ValidationWeight]:
    """The epoch group's members among ``participants`` as the chain's ValidationWeight: the
    group's weight and reputation, and the member's ML nodes."""
    ml_nodes = {n.address: n.ml_nodes for n in nodes}
    return [
        ValidationWeight(
            member_address=p.address,
            weight=members.weights[p.address],
            reputation=members.reputations.get(p.address, 0),
            ml_nodes=ml_nodes.get(p.address, ()),
        )
        for p in participants
        if p.address in members.weights
    ]
