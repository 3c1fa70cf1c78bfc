"""The state a block's handlers share: the keeper over the block buffer, the active policy, the height.

A message runs in the buffer's nested scope (BlockBuffer.begin_nested) from a mark of the
block's in-memory state (get_message_mark): if it is rejected, its writes, events and decoded participants are taken back.
What the block cannot take back cheaply (new touched marks, the policy's in-memory state) has
the block built again without the message; handlers check before they write, so that is rare.
"""

from __future__ import annotations

from keepersim.keeper.acceleration.policy_store import ChainPolicyStore
from keepersim.keeper.keeper import Keeper
from keepersim.keeper.policies.base import HealthPolicy
from keepersim.keeper.sprt import SprtConstants, compute_sprt_constants
from keepersim.types.events import Outcome
from keepersim.types.messages import Inference


class BlockContext:
    __slots__ = (
        "keeper",
        "policy",
        "height",
        "policy_store",
        "policy_calls",
        "expiration_blocks",
        "_sprt",
        "_sprt_read",
    )

    def __init__(self, keeper: Keeper, policy: HealthPolicy, height: int) -> None:
        self.keeper = keeper
        self.policy = policy
        self.height = height
        self.policy_store = ChainPolicyStore(keeper, policy, height)
        # Calls of the policy's hooks so far (process_policy_start / process_policy_outcome).
        self.policy_calls = 0
        # The chain's ValidationParams.expiration_blocks (every start reads it): params change
        # only between blocks, so it is read once per block.
        self.expiration_blocks: int = keeper.get_params().validation_params.expiration_blocks
        self._sprt: SprtConstants | None = None
        self._sprt_read = False

    def process_policy_start(self, address: str, inference: Inference) -> None:
        """The policy's start hook (counted: a rejected message that reached it is rebuilt)."""
        self.policy_calls += 1
        self.policy.process_start(self.policy_store, address, inference)

    def process_policy_outcome(self, address: str, outcome: Outcome, inference: Inference) -> None:
        """The policy's outcome hook (counted like process_policy_start)."""
        self.policy_calls += 1
        self.policy.process_outcome(self.policy_store, address, outcome, inference)

    def get_message_mark(self) -> tuple[int, int, int, int]:
        """How far the block's in-memory state goes before a message (discard_message)."""
        hints = self.keeper.hints
        return (
            len(self.keeper.events),
            len(hints.touched),
            len(hints.verdict_touched),
            self.policy_calls,
        )

    def discard_message(self, mark: tuple[int, int, int, int]) -> bool:
        """The message begun at ``mark`` was rejected: take back its events and decoded
        participants (its writes are the buffer's to take back). False if it also marked
        addresses touched (the sets only grow) or reached the policy, which cannot be taken
        back here: the block must be built again without it."""
        events, touched, verdict_touched, calls = mark
        keeper = self.keeper
        del keeper.events[events:]
        keeper.discard_cached()
        return keeper.hints.get_mark() == (touched, verdict_touched) and self.policy_calls == calls

    def get_sprt_constants(self) -> SprtConstants | None:
        """The SPRT's logarithms for this block's params; None when the SPRT is off
        (``extension_params.sprt_enabled``). Read once per block: params change only between
        blocks (begin block applies an update)."""
        if not self._sprt_read:
            keeper = self.keeper
            if keeper.get_extension_params().sprt_enabled:
                self._sprt = compute_sprt_constants(keeper.get_params().validation_params)
            self._sprt_read = True
        return self._sprt
