"""State access of the inference module: one typed getter and setter per collection.

A Keeper wraps one store: the block buffer while a block is processed, or a read-only view of
the last committed block for queries. Rules live in the sibling modules; this one only encodes.
"""

from __future__ import annotations

from collections.abc import Iterator

from keepersim.keeper.acceleration.hints import BlockHints
from keepersim.store.buffer import BlockBuffer, KVStore
from keepersim.store.kv import prefix_end
from keepersim.types import keys
from keepersim.types.events import Event
from keepersim.types.messages import (
    Epoch,
    EpochGroupData,
    EpochPerformanceSummary,
    ExcludedParticipant,
    Inference,
    Params,
    Participant,
)
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams, ModuleParams
from keepersim.types.pb.keepersim.v1.state_pb2 import (
    EpochDeclines,
    ParticipantNodes,
)

_P = keys.PARTICIPANTS
_INF = keys.INFERENCES
_TO = keys.INFERENCE_TIMEOUTS


class Keeper:
    """Typed access to the module's collections over one KVStore, plus the block's event list."""

    __slots__ = (
        "store",
        "chain_id",
        "events",
        "hints",
        "params_changed",
        "_params",
        "_extension_params",
        "_participants",
        "_epoch_index",
    )

    def __init__(
        self,
        store: KVStore,
        chain_id: str = "",
        params: Params | None = None,
        extension_params: ExtensionParams | None = None,
    ) -> None:
        """``params``, ``extension_params``: the decoded params of the last commit, if the caller
        keeps them (read-only)."""
        self.store = store
        self.chain_id = chain_id or self._load_chain_id()
        self.events: list[Event] = []
        # The block's hints to the chain's verdict memo (the acceleration layer's).
        self.hints = BlockHints()
        self.params_changed = False  # new params took effect in this block
        self._params: Params | None = params
        self._extension_params: ExtensionParams | None = extension_params
        self._participants: dict[str, Participant] = {}
        self._epoch_index: int | None = None  # the effective epoch index, once read

    def _load_chain_id(self) -> str:
        raw = self.store.get(keys.CHAIN_ID)
        return raw.decode() if raw else ""

    def set_chain_id(self, chain_id: str) -> None:
        self.store.set(keys.CHAIN_ID, chain_id.encode())
        self.chain_id = chain_id

    # params: the chain's Params and keepersim's ExtensionParams, each with its pending update
    def _get_params_raw(self, key: bytes) -> bytes | None:
        """Params as stored, read without gas: the keeper holds the decoded params of the last
        commit when the chain gives them, and whether it does (a reopened chain does not) must
        not change a block's gas (docs/metrics.md, "Gas"); the same under every policy."""
        store = self.store
        if not isinstance(store, BlockBuffer):
            return store.get(key)
        gas = store.gas
        raw = store.get(key)
        store.gas = gas
        return raw

    def get_params(self) -> Params:
        if self._params is None:
            raw = self._get_params_raw(keys.PARAMS)
            if raw is None:
                raise LookupError("params are not set: the chain has no genesis")
            self._params = Params.FromString(raw)
        return self._params

    def set_params(self, params: Params) -> None:
        self.store.set(keys.PARAMS, params.SerializeToString())
        self._params = Params()
        self._params.CopyFrom(params)

    def get_extension_params(self) -> ExtensionParams:
        if self._extension_params is None:
            raw = self._get_params_raw(keys.EXTENSION_PARAMS)
            if raw is None:
                raise LookupError("extension params are not set: the chain has no genesis")
            self._extension_params = ExtensionParams.FromString(raw)
        return self._extension_params

    def set_extension_params(self, params: ExtensionParams) -> None:
        self.store.set(keys.EXTENSION_PARAMS, params.SerializeToString())
        self._extension_params = ExtensionParams()
        self._extension_params.CopyFrom(params)

    def get_module_params(self) -> ModuleParams:
        """Both params in one message (a copy)."""
        return ModuleParams(params=self.get_params(), extension_params=self.get_extension_params())

    def get_pending_params(self) -> Params | None:
        raw = self.store.get(keys.PENDING_PARAMS)
        return None if raw is None else Params.FromString(raw)

    def set_pending_params(self, params: Params) -> None:
        self.store.set(keys.PENDING_PARAMS, params.SerializeToString())

    def delete_pending_params(self) -> None:
        self.store.delete(keys.PENDING_PARAMS)

    def get_pending_extension_params(self) -> ExtensionParams | None:
        raw = self.store.get(keys.PENDING_EXTENSION_PARAMS)
        return None if raw is None else ExtensionParams.FromString(raw)

    def set_pending_extension_params(self, params: ExtensionParams) -> None:
        self.store.set(keys.PENDING_EXTENSION_PARAMS, params.SerializeToString())

    def delete_pending_extension_params(self) -> None:
        self.store.delete(keys.PENDING_EXTENSION_PARAMS)

    # participants
    def get_participant(self, address: str) -> Participant | None:
        """The participant, decoded once per keeper; callers mutate it and call set_participant."""
        cached = self._participants.get(address)
        if cached is not None:
            return cached
        participant = self.store.take_message(_P + address.encode(), Participant.FromString)
        if participant is not None:
            self._participants[address] = participant
        return participant

    def has_participant(self, address: str) -> bool:
        return address in self._participants or self.store.has(_P + address.encode())

    def set_participant(self, participant: Participant) -> None:
        address = participant.address
        self.store.set_message(_P + address.encode(), participant)
        self._participants[address] = participant
        self.hints.touched.add(address)

    def discard_cached(self) -> None:
        """Forget the decoded participants: after a rejected message they may hold its changes
        (the store, which has them taken back, decodes them again)."""
        self._participants = {}
        self._epoch_index = None

    def iterate_participants(self) -> Iterator[Participant]:
        for key, raw in self.store.iterate(_P, prefix_end(_P)):
            cached = self._participants.get(key[1:].decode())
            yield cached if cached is not None else Participant.FromString(raw)

    def iterate_participants_from(self, start_address: str) -> Iterator[Participant]:
        for _, raw in self.store.iterate(_P + start_address.encode(), prefix_end(_P)):
            yield Participant.FromString(raw)

    # participants' models and ML nodes (keepersim.v1; the chain learns them from hardware
    # declarations and the PoC)
    def get_participant_nodes(self, address: str) -> ParticipantNodes | None:
        raw = self.store.get(keys.PARTICIPANT_NODES + keys.participant_key(address))
        return None if raw is None else ParticipantNodes.FromString(raw)

    def set_participant_nodes(self, nodes: ParticipantNodes) -> None:
        key = keys.PARTICIPANT_NODES + keys.participant_key(nodes.address)
        self.store.set(key, nodes.SerializeToString())

    def iterate_participant_nodes(self) -> Iterator[ParticipantNodes]:
        p = keys.PARTICIPANT_NODES
        for _, raw in self.store.iterate(p, prefix_end(p)):
            yield ParticipantNodes.FromString(raw)

    # declines (keepersim.v1), per participant and epoch
    def get_declines(self, epoch_index: int, address: str) -> int:
        raw = self.store.get(keys.EPOCH_DECLINES + keys.declines_key(epoch_index, address))
        return 0 if raw is None else EpochDeclines.FromString(raw).declined_requests

    def set_declines(self, entry: EpochDeclines) -> None:
        key = keys.EPOCH_DECLINES + keys.declines_key(entry.epoch_index, entry.address)
        self.store.set(key, entry.SerializeToString())

    def iterate_declines(self) -> Iterator[EpochDeclines]:
        p = keys.EPOCH_DECLINES
        for _, raw in self.store.iterate(p, prefix_end(p)):
            yield EpochDeclines.FromString(raw)

    # inferences
    def get_inference(self, inference_id: str) -> Inference | None:
        """The inference, the caller's to change and write back with set_inference."""
        return self.store.take_message(_INF + inference_id.encode(), Inference.FromString)

    def has_inference(self, inference_id: str) -> bool:
        return self.store.has(_INF + inference_id.encode())

    def set_inference(self, inference: Inference) -> None:
        self.store.set_message(_INF + inference.inference_id.encode(), inference)

    def iterate_inferences(self, start_id: str = "") -> Iterator[Inference]:
        for _, raw in self.store.iterate(_INF + start_id.encode(), prefix_end(_INF)):
            yield Inference.FromString(raw)

    # expiry queue, keyed by (expiration_height, inference_id)
    def set_timeout(self, expiration_height: int, inference_id: str) -> None:
        self.store.set(_TO + keys.timeout_key(expiration_height, inference_id), b"")

    def get_timeouts_due(self, height: int) -> list[tuple[bytes, str]]:
        """(store key, inference id) of the timeouts at exactly ``height``, collected before any delete."""
        start = _TO + keys.encode_u64(height)
        return [(key, key[9:].decode()) for key, _ in self.store.iterate(start, prefix_end(start))]

    def iterate_timeouts(self) -> Iterator[tuple[int, str]]:
        for key, _ in self.store.iterate(_TO, prefix_end(_TO)):
            yield keys.decode_timeout_key(key[1:])

    def delete_key(self, key: bytes) -> None:
        self.store.delete(key)

    # epochs and groups
    def get_effective_epoch_index(self) -> int:
        """Read once per keeper (every start reads it; only set_effective_epoch_index moves it)."""
        index = self._epoch_index
        if index is None:
            raw = self.store.get(keys.EFFECTIVE_EPOCH_INDEX)
            index = self._epoch_index = 0 if raw is None else keys.decode_u64(raw)
        return index

    def set_effective_epoch_index(self, index: int) -> None:
        self.store.set(keys.EFFECTIVE_EPOCH_INDEX, keys.encode_u64(index))
        self._epoch_index = index

    def get_epoch(self, index: int) -> Epoch | None:
        raw = self.store.get(keys.EPOCHS + keys.epoch_key(index))
        return None if raw is None else Epoch.FromString(raw)

    def set_epoch(self, epoch: Epoch) -> None:
        self.store.set(keys.EPOCHS + keys.epoch_key(epoch.index), epoch.SerializeToString())

    def iterate_epochs(self) -> Iterator[Epoch]:
        for _, raw in self.store.iterate(keys.EPOCHS, prefix_end(keys.EPOCHS)):
            yield Epoch.FromString(raw)

    def get_epoch_group(self, epoch_index: int, model: str) -> EpochGroupData | None:
        raw = self.store.get(keys.EPOCH_GROUP_DATA + keys.epoch_group_key(epoch_index, model))
        return None if raw is None else EpochGroupData.FromString(raw)

    def set_epoch_group(self, group: EpochGroupData) -> None:
        key = keys.EPOCH_GROUP_DATA + keys.epoch_group_key(group.epoch_index, group.model_id)
        self.store.set(key, group.SerializeToString())

    def iterate_epoch_groups(self) -> Iterator[EpochGroupData]:
        for _, raw in self.store.iterate(keys.EPOCH_GROUP_DATA, prefix_end(keys.EPOCH_GROUP_DATA)):
            yield EpochGroupData.FromString(raw)

    # epoch performance summaries, keyed by (address, epoch)
    def set_summary(self, summary: EpochPerformanceSummary) -> None:
        key = keys.summary_key(summary.participant_id, summary.epoch_index)
        self.store.set(keys.EPOCH_PERFORMANCE_SUMMARIES + key, summary.SerializeToString())

    def get_summary(self, address: str, epoch_index: int) -> EpochPerformanceSummary | None:
        raw = self.store.get(
            keys.EPOCH_PERFORMANCE_SUMMARIES + keys.summary_key(address, epoch_index)
        )
        return None if raw is None else EpochPerformanceSummary.FromString(raw)

    def get_recent_summaries(self, address: str, limit: int) -> list[EpochPerformanceSummary]:
        """The participant's newest ``limit`` summaries, newest first."""
        start = keys.EPOCH_PERFORMANCE_SUMMARIES + keys.summary_prefix(address)
        out: list[EpochPerformanceSummary] = []
        for _, raw in self.store.iterate(start, prefix_end(start), reverse=True):
            out.append(EpochPerformanceSummary.FromString(raw))
            if len(out) >= limit:
                break
        return out

    def iterate_summaries(self) -> Iterator[EpochPerformanceSummary]:
        p = keys.EPOCH_PERFORMANCE_SUMMARIES
        for _, raw in self.store.iterate(p, prefix_end(p)):
            yield EpochPerformanceSummary.FromString(raw)

    def get_summaries_for_epoch(self, epoch_index: int) -> list[EpochPerformanceSummary]:
        """One epoch's summaries in address order (a point get per participant)."""
        out = []
        for participant in self.iterate_participants():
            summary = self.get_summary(participant.address, epoch_index)
            if summary is not None:
                out.append(summary)
        return out

    # excluded participants (SPRT deactivations), keyed by (epoch, address)
    def set_excluded(self, entry: ExcludedParticipant) -> None:
        key = keys.EXCLUDED_PARTICIPANTS + keys.excluded_key(entry.epoch_index, entry.address)
        self.store.set(key, entry.SerializeToString())

    def iterate_excluded(self, epoch_index: int | None = None) -> Iterator[ExcludedParticipant]:
        start = keys.EXCLUDED_PARTICIPANTS
        if epoch_index is not None:
            start += keys.encode_u64(epoch_index)
        for _, raw in self.store.iterate(start, prefix_end(start)):
            yield ExcludedParticipant.FromString(raw)

    # events
    def emit(self, event: Event) -> None:
        self.events.append(event)
