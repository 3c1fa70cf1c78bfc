"""An example health policy, "strikes": K misses in a row keep a participant out for N blocks.

Written from the policy interface alone: its writes go through PolicyStore (entries, wake-ups,
transitions), its verdict through PolicyReader.get_raw; it needs no keeper and no speed-up (the
chain's acceleration layer works beneath it unasked). Its entry is an existing message
(ConsecutiveEntry: a state, a miss counter, a height), so no proto change.
Run it on a test chain as a harness policy (docs/policies.md, "Writing a policy")::

    Chain.open(memory=True, genesis=genesis, policy_override=lambda: StrikesPolicy(3, 10))
"""

from __future__ import annotations

from typing import ClassVar

from keepersim.keeper.policies import Health, HealthPolicy, PolicyReader, PolicyStore
from keepersim.types.events import Outcome
from keepersim.types.messages import Inference
from keepersim.types.pb.keepersim.v1.health_pb2 import CLOSED, OPEN, ConsecutiveEntry

IN = Health(True, state="in")
OUT = Health(False, severity=1, state="out")


class StrikesPolicy(HealthPolicy):
    name: ClassVar[str] = "strikes"  # neither a chain policy's name...
    prefix: ClassVar[bytes] = b"\x10"  # ...nor its prefix: the keys of this policy's state

    def __init__(self, strikes: int = 3, out_blocks: int = 10) -> None:
        self.strikes = strikes  # settings only: state on self is not in the store
        self.out_blocks = out_blocks

    @staticmethod
    def decode(raw: bytes | None, address: str) -> ConsecutiveEntry:
        """The stored entry, or a new one (raw None) for a participant without one."""
        if raw is None:
            return ConsecutiveEntry(address=address)
        return ConsecutiveEntry.FromString(raw)

    def process_outcome(
        self, ctx: PolicyStore, address: str, outcome: Outcome, inference: Inference
    ) -> None:
        if outcome is Outcome.NEUTRAL:  # pushback is never a miss
            return
        entry = ctx.get(address, self.decode)
        if outcome is Outcome.SUCCESS:
            if entry.consecutive_failures == 0:
                return  # unchanged: nothing to write
            entry.consecutive_failures = 0
        else:
            entry.consecutive_failures += 1
            if entry.state == CLOSED and entry.consecutive_failures >= self.strikes:
                entry.state = OPEN
                entry.half_open_at_block = ctx.height + self.out_blocks
                ctx.schedule(entry.half_open_at_block, address)
                ctx.emit_transition(address, "in", "out", f"{self.strikes} misses in a row")
        ctx.set(address, entry)  # nothing reaches the store without set

    def process_end_block(self, ctx: PolicyStore) -> None:
        for address in ctx.pop_due():  # the wake-ups scheduled for this height
            entry = ctx.find(address, self.decode)
            if entry is None or entry.state != OPEN:
                continue
            entry.state = CLOSED
            entry.consecutive_failures = 0
            ctx.set(address, entry)
            ctx.emit_transition(address, "out", "in", f"{self.out_blocks} blocks out")

    def get_health(self, reader: PolicyReader, address: str, height: int) -> Health:
        # The verdict changes only when the entry is written (set), so it needs no valid_until.
        raw = reader.get_raw(address)
        if raw is not None and ConsecutiveEntry.FromString(raw).state == OPEN:
            return OUT
        return IN
