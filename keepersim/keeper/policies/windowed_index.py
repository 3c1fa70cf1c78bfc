"""windowed's speed-ups, in one place, each beside the plain form it must equal.

The rule (windowed.py) calls them through :func:`get_index`, :func:`get_reader_value` and
:func:`set_entry`;
with :data:`ENABLED` False (tests/policies/test_windowed_index.py) every call takes its plain
form, and the rule must end each block with the same entries, wake-ups, events, verdict
tables and app hash either way, and the same when the index is forgotten between blocks.

- The verdict marker. A write tells the chain whether the participant's verdict may have
  moved, so the chain asks get_health again only then (:func:`set_entry`).
  A healthy participant's verdict reads its state, its ramp (which the verdict's
  valid_until steps on its own) and the evidence its suspicion weight comes from; comparing
  that evidence before and after the write is cheaper than the weight. Plain: every write may
  move the verdict.
- The block's fleet latencies. Each success's latency waits in memory and the fleet entry
  takes the block's together at the start of the end block, before anything reads them (one
  bound of its list per block instead of one per success). Plain: the fleet entry takes each
  at once. The fleet entry is read in the same blocks either way (the end block reads it
  whenever a latency waits), though the block's first read of it may come in a message
  instead of the end block.
- The saturation guard per reader: read once for a whole table's verdicts. Plain: once per
  verdict.

Nothing here decides: drop any of these and the rule decides the same. Beside them, the one
place that knows where the rule's in-memory state of a block is kept (get_block).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from keepersim.keeper.acceleration import policy_store as acceleration
from keepersim.keeper.policies.base import PolicyReader, PolicyStore
from keepersim.keeper.policies.windowed_evidence import compute_suspicion_window
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import WindowedParams
from keepersim.types.pb.keepersim.v1.health_pb2 import W_HEALTHY, WindowedEntry

ENABLED = True
"""False: every speed-up takes its plain form (tests only)."""

_KEY = "windowed_index"
_BLOCK_KEY = "windowed_block"
T = TypeVar("T")
VerdictMarker = tuple[int, int, int] | None


class WindowedIndex:
    """What the speed-ups keep while a block is processed."""

    __slots__ = ("fleet_latencies", "deferring")

    def __init__(self, *, deferring: bool) -> None:
        self.fleet_latencies: list[int] = []
        self.deferring = deferring

    def process_defer_latency(self, latency: int) -> bool:
        """Keep a success's latency for the end block; False (plain form): add it now."""
        if not self.deferring:
            return False
        self.fleet_latencies.append(latency)
        return True

    def take_deferred_latencies(self) -> list[int]:
        """The block's latencies not yet added to the fleet entry, oldest first."""
        latencies, self.fleet_latencies = self.fleet_latencies, []
        return latencies


class WindowedBlock:
    """The rule's state of the block being processed, kept in memory until its end block."""

    __slots__ = ("to_judge",)

    def __init__(self) -> None:
        # The windows that took a miss or reached min_samples: the end block judges them.
        self.to_judge: set[str] = set()

    def take_to_judge(self) -> list[str]:
        """The windows to judge, sorted; none are left."""
        addresses, self.to_judge = sorted(self.to_judge), set()
        return addresses


def get_block(ctx: PolicyStore) -> WindowedBlock:
    """The rule's in-memory state of this block (not a speed-up: the rule needs it), kept in
    the context's block state (PolicyStore.block), emptied by every end block."""
    block = ctx.block.get(_BLOCK_KEY)
    if not isinstance(block, WindowedBlock):
        block = ctx.block[_BLOCK_KEY] = WindowedBlock()
    return block


def get_index(ctx: PolicyStore) -> WindowedIndex:
    """The block's index (the one place that knows where it is kept: the acceleration layer's
    memo of the chain's store). A store without one (the plain form, a store the chain did not
    open) defers nothing."""
    memo = acceleration.get_memo(ctx)
    index = memo.get(_KEY)
    if not isinstance(index, WindowedIndex):
        fast = ENABLED and acceleration.get_accelerated(ctx) is not None
        index = memo[_KEY] = WindowedIndex(deferring=fast)
    return index


def get_reader_value(reader: PolicyReader, key: str, compute: Callable[[], T]) -> T:
    """``compute()``, computed once per reader (one reader serves a whole table's verdicts);
    plain: at every call."""
    if not ENABLED:
        return compute()
    memo = acceleration.get_memo(reader)
    if key not in memo:
        memo[key] = compute()
    return memo[key]  # type: ignore[return-value]


def set_entry(
    ctx: PolicyStore,
    address: str,
    entry: WindowedEntry,
    before: VerdictMarker,
    params: WindowedParams,
) -> None:
    """``ctx.set``, telling the chain whether the change may move the verdict (plain: it is
    always told it may)."""
    acceleration.set_with_hint(ctx, address, entry, is_verdict_moved(entry, before, params))


def get_verdict_marker(entry: WindowedEntry, params: WindowedParams) -> VerdictMarker:
    """What a healthy participant's verdict depends on besides its ramp: its state and the
    evidence its suspicion weight is computed from (none without a miss). Plain: None."""
    if not ENABLED:
        return None
    if entry.state != W_HEALTHY or params.suspicion_prior_pct == 0:
        return entry.state, 0, 0
    misses, samples = compute_suspicion_window(entry, params)
    return (entry.state, misses, samples) if misses else (entry.state, 0, 0)


def is_verdict_moved(entry: WindowedEntry, before: VerdictMarker, params: WindowedParams) -> bool:
    """Whether a write may change the participant's verdict: always while it is not healthy
    (a probe slot, the cooldown's end), else when its state or suspicion evidence moved since
    ``before`` (get_verdict_marker before the write). Plain: always."""
    if before is None or entry.state != W_HEALTHY:
        return True
    return get_verdict_marker(entry, params) != before


def set_keeping_verdict(ctx: PolicyStore, address: str, entry: WindowedEntry) -> None:
    """``ctx.set`` for a change that cannot move a verdict (the fleet entry). Plain: ctx.set."""
    acceleration.set_keeping_verdict(ctx, address, entry)


def touch_all_verdicts(ctx: PolicyStore) -> None:
    """Every verdict may have moved (the fleet's saturation changed): the chain asks each
    again. Not a speed-up: the verdicts the chain keeps must be dropped in either form."""
    acceleration.touch_all_verdicts(ctx)
