"""SMG's circuit-breaker calls, per participant, with explicit heights.

Mirrors the public methods of SMG's ``CircuitBreaker`` (smg-project/smg 28590879,
``model_gateway/src/worker/circuit_breaker.rs``: record_outcome / record_success /
record_failure, state, can_execute, reset, force_open, consecutive_failures,
consecutive_successes, total_failures, total_successes, stats) over keepersim's store, one
breaker per participant, time in blocks (SMG's ``elapsed >= timeout`` is ``height >=
opened_at_block + timeout_blocks``). The rules are consecutive.py's. Inside a block, wrap the
block's policy context; alone, ``open`` makes a context of its own over a keeper, and ``flush``
writes its queued wake-ups. Heights must not be below the context's height.
"""

from __future__ import annotations

from keepersim.keeper.acceleration.policy_store import ChainPolicyStore, StoreKeeper
from keepersim.keeper.policies.consecutive import (
    STATE_NAMES,
    BreakerSettings,
    ConsecutiveBreaker,
    get_settings,
    process_close,
    process_half_open,
    process_open,
    process_result,
    process_timeouts,
)
from keepersim.types.events import Outcome
from keepersim.types.pb.keepersim.v1.health_pb2 import CLOSED, OPEN, ConsecutiveEntry


class ConsecutiveBreakers:
    """The consecutive breakers of one policy context (see the module docstring)."""

    __slots__ = ("ctx",)

    def __init__(self, ctx: ChainPolicyStore) -> None:
        self.ctx = ctx

    @classmethod
    def open(cls, keeper: StoreKeeper, height: int = 0) -> ConsecutiveBreakers:
        """Breakers of their own over ``keeper``'s store, for calls at heights >= ``height``."""
        return cls(ChainPolicyStore(keeper, ConsecutiveBreaker(), height))

    def flush(self) -> None:
        self.ctx.flush()

    def get_settings(self, address: str) -> BreakerSettings:
        return get_settings(self.ctx.params.health_params.consecutive, address)

    def get_entry(self, address: str) -> ConsecutiveEntry:
        """The stored entry as it is (no timeout applied): CLOSED and zero when none. A copy, as
        SMG's clone: it does not move with the breaker."""
        entry = ConsecutiveEntry()
        entry.CopyFrom(self.get_live_entry(address))
        return entry

    def get_live_entry(self, address: str) -> ConsecutiveEntry:
        """The block's own entry, for the calls below that change it."""
        return self.ctx.get(address, ConsecutiveBreaker.get_entry)

    # recording
    def record_outcome(self, height: int, address: str, success: bool) -> None:
        kind = Outcome.SUCCESS if success else Outcome.MISS
        process_result(self.ctx, address, kind, self.get_settings(address), height)

    def record_success(self, height: int, address: str) -> None:
        self.record_outcome(height, address, True)

    def record_failure(self, height: int, address: str) -> None:
        self.record_outcome(height, address, False)

    def process_timeouts(self, height: int) -> None:
        """The end block's queued OPEN -> HALF_OPEN moves due by ``height``."""
        process_timeouts(self.ctx, height)

    # state (SMG's state() moves a timed-out OPEN breaker to HALF_OPEN as it reads it)
    def state(self, height: int, address: str) -> str:
        """ "closed" / "open" / "half_open" at ``height``; a due OPEN -> HALF_OPEN is made."""
        entry = self.get_live_entry(address)
        process_half_open(self.ctx, entry, height)
        return STATE_NAMES[entry.state]

    def can_execute(self, height: int, address: str) -> bool:
        return self.state(height, address) != STATE_NAMES[OPEN]

    def consecutive_failures(self, address: str) -> int:
        return self.get_entry(address).consecutive_failures

    def consecutive_successes(self, address: str) -> int:
        return self.get_entry(address).consecutive_successes

    def total_failures(self, address: str) -> int:
        return self.get_entry(address).total_failures

    def total_successes(self, address: str) -> int:
        return self.get_entry(address).total_successes

    def stats(self, height: int, address: str) -> dict[str, object]:
        """SMG's stats(): the state at ``height`` and the four counters."""
        state = self.state(height, address)
        entry = self.get_entry(address)
        return {
            "state": state,
            "consecutive_failures": entry.consecutive_failures,
            "consecutive_successes": entry.consecutive_successes,
            "total_failures": entry.total_failures,
            "total_successes": entry.total_successes,
        }

    # manual intervention
    def reset(self, height: int, address: str) -> None:
        """To CLOSED with both streaks cleared (a transition only if it was not CLOSED)."""
        entry = self.get_live_entry(address)
        if entry.state != CLOSED:
            process_close(self.ctx, entry, "reset")
        entry.consecutive_failures = 0
        entry.consecutive_successes = 0
        self.ctx.set(address, entry)

    def force_open(self, height: int, address: str) -> None:
        """To OPEN at ``height``; an OPEN breaker is left as it is (its timeout runs on)."""
        entry = self.get_live_entry(address)
        if entry.state == OPEN:
            return
        process_open(self.ctx, entry, self.get_settings(address), "forced open", height)
        self.ctx.set(address, entry)
