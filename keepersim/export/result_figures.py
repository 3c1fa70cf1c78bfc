"""An export result's figures read from its progress file: pages and records per epoch, the
reputations and exclusions of each epoch, and the notes that say what the trace lacks and why."""

from __future__ import annotations

from typing import Any

from keepersim.export.export_run import ExportResult
from keepersim.export.progress_file import get_summary_epochs

__all__ = [
    "fill_export_result",
]


def fill_export_result(result: ExportResult, data: dict[str, Any], epochs: tuple[int, int]) -> None:
    """The snapshot's and the listings' figures of the progress ``data``: summaries, pages per
    epoch, notes."""
    result.skipped_inferences = int(data.get("skipped_inferences", 0))
    result.payloads_dropped = int(data.get("payloads_dropped", 0))
    result.unknown_fields = {k: list(v) for k, v in data.get("unknown_fields", {}).items()}
    snap = data.get("snapshot")
    if not snap:
        return
    a, b = epochs
    settled = get_summary_epochs(epochs, snap["latest_epoch"])
    result.chain_id_source = snap["chain_id_source"]
    result.summaries_available = not data["summaries_unavailable"]
    inference_pages = data["listings"]["inferences"]["pages"]
    participant_pages = data["listings"]["participants"]["pages"]
    per_epoch: dict[str, dict[str, int]] = {}
    for epoch in range(a, b + 1):
        key = str(epoch)
        per_epoch[key] = {
            "epoch_group_data": int(snap["members"][key]["group_requests"]),
            "epoch_performance_summary": 1 if key in data["summaries"] else 0,
            "excluded_participants": 1 if epoch > 0 else 0,
            "inference_pages_with_records": sum(
                1 for p in inference_pages if p.get("epochs", {}).get(key)
            ),
            "inferences": sum(int(p.get("epochs", {}).get(key, 0)) for p in inference_pages),
        }
    result.pages_per_epoch = per_epoch
    result.shared_pages = {
        "inference": len(inference_pages),
        "participant": len(participant_pages),
    }
    notes = [
        "the inference listing has no epoch filter and is keyed by inference id: it was "
        f"paged whole once for epochs {a}-{b} ({len(inference_pages)} pages, shared) and "
        "filtered on epoch_id",
        "the gateway has no field mask, so inference pages arrive whole; prompt_payload, "
        "response_payload and original_prompt are empty on v0.2.14 nodes (not stored since "
        "v0.2.6) and are left empty in the trace",
        f"every query of the snapshot was pinned to height {snap['pin_height']} "
        f"(x-cosmos-block-height); participants are the node's at that height",
    ]
    if data["summaries_unavailable"]:
        notes.append(
            "the node has no epoch_performance_summary/{epoch_index} route (501, gRPC code "
            "12: a node older than v0.2.6): the trace has no epoch_summary lines, so a "
            "replay compares inference outcomes only"
        )
    elif not settled:
        notes.append(f"no epoch_summary lines: no epoch of {a}-{b} is settled and complete")
    if a > 0 and a < snap["latest_epoch"]:
        result.summaries_omitted = {
            str(a): f"counts the outcomes of epoch {a - 1}'s inferences that resolved in "
            f"epoch {a}, which are outside the trace (a replay would report them as "
            "mismatches)"
        }
        notes.append(f"epoch {a}'s summary is not written: {result.summaries_omitted[str(a)]}")
    if snap["chain_id_source"] != "node_info":
        notes.append(
            f"the node serves no node_info: chain id {snap['chain_id']!r} "
            f"(from {snap['chain_id_source']})"
        )
    if not snap["keepersim_node"]:
        notes.append(
            "a chain node: extension_params are keepersim's defaults and declines are not "
            "recorded; reputations (per epoch, from the groups) are in the participants lines' "
            "validation_weights and in this result"
        )
    result.notes = notes
    result.excluded = {
        e: snap["members"][e].get("excluded", []) for e in sorted(snap["members"], key=int)
    }
    result.reputations = {
        e: dict(sorted(snap["members"][e]["reputations"].items()))
        for e in sorted(snap["members"], key=int)
    }
