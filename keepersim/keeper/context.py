"""The state a block's handlers share: the keeper over the block buffer, the active policy, the height."""

from __future__ import annotations

from keepersim.keeper.keeper import Keeper
from keepersim.keeper.policies.base import HealthPolicy, PolicyContext


class BlockContext:
    __slots__ = ("keeper", "policy", "height", "policy_ctx")

    def __init__(self, keeper: Keeper, policy: HealthPolicy, height: int) -> None:
        self.keeper = keeper
        self.policy = policy
        self.height = height
        self.policy_ctx = PolicyContext(keeper, policy, height)
