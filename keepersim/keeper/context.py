"""The state a block's handlers share: the keeper over the block buffer, the active policy, the height.

A message runs in a scope (begin_message): what it added to the keeper's in-memory block state
(events, touched sets, decoded participants) is taken back if it is rejected, together with its
writes (the buffer's nested scope, BlockBuffer.begin_nested). The policy's in-memory state is
not staged: a rejected message that reached the policy has the block built again without it.
"""

from __future__ import annotations

from keepersim.keeper.keeper import Keeper
from keepersim.keeper.policies.base import HealthPolicy, PolicyContext
from keepersim.keeper.sprt import SprtConstants, compute_sprt_constants


class BlockContext:
    __slots__ = ("keeper", "policy", "height", "policy_ctx", "_sprt", "policy_calls", "_saved")

    def __init__(self, keeper: Keeper, policy: HealthPolicy, height: int) -> None:
        self.keeper = keeper
        self.policy = policy
        self.height = height
        self.policy_ctx = PolicyContext(keeper, policy, height)
        self._sprt: SprtConstants | None = None
        # Calls of the policy's message hooks (process_start, process_outcome) so far.
        self.policy_calls = 0
        self._saved: tuple[int, set[str], set[str], int] | None = None

    def begin_message(self) -> None:
        """A message starts: its additions to the touched sets are kept apart until it is done."""
        keeper = self.keeper
        self._saved = (
            len(keeper.events),
            keeper.touched,
            keeper.verdict_touched,
            self.policy_calls,
        )
        keeper.touched = set()
        keeper.verdict_touched = set()

    def merge_message(self) -> None:
        """The message succeeded: its touched addresses join the block's."""
        saved = self._saved
        assert saved is not None
        keeper = self.keeper
        touched, verdict_touched = saved[1], saved[2]
        if keeper.touched:
            touched |= keeper.touched
        if keeper.verdict_touched:
            verdict_touched |= keeper.verdict_touched
        keeper.touched, keeper.verdict_touched = touched, verdict_touched
        self._saved = None

    def discard_message(self) -> bool:
        """The message was rejected: take back its events, touched addresses and decoded
        participants (its writes are the buffer's to take back). False if it reached the
        policy, whose in-memory state cannot be taken back: the block must be built again."""
        saved = self._saved
        assert saved is not None
        keeper = self.keeper
        del keeper.events[saved[0] :]
        keeper.touched, keeper.verdict_touched = saved[1], saved[2]
        keeper.discard_cached()
        self._saved = None
        return self.policy_calls == saved[3]

    def get_sprt_constants(self) -> SprtConstants:
        """The SPRT's logarithms for this block's params (params change only between blocks)."""
        if self._sprt is None:
            self._sprt = compute_sprt_constants(self.keeper.get_params().sprt_params)
        return self._sprt
