"""Records to genesis: the chain a trace starts from, at ``first_height - 1``, from its
prologue (the header and the first ``params`` and ``participants`` lines). As-recorded replay,
what-if and ``keepersim serve`` all start from this genesis.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from keepersim.keeper.keeper import Keeper
from keepersim.module.epoch import process_new_epoch_group
from keepersim.module.genesis import compute_genesis, export_genesis, init_genesis
from keepersim.store.committed import CommitStore
from keepersim.store.memory import MemoryBackend
from keepersim.trace.records import Header, ParamsRecord, ParticipantsRecord, TraceRecord
from keepersim.types.messages import ACTIVE, INACTIVE, CurrentEpochStats, Participant
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis

__all__ = ["Prologue", "build_genesis", "get_genesis_participant", "read_prologue"]


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
    participants lines can be consumed here. Raises StopIteration when the trace ends first.
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


def build_genesis(prologue: Prologue, params: ModuleParams | None = None) -> Genesis:
    """Genesis at ``first_height - 1`` with ``params`` (default: the recorded ones), the recorded
    participants (the chain's ``participant_list``) and their models and ML nodes (keepersim's
    ``participant_nodes``) in the recorded epoch.

    When the first participants line is for epoch e > 0 (an export that starts mid-chain), the
    epoch and its groups are formed for e at the genesis height, as the module would form them
    (with no summaries before the trace, every reputation starts from scratch).
    """
    if params is None:
        params = prologue.params.params
    header = prologue.header
    height = header.first_height - 1
    genesis = compute_genesis(header.chain_id, params, (), height)
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
    out = compute_genesis(header.chain_id, params, (), height)
    out.inference.participant_list.extend(exported.inference.participant_list)
    ext, formed = out.keepersim, exported.keepersim
    ext.participant_nodes.extend(formed.participant_nodes)
    ext.epochs.extend(e for e in formed.epochs if e.index == epoch_index)
    ext.epoch_groups.extend(g for g in formed.epoch_groups if g.epoch_index == epoch_index)
    ext.effective_epoch_index = epoch_index
    return out
