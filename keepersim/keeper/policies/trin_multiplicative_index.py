"""trin-multiplicative's speed-ups, in one place, each beside the plain form it must equal.

The rule (trin_multiplicative.py) calls them through this module; with :data:`ENABLED` False
(tests/policies/test_policy_indexes.py) every call takes its plain form, and the rule must end
each block with the same entries, log, verdict tables, gas and app hash either way.

- Shared verdicts. A verdict is made of its key (doublings, misses, valid_until) and three
  params alone, and a Health is immutable, so the participants of one key share one object:
  mostly those offered in one block. A small memo keeps them without holding thousands of
  stale verdicts (cleared when full). Plain: each verdict built when asked.
- The offer log's index (OfferLog: the records by height, this block's offers before the end
  block writes them, and each named participant's latest offer) is kept between blocks in the
  context's memo and built from the stored records when missing, the reads charged to no one
  (acceleration.policy_store.get_log_index). Plain: built again whenever forgotten; the tests forget it before every
  other block and compare.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from google.protobuf.message import Message

from keepersim.keeper.acceleration import policy_store as acceleration
from keepersim.keeper.policies.base import Health, PolicyReader, PolicyStore

ENABLED = True
"""False: every speed-up takes its plain form (tests only)."""

# Verdicts are shared between the participants of a key, mostly those offered in one block: a
# small memo keeps them without holding thousands of stale verdicts in memory.
HEALTH_MEMO_SIZE = 256

K = TypeVar("K")
LogT = TypeVar("LogT")


class VerdictMemo:
    """Verdicts by (key, key params): one shared Health per key."""

    __slots__ = ("_healths",)

    def __init__(self) -> None:
        self._healths: dict[object, Health] = {}

    def get(self, key: K, compute: Callable[[K], Health]) -> Health:
        """The verdict of ``key``: ``compute(key)``, shared with every ask of the same key."""
        if not ENABLED:
            return compute(key)
        verdict = self._healths.get(key)
        if verdict is None:
            if len(self._healths) >= HEALTH_MEMO_SIZE:
                self._healths.clear()
            verdict = self._healths[key] = compute(key)
        return verdict


def get_offer_log(
    holder: PolicyStore | PolicyReader,
    kind: type[LogT],
    build: Callable[[list[tuple[int, bytes]]], LogT],
) -> LogT:
    """The offer log's index (the one place that knows where it is kept: the holder's memo)."""
    return acceleration.get_log_index(holder, "offers", kind, build)


def hand_verdict(ctx: PolicyStore, address: str, health: Health) -> None:
    """The verdict ``address`` has once the block commits, handed to the chain so it need not
    ask (plain: the chain is told it may have moved, and asks)."""
    acceleration.hand_verdict(ctx, address, health)


def set_keeping_verdict(ctx: PolicyStore, address: str, entry: Message) -> None:
    """``ctx.set`` for a change that cannot move the verdict. Plain: ctx.set."""
    acceleration.set_keeping_verdict(ctx, address, entry)
