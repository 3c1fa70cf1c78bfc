"""What both replay modes share: the genesis from a trace's first lines, chains per policy,
scheduled messages (recorded params changes, governance, participant changes), the block feeder
(every height a block, the starts of a height gathered into its block), the progress bar and
block tables.

Heights: the chain's genesis is at ``first_height - 1``; the first replayed block is
``first_height``. A recorded ``params`` line at height h says "in force from h": it is sent as
MsgUpdateParams (the chain's Params) and keepersim.v1 MsgUpdateExtensionParams in block h - 1
(the module applies accepted params from the next block, the two together). A governance entry
at height h is sent the same way in block h (in force from h + 1), as a governance transaction
included at h would be. A ``participants`` line at height h (an epoch's first height, where
keepersim forms the new group in the end block) sends MsgRegisterParticipant in block h for every
participant whose weight, models, ML nodes (its ``participant_nodes`` entry) or URL changed, and
weight 0 for one that left.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Generic, Literal, TypeVar

from google.protobuf.message import Message

from keepersim.chain import Chain
from keepersim.keeper.keeper import Keeper
from keepersim.keeper.policies import get_policy
from keepersim.keeper.selection import get_candidates
from keepersim.module.epoch import process_new_epoch_group
from keepersim.module.genesis import export_genesis, init_genesis
from keepersim.progress import ProgressBar
from keepersim.progress import make_progress as make_run_progress
from keepersim.replay.trace import (
    BadLines,
    Header,
    ParamsRecord,
    ParticipantsRecord,
    TraceCursor,
    TraceRecord,
    iterate_trace,
)
from keepersim.store.checkpoint import compute_fingerprint
from keepersim.store.committed import CommitStore
from keepersim.store.memory import MemoryBackend
from keepersim.types.bech32 import GOV_AUTHORITY
from keepersim.types.errors import KeepersimError
from keepersim.types.messages import (
    ACTIVE,
    INACTIVE,
    CurrentEpochStats,
    Inference,
    MsgStartInference,
    MsgUpdateParams,
    Participant,
)
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes
from keepersim.types.pb.keepersim.v1.tx_pb2 import (
    MsgRegisterParticipant,
    MsgUpdateExtensionParams,
)

StoreKind = Literal["leveldb", "memory"]
Governance = Sequence[tuple[int, ModuleParams]]
DEFAULT_MAX_LISTED: Final = 50
T = TypeVar("T")


class ReplayError(Exception):
    """The replay cannot go on (a rejected transaction in strict mode, a bad setup)."""


@dataclass(slots=True)
class Listed:
    """A count and the first ``max_listed`` items (keeps reports bounded)."""

    max_listed: int = DEFAULT_MAX_LISTED
    count: int = 0
    items: list[dict[str, Any]] = field(default_factory=list)

    def add(self, item: dict[str, Any]) -> None:
        self.count += 1
        if len(self.items) < self.max_listed:
            self.items.append(item)

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "listed": list(self.items)}


@dataclass(frozen=True, slots=True)
class Prologue:
    """The lines a replay needs before its first block."""

    header: Header
    params: ParamsRecord
    participants: ParticipantsRecord
    # params / participants lines read along the way (applied as scheduled changes)
    extra: tuple[TraceRecord, ...]


def read_prologue(records: Iterator[TraceRecord]) -> Prologue:
    """Consume the header and records up to the first params and participants lines.

    The reader guarantees both come before any inference / epoch_summary line, so only params and
    participants lines can be consumed here.
    """
    header = next(records)
    assert isinstance(header, Header)
    params: ParamsRecord | None = None
    participants: ParticipantsRecord | None = None
    extra: list[TraceRecord] = []
    while params is None or participants is None:
        record = next(records)
        if isinstance(record, ParamsRecord) and params is None:
            params = record
        elif isinstance(record, ParticipantsRecord) and participants is None:
            participants = record
        else:
            extra.append(record)
    return Prologue(header, params, participants, tuple(extra))


def open_trace(
    path: str | os.PathLike[str],
    *,
    skip_bad: bool,
    bad_lines: BadLines,
    cursor: TraceCursor | None = None,
) -> tuple[Prologue, Iterator[TraceRecord]]:
    records = iterate_trace(path, skip_bad=skip_bad, bad_lines=bad_lines, cursor=cursor)
    try:
        prologue = read_prologue(records)
    except StopIteration:
        raise ReplayError(
            f"{os.fspath(path)}: the trace ends before its first params and participants lines"
        ) from None
    return prologue, records


def apply_policy(params: ModuleParams, policy: str, shadow: bool) -> ModuleParams:
    """A copy of ``params`` with the replay's policy (and shadow flag) in force."""
    out = ModuleParams()
    out.CopyFrom(params)
    out.extension_params.health_params.policy = policy
    out.extension_params.health_params.shadow = shadow
    return out


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


def get_genesis_participant(recorded: Participant) -> Participant:
    """A recorded participant as it stands at its epoch's start: stats zero, not deactivated."""
    p = Participant()
    p.CopyFrom(recorded)
    if not p.index:
        p.index = p.address
    p.current_epoch_stats.CopyFrom(CurrentEpochStats())
    if p.status in (0, INACTIVE):
        p.status = ACTIVE
    return p


def _new_genesis(chain_id: str, params: ModuleParams, height: int) -> Genesis:
    genesis = Genesis(chain_id=chain_id)
    genesis.inference.params.CopyFrom(params.params)
    genesis.keepersim.extension_params.CopyFrom(params.extension_params)
    genesis.keepersim.height = height
    return genesis


def build_genesis(prologue: Prologue, params: ModuleParams) -> Genesis:
    """Genesis at ``first_height - 1`` with the recorded participants (the chain's
    ``participant_list``) and their models and ML nodes (keepersim's ``participant_nodes``) in
    the recorded epoch.

    When the first participants line is for epoch e > 0 (an export that starts mid-chain), the
    epoch and its groups are formed for e at the genesis height, as the module would form them
    (with no summaries before the trace, every reputation starts from scratch).
    """
    header = prologue.header
    height = header.first_height - 1
    genesis = _new_genesis(header.chain_id, params, height)
    genesis.inference.participant_list.extend(
        get_genesis_participant(p) for p in prologue.participants.participants
    )
    genesis.keepersim.participant_nodes.extend(prologue.participants.nodes)
    epoch_index = prologue.participants.epoch_index
    if epoch_index == 0:
        return genesis
    scratch = CommitStore(MemoryBackend())
    buffer = scratch.begin()
    keeper = Keeper(buffer)
    init_genesis(keeper, genesis)
    process_new_epoch_group(keeper, epoch_index, height)
    exported = export_genesis(keeper, height)
    buffer.discard()
    out = _new_genesis(header.chain_id, params, height)
    out.inference.participant_list.extend(exported.inference.participant_list)
    ext, formed = out.keepersim, exported.keepersim
    ext.participant_nodes.extend(formed.participant_nodes)
    ext.epochs.extend(e for e in formed.epochs if e.index == epoch_index)
    ext.epoch_groups.extend(g for g in formed.epoch_groups if g.epoch_index == epoch_index)
    ext.effective_epoch_index = epoch_index
    return out


def open_policy_chain(
    prologue: Prologue,
    policy: str,
    *,
    shadow: bool,
    store: StoreKind,
    store_dir: str | os.PathLike[str] | None,
    name: str,
    resume: bool = False,
) -> Chain:
    """A fresh chain for one replay, with the trace's genesis (:func:`build_genesis`) and
    ``policy`` (and ``shadow``) in force: in memory, or LevelDB under ``store_dir/name`` (which
    must not hold a chain yet, unless ``resume``: then a chain in it is opened as it stands)."""
    genesis = build_genesis(prologue, apply_policy(prologue.params.params, policy, shadow))
    if store == "memory":
        return Chain.open(memory=True, genesis=genesis)
    if store != "leveldb":
        raise ReplayError(f"unknown store {store!r}: expected 'leveldb' or 'memory'")
    if store_dir is None:
        raise ReplayError("a leveldb replay needs store_dir")
    folder = Path(store_dir) / name
    if not resume and folder.exists() and any(folder.iterdir()):
        raise ReplayError(
            f"{folder} is not empty: a replay needs a fresh store (--resume goes on with it)"
        )
    fresh = not (folder.exists() and any(folder.iterdir()))
    try:
        return Chain.open(folder, genesis=genesis)
    except BaseException:
        if fresh:  # never remove a store the replay was asked to go on with
            shutil.rmtree(folder, ignore_errors=True)
        raise


@dataclass(order=True, frozen=True, slots=True)
class Scheduled:
    height: int
    seq: int
    kind: str = field(compare=False)
    line: int = field(compare=False)  # trace line (0 for governance entries)
    msg: Message = field(compare=False)


class Schedule:
    """Messages due at given heights (params changes, governance, participant updates).

    Bounded by the number of scheduled changes, never by the trace length. Parameter changes are
    kept as ModuleParams and become their two messages when their block is built
    (:func:`expand_scheduled`, :func:`build_scheduled_msg`), so each chain gets its own policy
    override.
    """

    def __init__(self, max_listed: int = DEFAULT_MAX_LISTED) -> None:
        self._heap: list[Scheduled] = []
        self._seq = 0
        self.late: Listed = Listed(max_listed)

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, height: int, kind: str, line: int, msg: Message, committed: int) -> None:
        if height <= committed:
            self.late.add(
                {"kind": kind, "line": line, "height": height, "applied_at": committed + 1}
            )
            height = committed + 1
        self._seq += 1
        heapq.heappush(self._heap, Scheduled(height, self._seq, kind, line, msg))

    def pop_due(self, height: int) -> list[Scheduled]:
        out = []
        while self._heap and self._heap[0].height <= height:
            out.append(heapq.heappop(self._heap))
        return out

    def get_next_height(self) -> int | None:
        return self._heap[0].height if self._heap else None


class ParticipantTracker:
    """The recorded participant set, to turn a later participants line into messages."""

    def __init__(self, record: ParticipantsRecord) -> None:
        self._known: dict[str, MsgRegisterParticipant] = self._as_msgs(record)

    @staticmethod
    def _as_msgs(record: ParticipantsRecord) -> dict[str, MsgRegisterParticipant]:
        """Each participant's registration, with its models and ML nodes (none if the line
        registers none for it)."""
        nodes = {n.address: n for n in record.nodes}
        out: dict[str, MsgRegisterParticipant] = {}
        for p in record.participants:
            registered = nodes.get(p.address, ParticipantNodes())
            out[p.address] = MsgRegisterParticipant(
                creator=p.address,
                url=p.inference_url,
                weight=p.weight,
                models=list(registered.models),
                ml_nodes=list(registered.ml_nodes),
            )
        return out

    def compute_updates(self, record: ParticipantsRecord) -> list[MsgRegisterParticipant]:
        """Messages that turn the known set into the record's (weight 0 for one that left)."""
        out: list[MsgRegisterParticipant] = []
        now = self._as_msgs(record)
        for address, msg in sorted(now.items()):
            if self._known.get(address) != msg:
                out.append(msg)
                self._known[address] = msg
        for address in sorted(set(self._known) - set(now)):
            old = self._known[address]
            if old.weight != 0:
                gone = MsgRegisterParticipant()
                gone.CopyFrom(old)
                gone.weight = 0
                out.append(gone)
                self._known[address] = gone
        return out


def schedule_record(
    schedule: Schedule,
    record: ParamsRecord | ParticipantsRecord,
    tracker: ParticipantTracker,
    committed: int,
) -> None:
    """Turn a recorded params / participants line into scheduled messages."""
    if isinstance(record, ParamsRecord):
        schedule.add(record.height - 1, "params", record.line, record.params, committed)
        return
    for msg in tracker.compute_updates(record):
        schedule.add(record.height, "participant", record.line, msg, committed)


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


class BlockFeeder(Generic[T]):
    """Turns a stream of recorded starts into blocks: every height from ``first_height`` to
    ``last_height`` is one block, delivered in height order, empty or not.

    The starts of a height are gathered (:meth:`gather_start`; records come in start-height order)
    and go into that height's block once a later start shows the height is complete; the heights
    before it are delivered first. :meth:`finish_blocks` delivers what is left up to
    ``last_height``. A subclass's :meth:`deliver` builds and delivers one block and sets
    ``committed`` to its height.
    """

    def __init__(self, first_height: int, last_height: int) -> None:
        self.first_height = first_height
        self.last_height = last_height
        self.committed = first_height - 1
        self.gather_height: int | None = None
        self.gather: list[T] = []

    def deliver(self, height: int, starts: list[T]) -> None:
        raise NotImplementedError

    def gather_start(self, start: int, item: T) -> None:
        if self.gather_height is not None and start > self.gather_height:
            # Deliver the gathered block and the empty ones up to this start: pending outcomes
            # are then all of inferences in flight at ``start``.
            self.flush_through(start - 1)
        self.gather_height = start
        self.gather.append(item)

    def flush_through(self, target: int) -> None:
        while self.committed < target:
            height = self.committed + 1
            starts = self.gather if height == self.gather_height else []
            if starts:
                self.gather = []  # before the block: a checkpoint taken in it has it gone
            self.deliver(height, starts)

    def finish_blocks(self) -> None:
        if self.gather_height is not None:
            self.flush_through(self.gather_height)
        self.flush_through(self.last_height)


def build_recorded_start(inference: Inference) -> MsgStartInference:
    """A recorded inference's MsgStartInference: requested and assigned as recorded."""
    return MsgStartInference(
        creator=inference.requested_by,
        inference_id=inference.inference_id,
        model=inference.model,
        requested_by=inference.requested_by,
        assigned_to=inference.assigned_to,
        prompt_token_count=inference.prompt_token_count,
        max_tokens=inference.max_tokens,
    )


@dataclass(frozen=True, slots=True)
class ParamsPart:
    """One of the two messages of a scheduled params change, built per chain (its policy)."""

    params: ModuleParams
    extension: bool  # False: MsgUpdateParams (the chain's part); True: MsgUpdateExtensionParams


def expand_scheduled(item: Scheduled) -> list[Message | ParamsPart]:
    """A scheduled item's block items: a params change is two (the chain's Params, then
    keepersim's ExtensionParams, which the module loads together); anything else is its
    message."""
    if isinstance(item.msg, ModuleParams):
        return [ParamsPart(item.msg, extension=False), ParamsPart(item.msg, extension=True)]
    return [item.msg]


def build_scheduled_msg(item: ParamsPart, chain: Chain, policy: str, shadow: bool) -> Message:
    """The message of a params part for one chain (the params get the chain's policy)."""
    params = apply_policy(item.params, policy, shadow)
    if item.extension:
        return MsgUpdateExtensionParams(
            authority=GOV_AUTHORITY, extension_params=params.extension_params
        )
    return MsgUpdateParams(authority=GOV_AUTHORITY, params=params.params)


def get_table_exclusions(chain: Chain, shadow: bool) -> tuple[frozenset[str], bool, bool]:
    """(kept out, fallback, panic) of the committed height's selection table for model "".

    In shadow mode the table reports who the policy would keep out (``shadow_excluded``). When the
    table cannot be built because the gate keeps everyone out and the policy allows no fallback,
    every candidate counts as kept out; an empty pool (e.g. nobody with a PoC slot during PoC)
    keeps nobody out.
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
    excluded = table.shadow_excluded if shadow else table.excluded
    return frozenset(excluded), table.fallback, table.panic


class IntervalTracker:
    """Per participant, the start heights at which a policy keeps it out, as closed intervals.

    ``observe(height, excluded)`` says who is kept out for requests starting at ``height``;
    memory grows with the number of exclusion episodes, not with the trace length.
    """

    def __init__(self) -> None:
        self.open: dict[str, int] = {}
        self.closed: dict[str, list[tuple[int, int]]] = {}
        self.blocks: dict[str, int] = {}
        self.last_height: int | None = None

    def observe(self, height: int, excluded: frozenset[str]) -> None:
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
    digest = hashlib.sha256()
    with open(trace_path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return compute_fingerprint({"trace_sha256": digest.hexdigest(), **inputs})


def format_app_hash(app_hash: bytes) -> str:
    return app_hash.hex().upper()
