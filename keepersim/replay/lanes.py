"""The lane and checkpoint loop both replay modes run: a lane is one policy's chain (as-recorded
replays several in lockstep, what-if one), the loop feeds the trace's records to a run and, on
``--resume``, takes the run back from its checkpoint and goes on reading at the checkpoint's
trace cursor.

* :func:`open_lanes` / :func:`close_lanes`: a chain per policy (:func:`~keepersim.replay.common.
  open_policy_chain`);
* :func:`read_lane_checkpoint`: a lane's checkpoint, or None when its store holds just this
  replay's genesis (any other chain is refused);
* :func:`drive_records`: the loop (:class:`TraceRun` is what it needs of a run).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from keepersim.chain import Chain
from keepersim.progress import ProgressBar
from keepersim.replay.common import StoreKind, open_policy_chain
from keepersim.store.checkpoint import ResumeError, read_checkpoint
from keepersim.trace.genesis import Prologue
from keepersim.trace.reader import TraceCursor, iterate_trace
from keepersim.trace.records import BadLines, TraceRecord

__all__ = [
    "Lane",
    "TraceRun",
    "close_lanes",
    "drive_records",
    "open_lanes",
    "read_lane_checkpoint",
]


@dataclass(slots=True)
class Lane:
    """One policy's chain in a replay; ``excluded``: whom its committed selection table keeps
    out of the next height's requests."""

    policy: str
    chain: Chain
    excluded: frozenset[str] = frozenset()


def open_lanes(
    prologue: Prologue,
    policies: Sequence[str],
    *,
    shadow: bool,
    store: StoreKind,
    store_dir: str | os.PathLike[str] | None,
    names: Sequence[str],
    resume: bool = False,
    resumable: bool = False,
) -> list[Lane]:
    """A lane per policy, its store ``store_dir/name``; on a failure the lanes opened are
    closed."""
    lanes: list[Lane] = []
    try:
        for policy, name in zip(policies, names, strict=True):
            chain = open_policy_chain(
                prologue,
                policy,
                shadow=shadow,
                store=store,
                store_dir=store_dir,
                name=name,
                resume=resume,
                resumable=resumable,
            )
            lanes.append(Lane(policy, chain))
    except BaseException:
        close_lanes(lanes)
        raise
    return lanes


def close_lanes(lanes: Sequence[Lane]) -> None:
    for lane in lanes:
        lane.chain.close()


def read_lane_checkpoint(
    lane: Lane, fingerprint: bytes, prologue: Prologue, *, shadow: bool, where: str
) -> dict[str, Any] | None:
    """The checkpoint of this replay in ``lane``'s store, or None when the store holds just the
    replay's genesis (nothing committed yet); a store holding another chain is refused."""
    state: dict[str, Any] | None = read_checkpoint(lane.chain.get_meta, fingerprint, where)
    if state is not None:
        return state
    fresh = open_policy_chain(
        prologue, lane.policy, shadow=shadow, store="memory", store_dir=None, name=lane.policy
    )
    chain = lane.chain
    with fresh:
        if (fresh.height, fresh.app_hash) != (chain.height, chain.app_hash):
            raise ResumeError(
                f"{where} holds another chain (height {chain.height}, no checkpoint of this "
                "replay): cannot resume it"
            )
    return None


class TraceRun(Protocol):
    """What :func:`drive_records` needs of a replay run (a :class:`~keepersim.trace.blocks.
    BlockFeeder` with its checkpoints)."""

    current: TraceRecord | None
    cursor: TraceCursor | None

    def feed(self, record: TraceRecord) -> None: ...

    def process_checkpoint(self, state: dict[str, Any]) -> None: ...

    def get_bad_lines(self) -> BadLines: ...

    def finish(self) -> None: ...


def drive_records(
    run: TraceRun,
    trace_path: str | os.PathLike[str],
    prologue: Prologue,
    records: Iterator[TraceRecord],
    state: dict[str, Any] | None,
    *,
    resume_height: int,
    skip_bad: bool,
    allow_partial: bool,
    bar: ProgressBar,
) -> None:
    """Feed every record to ``run`` and finish it. A fresh run (``state`` None) starts with the
    records read along with the prologue; a resumed one takes ``state`` back (its block
    ``resume_height`` finished), reads on from the checkpoint's cursor and feeds the record
    that was being processed again."""
    if state is None:
        for record in prologue.extra:
            run.feed(record)
    else:
        close = getattr(records, "close", None)
        if close is not None:
            close()
        bar.update(resume_height - prologue.header.first_height)
        run.process_checkpoint(state)
        run.cursor = cursor = state["cursor"]
        records = iterate_trace(
            trace_path,
            skip_bad=skip_bad,
            bad_lines=run.get_bad_lines(),
            cursor=cursor,
            allow_partial=allow_partial,
        )
        if state["current"] is not None:
            run.feed(state["current"])
    feed = run.feed
    for record in records:
        run.current = record
        feed(record)
    run.current = None
    run.finish()
