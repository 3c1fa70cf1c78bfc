"""trin's first census-scoring proposal (morph-dev): reputation x recency, as integer powers of 2.

factor = 2^recency_doublings / 2^misses, where
- misses: failures among the participant's last ``history`` (16) outcomes, neutral excluded
  ("rejected offers shouldn't be counted as failures"); each halves the weight;
- recency_doublings = min(idle // recency_blocks, max_recency_doublings), idle = blocks since
  the participant was last assigned an inference. The assignment (MsgStartInference, seen by
  process_start) is the chain-visible "offer". A participant never assigned counts as idle since
  height 0, i.e. at the cap, so newcomers get explored. The cap keeps one long-idle participant
  from taking over the draw; the recovery the proposal wants (one doubling per quiet period
  undoes one recent miss) stays.

Nobody is ever kept out: the gate admits all and only the weight moves. The proposal's third
factor, distance (u16::MAX - distance(peer, content id)), has no counterpart here: Portal peers
store only the content near their node id within a radius, so closeness decides who can serve
a key, whereas every executor of a model serves every request of that model. There is no
content-id keyspace and no radius to measure against.

The history is stored as 32 bits (newest bit 0) whatever ``history`` is, and masked when read,
so a params change applies to the recorded past at once. ``valid_until`` is the last height
before the next recency doubling, so the chain's memo steps the factor exactly on time.
"""

from __future__ import annotations

from typing import ClassVar

from keepersim.keeper.policies.base import (
    NEVER,
    Health,
    HealthPolicy,
    PolicyContext,
    PolicyReader,
)
from keepersim.types.events import Outcome
from keepersim.types.pb.health_pb2 import TrinMultiplicativeEntry
from keepersim.types.pb.params_pb2 import TrinMultiplicativeParams

HISTORY_BITS = 32
HISTORY_MASK = (1 << HISTORY_BITS) - 1


def compute_misses(entry: TrinMultiplicativeEntry, history: int) -> int:
    """Failures among the last ``history`` recorded (non-neutral) outcomes."""
    return (entry.failure_bits & ((1 << history) - 1)).bit_count()


def compute_doublings(
    entry: TrinMultiplicativeEntry, height: int, params: TrinMultiplicativeParams
) -> int:
    idle = max(0, height - entry.last_selected_block)
    return min(params.max_recency_doublings, idle // params.recency_blocks)


def get_valid_until(
    entry: TrinMultiplicativeEntry, height: int, params: TrinMultiplicativeParams
) -> int:
    """Last height with the same number of recency doublings."""
    doublings = compute_doublings(entry, height, params)
    if doublings >= params.max_recency_doublings:
        return NEVER
    return entry.last_selected_block + (doublings + 1) * params.recency_blocks - 1


class TrinMultiplicative(HealthPolicy):
    name: ClassVar[str] = "trin-multiplicative"
    prefix: ClassVar[bytes] = b"\x04"

    @staticmethod
    def get_entry(raw: bytes | None, address: str) -> TrinMultiplicativeEntry:
        if raw is None:
            return TrinMultiplicativeEntry(address=address)
        return TrinMultiplicativeEntry.FromString(raw)

    def process_start(self, ctx: PolicyContext, address: str, inference_id: str) -> None:
        """The offer: the idle clock restarts."""
        raw = ctx.get_raw(address)
        entry = self.get_entry(raw, address)
        if raw is not None and entry.last_selected_block == ctx.height:
            return  # already restarted in this block
        entry.last_selected_block = ctx.height
        ctx.set_message(address, entry)

    def process_outcome(
        self, ctx: PolicyContext, address: str, outcome: Outcome, start_height: int
    ) -> None:
        if outcome is Outcome.NEUTRAL:
            return  # a rejected offer is neither a failure nor part of the history
        entry = self.get_entry(ctx.get_raw(address), address)
        bit = 1 if outcome is Outcome.MISS else 0
        entry.failure_bits = ((entry.failure_bits << 1) | bit) & HISTORY_MASK
        entry.outcome_count = min(entry.outcome_count + 1, HISTORY_BITS)
        ctx.set_message(address, entry)

    def get_health(self, reader: PolicyReader, address: str, height: int) -> Health:
        params = reader.params.health_params.trin_multiplicative
        entry = self.get_entry(reader.get_raw(address), address)
        misses = compute_misses(entry, params.history)
        doublings = compute_doublings(entry, height, params)
        return Health(
            True,
            factor_num=1 << doublings,
            factor_den=1 << misses,
            severity=misses,
            valid_until=get_valid_until(entry, height, params),
            state="scored",
        )

    def get_state_view(self, reader: PolicyReader, address: str, height: int) -> dict[str, object]:
        params = reader.params.health_params.trin_multiplicative
        entry = self.get_entry(reader.get_raw(address), address)
        misses = compute_misses(entry, params.history)
        doublings = compute_doublings(entry, height, params)
        return {
            "state": "scored",
            "admitted": True,
            "misses": misses,
            "outcomes": min(entry.outcome_count, params.history),
            "recency_doublings": doublings,
            "factor_num": 1 << doublings,
            "factor_den": 1 << misses,
            "last_selected_block": entry.last_selected_block,
        }
