"""Helpers for replay tests: hand-written trace lines and a tiny recorder that drives a real
chain (its trace must replay with zero mismatches)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from keepersim.chain import Chain
from keepersim.types.events import EpochSettled
from keepersim.types.messages import GenesisState, MLNodeInfo, Params, Participant
from keepersim.types.params import get_default_params, params_to_dict
from keepersim.types.pb.inference.inference.tx_pb2 import MsgFinishInference, MsgStartInference

CHAIN_ID = "replay-test"


def make_params(epoch_length: int = 40, expiration: int = 20, policy: str = "gonka") -> Params:
    params = get_default_params()
    params.epoch_params.epoch_length = epoch_length
    params.expiration_blocks = expiration
    params.health_params.policy = policy
    params.sprt_params.enabled = False
    return params


def make_participants(n: int, weight: int = 100) -> list[Participant]:
    return [
        Participant(
            address=f"p{i}",
            weight=weight,
            models=["m"],
            ml_nodes=[MLNodeInfo(node_id="n0", poc_weight=1, timeslot_allocation=[True, True])],
        )
        for i in range(n)
    ]


def to_json(message: Any) -> dict[str, Any]:
    data: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return data


def header_line(first: int, last: int, **extra: Any) -> dict[str, Any]:
    return {
        "type": "header",
        "version": 1,
        "chain_id": CHAIN_ID,
        "source": "simulate",
        "first_height": str(first),
        "last_height": str(last),
        **extra,
    }


def params_line(params: Params, height: int = 0) -> dict[str, Any]:
    return {"type": "params", "height": str(height), "params": params_to_dict(params)}


def participants_line(
    participants: Sequence[Participant], epoch: int = 0, height: int = 0
) -> dict[str, Any]:
    return {
        "type": "participants",
        "epoch_index": str(epoch),
        "height": str(height),
        "participants": [to_json(p) for p in participants],
    }


def inference_line(
    inference_id: str,
    start: int,
    assigned_to: str,
    status: str = "FINISHED",
    end: int | None = None,
    executed_by: str | None = None,
    model: str = "m",
    **extra: Any,
) -> dict[str, Any]:
    line: dict[str, Any] = {
        "type": "inference",
        "inference_id": inference_id,
        "model": model,
        "requested_by": "user",
        "assigned_to": assigned_to,
        "status": status,
        "start_block_height": str(start),
        **extra,
    }
    if status in ("FINISHED", "VALIDATED"):
        line["executed_by"] = executed_by or assigned_to
        line["end_block_height"] = str(end if end is not None else start + 2)
    elif status == "DECLINED":
        line["end_block_height"] = str(end if end is not None else start)
    return line


def summary_line(epoch: int, height: int, summaries: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "epoch_summary",
        "epoch_index": str(epoch),
        "height": str(height),
        "summaries": list(summaries),
    }


def write_trace(path: Path, lines: Iterable[dict[str, Any] | str]) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line if isinstance(line, str) else json.dumps(line))
            f.write("\n")
    return path


def record_trace(
    path: Path,
    *,
    blocks: int = 120,
    participants: int = 4,
    arrivals: float = 1.5,
    miss: dict[str, float] | None = None,
    latency: tuple[int, int] = (1, 4),
    seed: int = 1,
    params: Params | None = None,
) -> tuple[Path, dict[int, list[dict[str, Any]]]]:
    """Drive a real chain with random assignments and outcomes, write its trace.

    Returns the trace path and the chain's own summaries per settled epoch (JSON dicts).
    """
    rng = random.Random(seed)
    params = params or make_params()
    fleet = make_participants(participants)
    miss = miss or {}
    chain = Chain.open(
        memory=True,
        genesis=GenesisState(params=params, chain_id=CHAIN_ID, height=0, participants=fleet),
    )
    lines: list[dict[str, Any]] = [
        header_line(1, blocks),
        params_line(params),
        participants_line(fleet),
    ]
    finishes: dict[int, list[tuple[str, str]]] = {}
    started: list[tuple[int, str]] = []
    summaries: dict[int, list[dict[str, Any]]] = {}
    pending_summaries: list[dict[str, Any]] = []
    n = 0
    for h in range(1, blocks + 1):
        txs: list[Any] = []
        for inference_id, executor in finishes.pop(h, []):
            txs.append(MsgFinishInference(inference_id=inference_id, executed_by=executor))
        k = 0
        while rng.random() < arrivals / (1 + arrivals) and k < 6:
            k += 1
            n += 1
            inference_id = f"inf{n:06d}"
            executor = f"p{rng.randrange(participants)}"
            txs.append(
                MsgStartInference(
                    inference_id=inference_id, model="m", assigned_to=executor, requested_by="user"
                )
            )
            started.append((h, inference_id))
            if rng.random() >= miss.get(executor, 0.0):
                finishes.setdefault(h + rng.randint(*latency), []).append((inference_id, executor))
        result = chain.deliver_block(txs, height=h, strict=True)
        for event in result.events:
            if isinstance(event, EpochSettled):
                with chain.read() as keeper:
                    s = [to_json(x) for x in keeper.get_summaries_for_epoch(event.settled_epoch)]
                for item in s:
                    item["epoch_index"] = str(event.settled_epoch)
                summaries[event.settled_epoch] = s
                pending_summaries.append(summary_line(event.settled_epoch, h, s))
    # Inference lines in (start, id) order, each summary after the inferences started before it.
    inference_lines = []
    for _, inference_id in sorted(started):
        inf = chain.get_inference(inference_id)
        assert inf is not None
        inference_lines.append({"type": "inference", **to_json(inf)})
    chain.close()
    merged: list[dict[str, Any]] = []
    queue = list(pending_summaries)
    for line in inference_lines:
        start = int(line["start_block_height"])
        while queue and int(queue[0]["height"]) <= start:
            merged.append(queue.pop(0))
        merged.append(line)
    merged.extend(queue)
    write_trace(path, lines + merged)
    return path, summaries
