"""A resumable scenario run's checkpoint: the run's fingerprint, and its state written with each
block's commit (large parts incrementally) and read back on resume
(:mod:`keepersim.store.checkpoint` holds the encoding).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keepersim.chain import BlockResult, Chain, open_chain
from keepersim.keeper.policies import PolicyFactory
from keepersim.sim.devshard_checkpoint import get_devshard_checkpoint, process_devshard_checkpoint
from keepersim.sim.devshard_path import DevshardPath
from keepersim.sim.metrics import MetricsCollector
from keepersim.sim.scenario import Scenario, format_scenario_json
from keepersim.sim.stepper import ScenarioStepper
from keepersim.store.checkpoint import (
    DictJournal,
    ResumeError,
    compute_fingerprint,
    decode_state,
    encode_checkpoint,
    encode_state,
    process_kill_point,
    read_checkpoint,
)
from keepersim.store.committed import RUN_META_PREFIX
from keepersim.trace.writer import TraceWriter
from keepersim.types.params import params_to_dict
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis

__all__ = [
    "InFlight",
    "RunCheckpoint",
    "compute_run_fingerprint",
    "get_trace_pending",
    "read_run_checkpoint",
]


@dataclass(slots=True)
class InFlight:
    start: int
    address: str


# Attributes of the stepper and the metrics fixed by the run's inputs (not checkpointed): every
# other attribute is state and goes into the checkpoint, so a counter added later is kept too.
_STEPPER_INPUTS = frozenset(
    {
        "scenario",
        "chain",
        "seed",
        "blocks",
        "deliver",
        "on_selection",
        "on_start",
        "counts",
        "specs",
        "models",
        "governance",
        "devshard",
    }
)
_METRICS_INPUTS = frozenset({"scenario", "bucket_blocks", "_specs", "_weights", "_total_weight"})
# Dicts of the stepper checkpointed incrementally (DictJournal), and the meta keys of a run.
_STEPPER_JOURNALED = ("finishes", "declines", "reselects")
_CK_STEPPER = RUN_META_PREFIX + b"stepper/"
_CK_INTERVALS = RUN_META_PREFIX + b"intervals/"
_CK_FLIGHT = RUN_META_PREFIX + b"flight/"
_CK_TRACE = RUN_META_PREFIX + b"trace/"
_CK_ADDRESS = RUN_META_PREFIX + b"address/"
# Per-address counters of the metrics, checkpointed for the addresses a block touched.
_METRICS_PER_ADDRESS = ("assigned", "resolved", "missed", "declined")


def _get_fields(obj: object, inputs: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in vars(obj).items() if k not in inputs}


def _set_fields(obj: object, fields: Mapping[str, Any]) -> None:
    for key, value in fields.items():
        setattr(obj, key, value)


def compute_run_fingerprint(
    scenario: Scenario,
    policy: str,
    seed: int,
    params: ModuleParams,
    schedule: Sequence[tuple[int, ModuleParams]],
    bucket_blocks: int,
    trace_out: str | os.PathLike[str] | None,
) -> bytes:
    """The inputs that decide a run's blocks, metrics and trace (``--resume`` checks them)."""
    return compute_fingerprint(
        {
            "command": "simulate",
            "scenario": format_scenario_json(scenario),
            "policy": policy,
            "seed": seed,
            "params": params_to_dict(params),
            "governance": [[h, params_to_dict(p)] for h, p in schedule],
            "bucket_blocks": bucket_blocks,
            "trace": trace_out is not None,
        }
    )


def read_run_checkpoint(
    chain: Chain,
    fingerprint: bytes,
    genesis: Genesis,
    override: PolicyFactory | None,
    folder: Path,
) -> dict[str, Any] | None:
    """The checkpoint of the store's last block (None: the store holds the genesis only, which
    must be this run's)."""
    state: dict[str, Any] | None = read_checkpoint(chain.get_meta, fingerprint, f"store {folder}")
    if state is not None:
        return state
    with open_chain("memory", None, genesis=genesis, policy_override=override) as fresh:
        if chain.height != fresh.height or chain.app_hash != fresh.app_hash:
            raise ResumeError(
                f"store {folder} holds another chain (at height {chain.height}, without a "
                "checkpoint of this run): cannot resume it; use an empty --store-dir"
            )
    return None


def get_trace_pending(chain: Chain) -> list[tuple[Any, str]]:
    """The trace lines a checkpoint holds that the trace file may not have yet."""
    return [
        (decode_state(k[len(_CK_TRACE) :]), v.decode()) for k, v in chain.iterate_meta(_CK_TRACE)
    ]


class RunCheckpoint:
    """A resumable run's checkpoint: what :class:`~keepersim.sim.run_loop` records, written with
    each block's commit and read back on resume (the run's loop holds these attributes)."""

    chain: Chain
    fingerprint: bytes | None
    journal: DictJournal | None
    stepper: ScenarioStepper
    metrics: MetricsCollector
    trace: TraceWriter | None
    flight_delta: dict[str, InFlight | None]
    touched_addresses: set[str]
    in_flight: dict[str, InFlight]
    inactive: set[str]
    recorded_out: set[str]
    devshard: DevshardPath | None

    def process_block(
        self, height: int, events: Sequence[object], gas_by_step: Mapping[str, int]
    ) -> None:
        raise NotImplementedError

    def deliver_with_checkpoint(self, txs: list[Any]) -> BlockResult:
        """The stepper's delivery in a resumable run: the block commits with a checkpoint."""
        result = self.chain.deliver_block(txs, strict=True, meta=self.get_checkpoint)
        process_kill_point(result.height, "post")
        return result

    def get_checkpoint(self, result: BlockResult) -> dict[bytes, bytes | None]:
        """The run's state just before ``result``'s block commits (every assignment of the block
        made, none of its events seen yet), with the block's events to finish it on resume.

        The large parts go in incrementally (only what changed since the last block): the
        in-flight inferences, the stepper's pending messages, the kept-out intervals and the
        trace's pending lines; the rest is one small record."""
        assert self.fingerprint is not None and self.journal is not None
        journal = self.journal
        meta: dict[bytes, bytes | None] = {}
        for name in _STEPPER_JOURNALED:
            meta.update(journal.get_delta(_CK_STEPPER + name.encode(), getattr(self.stepper, name)))
        meta.update(journal.get_delta(_CK_INTERVALS, self.metrics._intervals))
        for rid, flight in self.flight_delta.items():
            meta[_CK_FLIGHT + rid.encode()] = (
                None if flight is None else f"{flight.start}/{flight.address}".encode()
            )
        self.flight_delta = {}
        trace = None
        if self.trace is not None:
            trace, pending = self.trace.get_state()
            for key, line in pending.items():
                meta[_CK_TRACE + encode_state(key)] = None if line is None else line.encode()
        counts = [getattr(self.metrics, name) for name in _METRICS_PER_ADDRESS]
        for address in self.touched_addresses:
            values = ",".join(str(c[address]) for c in counts)
            meta[_CK_ADDRESS + address.encode()] = values.encode()
        self.touched_addresses = set()
        metrics = _get_fields(
            self.metrics, _METRICS_INPUTS | {"_intervals", "_buckets", *_METRICS_PER_ADDRESS}
        )
        metrics["_buckets"] = [[getattr(b, f) for f in b.__slots__] for b in self.metrics._buckets]
        state = {
            "stepper": _get_fields(self.stepper, _STEPPER_INPUTS | set(_STEPPER_JOURNALED)),
            "metrics": metrics,
            "inactive": self.inactive,
            "recorded_out": self.recorded_out,
            "trace": trace,
            "events": result.events,
            "gas": dict(result.gas_by_step),
        }
        meta.update(encode_checkpoint(self.fingerprint, state))
        meta.update(get_devshard_checkpoint(self.devshard))
        process_kill_point(result.height, "pre")
        return meta

    def process_checkpoint(self, state: dict[str, Any]) -> None:
        """Take the state of :meth:`get_checkpoint` back and finish its block."""
        chain, journal = self.chain, self.journal
        assert journal is not None
        stepper = self.stepper
        _set_fields(stepper, state["stepper"])
        for name in _STEPPER_JOURNALED:
            prefix = _CK_STEPPER + name.encode()
            setattr(stepper, name, journal.load(prefix, chain.iterate_meta(prefix)))
        buckets = state["metrics"].pop("_buckets")
        _set_fields(self.metrics, state["metrics"])
        for bucket, values in zip(self.metrics._buckets, buckets, strict=True):
            for f, value in zip(bucket.__slots__, values, strict=True):
                setattr(bucket, f, value)
        self.metrics._intervals = journal.load(_CK_INTERVALS, chain.iterate_meta(_CK_INTERVALS))
        counts = [getattr(self.metrics, name) for name in _METRICS_PER_ADDRESS]
        for key, value in chain.iterate_meta(_CK_ADDRESS):
            address = key[len(_CK_ADDRESS) :].decode()
            for c, n in zip(counts, value.split(b","), strict=True):
                c[address] = int(n)
        self.in_flight = {}
        for key, value in chain.iterate_meta(_CK_FLIGHT):
            start, address = value.decode().split("/", 1)
            self.in_flight[key[len(_CK_FLIGHT) :].decode()] = InFlight(int(start), address)
        self.inactive = state["inactive"]
        self.recorded_out = state["recorded_out"]
        process_devshard_checkpoint(self.devshard, chain.get_meta)
        self.process_block(self.chain.height, state["events"], state["gas"])
