"""The state a block's handlers share: the keeper over the block buffer, the active policy, the height."""

from __future__ import annotations

from keepersim.keeper.keeper import Keeper
from keepersim.keeper.policies.base import HealthPolicy, PolicyContext
from keepersim.keeper.sprt import SprtConstants, compute_sprt_constants


class BlockContext:
    __slots__ = ("keeper", "policy", "height", "policy_ctx", "_sprt")

    def __init__(self, keeper: Keeper, policy: HealthPolicy, height: int) -> None:
        self.keeper = keeper
        self.policy = policy
        self.height = height
        self.policy_ctx = PolicyContext(keeper, policy, height)
        self._sprt: SprtConstants | None = None

    def get_sprt_constants(self) -> SprtConstants:
        """The SPRT's logarithms for this block's params (params change only between blocks)."""
        if self._sprt is None:
            self._sprt = compute_sprt_constants(self.keeper.get_params().sprt_params)
        return self._sprt
