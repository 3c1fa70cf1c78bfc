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

Offers are logged once per block, not written into each participant's entry: one record per
height lists who was offered then (the policy log), and an entry's ``last_selected_block``
learns of an offer only when the record is pruned, OFFER_LOG_BLOCKS later, and only if no
later offer followed (the fold). A participant's last offer is the later of the two. So an
inference costs its participant at most one entry write (the outcome's, when the history moves)
instead of two, and a block one record.

The speed-ups (verdicts shared between participants, the log's index kept in memory between
blocks) are in trin_multiplicative_index.py, each proven equal to its plain form.
"""

from __future__ import annotations

from functools import partial
from typing import ClassVar

from keepersim.keeper.policies import trin_multiplicative_index
from keepersim.keeper.policies.base import (
    NEVER,
    Health,
    HealthPolicy,
    ParamsView,
    PolicyLog,
    PolicyReader,
    PolicyStore,
)
from keepersim.types.events import Outcome
from keepersim.types.messages import Inference
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import (
    ExtensionParams,
    TrinMultiplicativeParams,
)
from keepersim.types.pb.keepersim.v1.health_pb2 import TrinMultiplicativeEntry, TrinOffers

HISTORY_BITS = 32
HISTORY_MASK = (1 << HISTORY_BITS) - 1
# Blocks an offer record is kept before it is folded into the entries it names. Any length gives
# the same verdicts; a longer one folds fewer offers (a later offer makes the fold needless).
OFFER_LOG_BLOCKS = 256

VerdictKey = tuple[int, int, int]  # (doublings, misses, valid_until)
KeyParams = tuple[int, int, int]  # (history, recency_blocks, max_recency_doublings)


def get_key_params(params: TrinMultiplicativeParams) -> KeyParams:
    """The params a verdict depends on."""
    return params.history, params.recency_blocks, params.max_recency_doublings


def compute_misses(failure_bits: int, history: int) -> int:
    """Failures among the last ``history`` outcomes."""
    return (failure_bits & ((1 << history) - 1)).bit_count()


def compute_verdict_key(
    failure_bits: int, last_selected_block: int, height: int, key_params: KeyParams
) -> VerdictKey:
    """(doublings, misses, valid_until) of an entry at ``height``: all its verdict is made of."""
    history, step, top = key_params
    misses = compute_misses(failure_bits, history)
    idle = height - last_selected_block
    doublings = idle // step if idle > 0 else 0
    if doublings >= top:
        return top, misses, NEVER
    # Last height with the same number of recency doublings.
    return doublings, misses, last_selected_block + (doublings + 1) * step - 1


def compute_next_key(key: VerdictKey, key_params: KeyParams) -> VerdictKey:
    """The key from ``key``'s valid_until + 1 on, with no new write: one more doubling."""
    doublings, misses, valid_until = key
    _, step, top = key_params
    doublings += 1
    return doublings, misses, NEVER if doublings >= top else valid_until + step


class OfferLog(PolicyLog[list[str]]):
    """The offer records (height -> the addresses offered then) and each named participant's
    latest offer among them."""

    __slots__ = ("latest",)

    def __init__(self) -> None:
        super().__init__()
        self.latest: dict[str, int] = {}

    @classmethod
    def from_records(cls, records: list[tuple[int, bytes]]) -> OfferLog:
        log = cls()
        for height, raw in records:  # ascending
            addresses = list(TrinOffers.FromString(raw).addresses)
            log.add_stored(height, addresses)
            for address in addresses:
                log.latest[address] = height
        return log

    def get_last_offer(self, entry: TrinMultiplicativeEntry) -> int:
        """The participant's last offer: logged, or folded into its entry (0: never)."""
        return max(entry.last_selected_block, self.latest.get(entry.address, 0))

    def process_offer(self, address: str, height: int) -> bool:
        """Log an offer at ``height`` (the newest height); False if already logged."""
        if self.latest.get(address) == height:
            return False
        self.latest[address] = height
        self.get_record(height, list).append(address)
        return True


class TrinMultiplicative(HealthPolicy):
    name: ClassVar[str] = "trin-multiplicative"
    prefix: ClassVar[bytes] = b"\x04"

    def __init__(self) -> None:
        self._verdicts = trin_multiplicative_index.VerdictMemo()
        self._key_params = ParamsView(
            lambda params: get_key_params(params.health_params.trin_multiplicative)
        )

    def get_key_params(self, params: ExtensionParams) -> KeyParams:
        return self._key_params.get(params)

    @staticmethod
    def get_entry(raw: bytes | None, address: str) -> TrinMultiplicativeEntry:
        if raw is None:
            return TrinMultiplicativeEntry(address=address)
        return TrinMultiplicativeEntry.FromString(raw)

    def get_verdict(self, key: VerdictKey, key_params: KeyParams) -> Health:
        """The verdict of ``key`` (the index shares it between participants)."""
        return self._verdicts.get((key, key_params), self.compute_verdict)

    def compute_verdict(self, key_and_params: tuple[VerdictKey, KeyParams]) -> Health:
        """weight x 2^doublings / 2^misses, everyone admitted; ``then`` is the next doubling's
        verdict."""
        key, key_params = key_and_params
        doublings, misses, valid_until = key
        then = None
        if valid_until < NEVER:
            then = partial(self.get_verdict, compute_next_key(key, key_params), key_params)
        # Positional (admitted, factor_num, factor_den, severity, valid_until, state, then).
        return Health(True, 1 << doublings, 1 << misses, misses, valid_until, "scored", then)

    @staticmethod
    def get_offer_log(holder: PolicyStore | PolicyReader) -> OfferLog:
        return trin_multiplicative_index.get_offer_log(holder, OfferLog, OfferLog.from_records)

    def process_start(self, ctx: PolicyStore, address: str, inference: Inference) -> None:
        """The offer: the idle clock restarts. Noted in the log's index now (a write's verdict
        in this block sees it); the record and the offered participants' verdicts are written
        in end block, after the block's outcomes."""
        self.get_offer_log(ctx).process_offer(address, ctx.height)

    def process_offer_verdicts(self, ctx: PolicyStore, offered: list[str]) -> None:
        """The verdicts of the participants offered in this block, at this height, to the chain
        with the commit: their idle clock is at 0."""
        height = ctx.height
        key_params = self.get_key_params(ctx.params)
        for address in offered:
            entry = ctx.find(address, self.get_entry)
            failure_bits = 0 if entry is None else entry.failure_bits
            key = compute_verdict_key(failure_bits, height, height, key_params)
            trin_multiplicative_index.hand_verdict(ctx, address, self.get_verdict(key, key_params))

    def process_outcome(
        self, ctx: PolicyStore, address: str, outcome: Outcome, inference: Inference
    ) -> None:
        if outcome is Outcome.NEUTRAL:
            return  # a rejected offer is neither a failure nor part of the history
        seen = ctx.find(address, self.get_entry)
        failure_bits = 0 if seen is None else seen.failure_bits
        outcome_count = 0 if seen is None else seen.outcome_count
        new_bits = ((failure_bits << 1) | (outcome is Outcome.MISS)) & HISTORY_MASK
        new_count = min(outcome_count + 1, HISTORY_BITS)
        if seen is not None and new_bits == failure_bits and new_count == outcome_count:
            return  # a full, clean history meets another success: the entry stays as it is
        entry = ctx.get(address, self.get_entry)
        entry.failure_bits = new_bits
        entry.outcome_count = new_count
        key_params = self.get_key_params(ctx.params)
        history = key_params[0]
        if compute_misses(new_bits, history) == compute_misses(failure_bits, history):
            # The verdict is made of the misses and the last offer alone: the chain's stands.
            trin_multiplicative_index.set_keeping_verdict(ctx, address, entry)
            return
        ctx.set(address, entry)
        last_offer = self.get_offer_log(ctx).get_last_offer(entry)
        key = compute_verdict_key(new_bits, last_offer, ctx.height, key_params)
        trin_multiplicative_index.hand_verdict(ctx, address, self.get_verdict(key, key_params))

    def process_end_block(self, ctx: PolicyStore) -> None:
        """Log this block's offers and hand over their verdicts; fold the records leaving the
        log into their entries."""
        log = self.get_offer_log(ctx)
        height = ctx.height
        offered = log.records.get(height)
        if offered:
            offered.sort()
            self.process_offer_verdicts(ctx, offered)
            log.process_write(ctx, height, TrinOffers(addresses=offered))
        while (popped := log.pop_oldest(ctx, height - OFFER_LOG_BLOCKS)) is not None:
            logged, addresses = popped
            for address in addresses:
                if log.latest.get(address) != logged:
                    continue  # offered again since: the later record speaks for it
                del log.latest[address]
                entry = ctx.get(address, self.get_entry)
                if entry.last_selected_block < logged:
                    entry.last_selected_block = logged
                    trin_multiplicative_index.set_keeping_verdict(
                        ctx, address, entry
                    )  # the same last offer: same verdict

    def get_health(self, reader: PolicyReader, address: str, height: int) -> Health:
        """Asked only when no verdict came with a commit (a new table, a reset): writes hand
        theirs over and lapses follow Health.then."""
        key_params = self.get_key_params(reader.params)
        entry = self.get_entry(reader.get_raw(address), address)
        last_offer = self.get_offer_log(reader).get_last_offer(entry)
        key = compute_verdict_key(entry.failure_bits, last_offer, height, key_params)
        return self.get_verdict(key, key_params)

    def get_state_view(self, reader: PolicyReader, address: str, height: int) -> dict[str, object]:
        history = reader.params.health_params.trin_multiplicative.history
        entry = self.get_entry(reader.get_raw(address), address)
        last_offer = self.get_offer_log(reader).get_last_offer(entry)
        doublings, misses, _ = compute_verdict_key(
            entry.failure_bits, last_offer, height, self.get_key_params(reader.params)
        )
        return {
            "state": "scored",
            "admitted": True,
            "misses": misses,
            "outcomes": min(entry.outcome_count, history),
            "recency_doublings": doublings,
            "factor_num": 1 << doublings,
            "factor_den": 1 << misses,
            "last_selected_block": last_offer,
        }
