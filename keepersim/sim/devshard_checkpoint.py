"""The devshard path's state in a resumable run's checkpoint (issue 33).

The escrows, their pickers, the gateway's limiter and the outcome signals still to reach it are
driver state (:class:`~keepersim.sim.devshard_path.DevshardPath`), outside the app hash, like
the stepper's pending messages. A ``--store-dir`` run commits them with every block under
:data:`DEVSHARD_CHECKPOINT_KEY` (``\\xffmeta/run/devshard``, beside the run's checkpoint of
:mod:`keepersim.store.checkpoint`), taken at the same instant: every assignment of the block
made, the block not yet committed.

The record is JSON of integers, heights and strings only (no pickle, no floats): sets as sorted
lists, dicts as lists of pairs in their insertion order (so a resumed run iterates them as the
uninterrupted one does), enums by value. What the spec decides (the share, the limiter's
settings, the block time) is not stored: it is the run's input, covered by the checkpoint's
fingerprint; the limiter's params are stored because governance may change them mid-run
(``devshard_params``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, fields
from typing import Any, Final

from keepersim.gateway.limiter import HostState, LimiterState, QuarantineMode
from keepersim.gateway.limiter_params import LimiterParams
from keepersim.gateway.picker import PickerRequest, PickerState
from keepersim.gateway.signals import OutcomeClass
from keepersim.sim.devshard_path import DevshardCounts, DevshardEscrow, DevshardPath
from keepersim.store.checkpoint import ResumeError
from keepersim.store.committed import RUN_META_PREFIX

__all__ = [
    "DEVSHARD_CHECKPOINT_KEY",
    "DEVSHARD_STATE_VERSION",
    "encode_devshard_state",
    "get_devshard_checkpoint",
    "process_devshard_checkpoint",
    "process_devshard_state",
]

DEVSHARD_CHECKPOINT_KEY: Final = RUN_META_PREFIX + b"devshard"
#: Bumped when the record's layout changes (a store of another layout is refused, not misread).
DEVSHARD_STATE_VERSION: Final = 3


def _encode_request(r: PickerRequest) -> list[Any]:
    return [
        r.request_id,
        r.submit_height,
        sorted(r.exclude),
        sorted(r.incompatible),
        r.canceled,
    ]


def _decode_request(v: list[Any]) -> PickerRequest:
    rid, height, exclude, incompatible, canceled = v
    return PickerRequest(
        str(rid), int(height), frozenset(exclude), frozenset(incompatible), bool(canceled)
    )


def _encode_escrow(e: DevshardEscrow) -> dict[str, Any]:
    return {
        "id": e.escrow_id,
        "epoch": e.epoch,
        "slots": list(e.slots),
        "participants": list(e.picker.participants),
        "nonce": e.picker.nonce,
        "queue": [_encode_request(r) for r in e.picker.queue],
        "nonces_left": e.nonces_left,
        "refusal_blocks": e.refusal_blocks,
        "execution_blocks": e.execution_blocks,
    }


def _decode_escrow(v: dict[str, Any]) -> DevshardEscrow:
    picker = PickerState(
        tuple(v["participants"]), int(v["nonce"]), [_decode_request(r) for r in v["queue"]]
    )
    return DevshardEscrow(
        int(v["id"]),
        int(v["epoch"]),
        tuple(v["slots"]),
        picker,
        int(v["nonces_left"]),
        int(v["refusal_blocks"]),
        int(v["execution_blocks"]),
    )


def _encode_host(h: HostState) -> dict[str, Any]:
    return {
        "tokens": h.tokens,
        "last_refill": h.last_refill,
        "model_ids": sorted(h.model_ids),
        "quarantine_until": h.quarantine_until,
        "mode": int(h.mode),
        "failure_strikes": h.failure_strikes,
    }


def _decode_host(v: dict[str, Any]) -> HostState:
    until = v["quarantine_until"]
    return HostState(
        tokens=int(v["tokens"]),
        last_refill=int(v["last_refill"]),
        model_ids=set(v["model_ids"]),
        quarantine_until=None if until is None else int(until),
        mode=QuarantineMode(int(v["mode"])),
        failure_strikes=int(v["failure_strikes"]),
    )


def _encode_limiter(state: LimiterState | None) -> dict[str, Any] | None:
    if state is None:
        return None
    return {
        "params": asdict(state.params),
        "hosts": [[k, _encode_host(h)] for k, h in state.hosts.items()],
    }


def _decode_limiter(v: dict[str, Any] | None) -> LimiterState | None:
    if v is None:
        return None
    params = LimiterParams(**{f.name: int(v["params"][f.name]) for f in fields(LimiterParams)})
    return LimiterState(params, {str(k): _decode_host(h) for k, h in v["hosts"]})


def encode_devshard_state(path: DevshardPath) -> bytes:
    """``path``'s mutable state as canonical JSON bytes (module docstring)."""
    c = path.counts
    record = {
        "version": DEVSHARD_STATE_VERSION,
        "escrow_counter": path.escrow_counter,
        "escrows": [[m, lane, _encode_escrow(e)] for (m, lane), e in path.escrows.items()],
        "queue": [
            [m, lane, [_encode_request(r) for r in rs]] for (m, lane), rs in path.queue.items()
        ],
        "pending": [[rid, n, a, m] for rid, (n, a, m) in path.pending.items()],
        "excluded": [[n, sorted(hosts)] for n, hosts in path.excluded.items()],
        "signals": [[h, [list(s) for s in sig]] for h, sig in path.signals.items()],
        "limiter": _encode_limiter(path.limiter),
        "race_info": [
            [rid, k, list(tried), root] for rid, (k, tried, root) in path.race_info.items()
        ],
        "races": [[root, list(v)] for root, v in path.races.items()],
        "counts": {
            f.name: (
                [[k, v] for k, v in getattr(c, f.name).items()]
                if isinstance(getattr(c, f.name), dict)
                else getattr(c, f.name)
            )
            for f in fields(DevshardCounts)
        },
    }
    return json.dumps(record, separators=(",", ":")).encode()


def process_devshard_state(path: DevshardPath, data: bytes) -> None:
    """Put the state of :func:`encode_devshard_state` back into ``path`` (a fresh one built
    from the same spec and seed). Raises ``ValueError`` on a record of another layout."""
    record = json.loads(data)
    if not isinstance(record, dict) or record.get("version") != DEVSHARD_STATE_VERSION:
        raise ValueError(
            f"the devshard checkpoint has layout {record.get('version')!r} "
            f"(expected {DEVSHARD_STATE_VERSION})"
            if isinstance(record, dict)
            else "the devshard checkpoint is not a JSON object"
        )
    path.escrow_counter = int(record["escrow_counter"])
    path.escrows = {(str(m), int(lane)): _decode_escrow(e) for m, lane, e in record["escrows"]}
    path.queue = {
        (str(m), int(lane)): [_decode_request(r) for r in rs] for m, lane, rs in record["queue"]
    }
    path.pending = {str(rid): (int(n), int(a), str(m)) for rid, n, a, m in record["pending"]}
    path.excluded = {int(n): set(hosts) for n, hosts in record["excluded"]}
    path.signals = {
        int(h): [(str(host), str(model), _get_outcome(outcome)) for host, model, outcome in sig]
        for h, sig in record["signals"]
    }
    path.limiter = _decode_limiter(record["limiter"])
    path.race_info = {
        str(rid): (int(k), tuple(str(t) for t in tried), str(root))
        for rid, k, tried, root in record["race_info"]
    }
    path.races = {str(root): [int(x) for x in v] for root, v in record["races"]}
    counts = DevshardCounts()
    for f in fields(DevshardCounts):
        value = record["counts"][f.name]
        decoded = {str(k): int(v) for k, v in value} if isinstance(value, list) else int(value)
        setattr(counts, f.name, decoded)
    path.counts = counts


def _get_outcome(value: object) -> OutcomeClass:
    if value == "finish" or value == "miss" or value == "decline":
        return value
    raise ValueError(f"the devshard checkpoint holds an unknown outcome {value!r}")


def get_devshard_checkpoint(path: DevshardPath | None) -> dict[bytes, bytes | None]:
    """The ``meta`` entries a resumable run's block commits with (none without the path)."""
    return {} if path is None else {DEVSHARD_CHECKPOINT_KEY: encode_devshard_state(path)}


def process_devshard_checkpoint(
    path: DevshardPath | None, get_meta: Callable[[bytes], bytes | None]
) -> None:
    """On resume: take the devshard state committed with the store's last block back into
    ``path`` (nothing without the path). Raises :class:`ResumeError` when it is missing or
    unreadable."""
    if path is None:
        return
    data = get_meta(DEVSHARD_CHECKPOINT_KEY)
    if data is None:
        raise ResumeError("the store's checkpoint has no devshard state (made by another run)")
    try:
        process_devshard_state(path, data)
    except (ValueError, TypeError, KeyError) as exc:
        raise ResumeError(f"the devshard checkpoint cannot be read: {exc}") from exc
