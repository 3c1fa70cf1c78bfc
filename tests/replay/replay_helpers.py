"""Helpers for replay tests: hand-written trace lines and a tiny recorder that drives a real
chain (its trace must replay with zero mismatches)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from keepersim.chain import Chain
from keepersim.trace.format import TRACE_VERSION
from keepersim.trace.integrity import append_closing_record
from keepersim.trace.writer import get_epoch_declines
from keepersim.types.chain_json import compute_chain_json
from keepersim.types.events import EpochSettled
from keepersim.types.messages import MLNodeInfo, MsgFinishInference, MsgStartInference, Participant
from keepersim.types.params import get_default_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes

CHAIN_ID = "replay-test"
#: A recorded participant: the chain's Participant and keepersim's registration of its nodes.
Registered = tuple[Participant, ParticipantNodes]


def make_params(
    epoch_length: int = 40, expiration: int = 20, policy: str = "gonka"
) -> ModuleParams:
    """Code defaults with the shortest PoC the chain accepts (stage 1 + validation 1 blocks, as
    tests/conftest.py's make_test_params), no SPRT."""
    params = get_default_params()
    epoch = params.params.epoch_params
    epoch.epoch_length = epoch_length
    epoch.poc_stage_duration = 1
    epoch.poc_validation_duration = 1
    epoch.poc_exchange_duration = epoch.poc_validation_delay = epoch.set_new_validators_delay = 0
    params.params.validation_params.expiration_blocks = expiration
    params.extension_params.health_params.policy = policy
    params.extension_params.sprt_enabled = False
    return params


def make_participants(n: int, weight: int = 100) -> list[Registered]:
    return [
        (
            Participant(address=f"p{i}", weight=weight),
            ParticipantNodes(
                address=f"p{i}",
                models=["m"],
                ml_nodes=[MLNodeInfo(node_id="n0", poc_weight=1, timeslot_allocation=[True, True])],
            ),
        )
        for i in range(n)
    ]


def make_genesis(params: ModuleParams, fleet: Sequence[Registered]) -> Genesis:
    genesis = Genesis(chain_id=CHAIN_ID)
    genesis.inference.params.CopyFrom(params.params)
    genesis.keepersim.extension_params.CopyFrom(params.extension_params)
    genesis.inference.participant_list.extend(p for p, _ in fleet)
    genesis.keepersim.participant_nodes.extend(n for _, n in fleet)
    return genesis


def to_json(message: Message) -> dict[str, Any]:
    """A message as the chain's REST gateway prints it."""
    return compute_chain_json(message)


def header_line(first: int, last: int, **extra: Any) -> dict[str, Any]:
    return {
        "type": "header",
        "version": TRACE_VERSION,
        "chain_id": CHAIN_ID,
        "source": "simulate",
        "first_height": str(first),
        "last_height": str(last),
        **extra,
    }


def params_line(params: ModuleParams, height: int = 0) -> dict[str, Any]:
    return {
        "type": "params",
        "height": str(height),
        "params": to_json(params.params),
        "extension_params": to_json(params.extension_params),
    }


def participants_line(
    participants: Sequence[Registered], epoch: int = 0, height: int = 0
) -> dict[str, Any]:
    return {
        "type": "participants",
        "epoch_index": str(epoch),
        "height": str(height),
        "participants": [to_json(p) for p, _ in participants],
        "participant_nodes": [to_json(n) for _, n in participants],
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
    elif end is not None:
        line["end_block_height"] = str(end)
    return line


def declined_line(
    inference_id: str, start: int, assigned_to: str, end: int | None = None, **extra: Any
) -> dict[str, Any]:
    """A declined inference as the chain holds it: STARTED, with the decline height as its end."""
    return inference_line(
        inference_id, start, assigned_to, "STARTED", end=start if end is None else end, **extra
    )


def summary_line(
    epoch: int,
    height: int,
    summaries: Iterable[dict[str, Any]],
    declines: Iterable[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    line = {
        "type": "epoch_summary",
        "epoch_index": str(epoch),
        "height": str(height),
        "summaries": list(summaries),
    }
    if declines is not None:
        line["epoch_declines"] = list(declines)
    return line


def write_trace(path: Path, lines: Iterable[dict[str, Any] | str], *, closed: bool = True) -> Path:
    """Write ``lines`` (dicts or raw text) as a trace, with its closing record unless not
    ``closed`` (a cut trace)."""
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line if isinstance(line, str) else json.dumps(line))
            f.write("\n")
    if closed:
        append_closing_record(path)
    return path


def read_lines(path: Path) -> list[str]:
    """A trace's record lines (text), without its closing record: edit them, then write them
    back with :func:`write_trace` (which closes the trace again)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if lines and json.loads(lines[-1]).get("type") == "end":
        lines.pop()
    return lines


def record_trace(
    path: Path,
    *,
    blocks: int = 120,
    participants: int = 4,
    arrivals: float = 1.5,
    miss: dict[str, float] | None = None,
    latency: tuple[int, int] = (1, 4),
    seed: int = 1,
    params: ModuleParams | None = None,
) -> tuple[Path, dict[int, list[dict[str, Any]]]]:
    """Drive a real chain with random assignments and outcomes, write its trace.

    Returns the trace path and the chain's own summaries per settled epoch (JSON dicts).
    """
    rng = random.Random(seed)
    params = params or make_params()
    fleet = make_participants(participants)
    miss = miss or {}
    chain = Chain.open(memory=True, genesis=make_genesis(params, fleet))
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
                epoch = event.settled_epoch
                with chain.read() as keeper:
                    settled = keeper.get_summaries_for_epoch(epoch)
                    declines = [to_json(d) for d in get_epoch_declines(keeper, epoch, settled)]
                s = [to_json(x) for x in settled]
                summaries[epoch] = s
                pending_summaries.append(summary_line(epoch, h, s, declines))
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


def make_small_scenario() -> Any:
    """A small fleet with misses, outages and three epochs of 60 blocks."""
    from keepersim.sim.generate import generate_scenario

    return generate_scenario(
        "integrity",
        5,
        participants=8,
        blocks=180,
        epoch_length=60,
        arrivals_per_block=1.5,
        degraded_share=0.2,
        outage_share=0.1,
        latency=(1, 5),
        expiration_blocks=20,
    )
