"""What both replay modes share: chains per policy (from the trace's genesis,
:func:`keepersim.trace.genesis.build_genesis`), governance entries, the progress bar and block
tables. Records become blocks in :mod:`keepersim.trace.blocks` (the feeder serve uses too) and
block messages in :mod:`keepersim.trace.messages`.

Heights: the chain's genesis is at ``first_height - 1``; the first replayed block is
``first_height``. A governance entry at height h is sent as MsgUpdateParams (the chain's Params)
and keepersim.v1 MsgUpdateExtensionParams in block h (in force from h + 1), as a governance
transaction included at h would be.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from keepersim.chain import Chain
from keepersim.chain import StoreKind as StoreKind  # the replay modules import it from here
from keepersim.keeper.policies import get_policy
from keepersim.keeper.selection import get_candidates, get_kept_out
from keepersim.progress import ProgressBar
from keepersim.progress import make_progress as make_run_progress
from keepersim.run_chain import open_run_chain
from keepersim.store.checkpoint import compute_fingerprint
from keepersim.trace.blocks import BlockFeeder as BlockFeeder  # re-exported: replay's names
from keepersim.trace.blocks import ParamsPart as ParamsPart
from keepersim.trace.blocks import apply_policy as apply_policy
from keepersim.trace.blocks import expand_scheduled as expand_scheduled
from keepersim.trace.genesis import Prologue, build_genesis, read_prologue
from keepersim.trace.messages import ParticipantTracker, Schedule
from keepersim.trace.reader import TraceCursor, compute_trace_sha256, iterate_trace
from keepersim.trace.records import BadLines, Header, TraceRecord
from keepersim.types.errors import KeepersimError
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams

Governance = Sequence[tuple[int, ModuleParams]]


class ReplayError(Exception):
    """The replay cannot go on (a rejected transaction in strict mode, a bad setup)."""


def open_trace(
    path: str | os.PathLike[str],
    *,
    skip_bad: bool,
    bad_lines: BadLines,
    cursor: TraceCursor | None = None,
    allow_partial: bool = False,
) -> tuple[Prologue, Iterator[TraceRecord]]:
    """The trace's prologue and its other records (``allow_partial``: a trace without its
    closing record is read up to its last whole line; its header's ``cut`` says where)."""
    records = iterate_trace(
        path, skip_bad=skip_bad, bad_lines=bad_lines, cursor=cursor, allow_partial=allow_partial
    )
    try:
        prologue = read_prologue(records)
    except StopIteration:
        raise ReplayError(
            f"{os.fspath(path)}: the trace ends before its first params and participants lines"
        ) from None
    return prologue, records


def check_policies(policies: Sequence[str]) -> None:
    if not policies:
        raise ReplayError("no policy to replay")
    if len(set(policies)) != len(policies):
        raise ReplayError(f"a policy is listed twice: {list(policies)}")
    for name in policies:
        try:
            get_policy(name)
        except KeyError as exc:
            raise ReplayError(str(exc.args[0])) from None


# Commits between two write-backs of a replay's state cache (keepersim.store.cache): the backend
# sees one batch instead of one per block. A resumable replay writes back every block: its
# lanes must stay within one block of each other on disk. 256, not 64: an inference's timeout
# key lives its expiration_blocks (150 on mainnet), and one put and deleted between two
# write-backs never reaches LevelDB (the cache's fresh keys): 41% of them at 256, none at 64.
# The batch held in memory grows to ~256 blocks of writes (a few MB); 1,024 gave no more.
WRITE_EVERY = 256


def open_policy_chain(
    prologue: Prologue,
    policy: str,
    *,
    shadow: bool,
    store: StoreKind,
    store_dir: str | os.PathLike[str] | None,
    name: str,
    resume: bool = False,
    resumable: bool = False,
) -> Chain:
    """A fresh chain for one replay, with the trace's genesis (:func:`build_genesis`) and
    ``policy`` (and ``shadow``) in force: in memory, or LevelDB under ``store_dir/name`` (which
    must not hold a chain yet, unless ``resume``: then a chain in it is opened as it stands)."""
    genesis = build_genesis(prologue, apply_policy(prologue.params.params, policy, shadow))
    if store not in ("leveldb", "memory"):
        raise ReplayError(f"unknown store {store!r}: expected 'leveldb' or 'memory'")
    if store == "leveldb" and store_dir is None:
        raise ReplayError("a leveldb replay needs store_dir")
    return open_run_chain(
        store,
        None if store_dir is None else Path(store_dir) / name,
        genesis=genesis,
        error=ReplayError,
        needs="a replay needs a fresh store (--resume goes on with it)",
        resume=resume,
        write_every=1 if resumable or resume else WRITE_EVERY,
    )


def schedule_governance(schedule: Schedule, governance: Governance | None, committed: int) -> None:
    for height, params in governance or ():
        schedule.add(height, "governance", 0, params, committed)


def start_schedule(
    prologue: Prologue, governance: Governance | None, max_listed: int
) -> tuple[Schedule, ParticipantTracker]:
    """A replay's schedule, holding the governance entries, and the tracker of the recorded
    participants (for the later participants lines)."""
    schedule = Schedule(max_listed)
    tracker = ParticipantTracker(prologue.participants)
    schedule_governance(schedule, governance, prologue.header.first_height - 1)
    return schedule, tracker


def make_progress(header: Header, progress: bool, desc: str) -> ProgressBar:
    """Progress over the trace's heights (shown only when ``progress``; see keepersim.progress)."""
    return make_run_progress(
        header.last_height - header.first_height + 1, enabled=progress, unit="blocks", desc=desc
    )


def get_table_exclusions(
    chain: Chain, last: frozenset[str] = frozenset()
) -> tuple[frozenset[str], bool, bool]:
    """(kept out, fallback, panic) of the committed height's selection table for model "".

    In shadow mode the table reports who the policy would keep out (``get_kept_out``). When the
    table cannot be built because the gate keeps everyone out and the policy allows no fallback,
    every candidate counts as kept out; an empty pool (e.g. nobody with a PoC slot during PoC)
    keeps nobody out. ``last``: the previous block's kept out, returned itself when equal (a
    caller can then tell an unchanged set by identity, :meth:`IntervalTracker.observe`).
    """
    try:
        table = chain.get_selection_table("")
    except KeepersimError:
        try:
            with chain.read() as keeper:
                candidates = get_candidates(keeper, "", chain.height)
        except KeepersimError:
            return frozenset(), False, False
        return frozenset(c.address for c in candidates), False, False
    kept_out = get_kept_out(table)
    if len(kept_out) != len(last) or not last.issuperset(kept_out):
        last = frozenset(kept_out)
    return last, table.fallback, table.panic


class IntervalTracker:
    """Per participant, the start heights at which a policy keeps it out, as closed intervals.

    ``observe(height, excluded)`` says who is kept out for requests starting at ``height``;
    memory grows with the number of exclusion episodes, not with the trace length.
    """

    # The set the last observe was given (its members are then exactly the open ones); a class
    # default so that a tracker pickled before it existed (a checkpoint) reads None.
    observed: frozenset[str] | None = None

    def __init__(self) -> None:
        self.open: dict[str, int] = {}
        self.closed: dict[str, list[tuple[int, int]]] = {}
        self.blocks: dict[str, int] = {}
        self.last_height: int | None = None

    def observe(self, height: int, excluded: frozenset[str]) -> None:
        if excluded is self.observed:  # the same set again: every interval stays open
            self.last_height = height
            return
        self.observed = excluded
        for address in list(self.open):
            if address not in excluded:
                self._close(address, height - 1)
        for address in excluded:
            if address not in self.open:
                self.open[address] = height
        self.last_height = height

    def _close(self, address: str, to: int) -> None:
        start = self.open.pop(address)
        if to >= start:
            self.closed.setdefault(address, []).append((start, to))
            self.blocks[address] = self.blocks.get(address, 0) + to - start + 1

    def finish(self, last_height: int) -> None:
        self.observed = None
        for address in list(self.open):
            self._close(address, last_height)

    def to_dict(self) -> dict[str, Any]:
        return {
            address: {"intervals": [list(i) for i in intervals], "blocks": self.blocks[address]}
            for address, intervals in sorted(self.closed.items())
        }


def compute_replay_fingerprint(trace_path: str | os.PathLike[str], **inputs: Any) -> bytes:
    """The fingerprint (:mod:`keepersim.store.checkpoint`) of a replay: the trace's bytes and
    the replay's other inputs."""
    return compute_fingerprint({"trace_sha256": compute_trace_sha256(trace_path), **inputs})


def format_app_hash(app_hash: bytes) -> str:
    return app_hash.hex().upper()
