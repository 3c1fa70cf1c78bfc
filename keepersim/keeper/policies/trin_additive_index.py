"""trin-additive's speed-ups beside its rules (trin_additive.py), each with its plain form,
proven equal by tests/policies/test_acceleration.py and test_trin.py (the memo forgotten,
compute_reference_health):

* the log's index (ScoreLog: each participant's (height, delta) pairs) is kept in memory between
  blocks and rebuilt from the records after a restart (plain form: rebuilt every block); a
  reader builds it once for a whole table;
* each outcome's verdict is handed to the chain, so its table need not ask.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

# The module, not its names: the policies package imports this while the acceleration layer
# may still be importing the policies' base.
from keepersim.keeper.acceleration import policy_store as acceleration
from keepersim.keeper.policies.base import Health, PolicyReader, PolicyStore

LogT = TypeVar("LogT")


def get_indexed_log(
    holder: PolicyStore | PolicyReader,
    kind: type[LogT],
    build: Callable[[list[tuple[int, bytes]]], LogT],
) -> LogT:
    """The score log's index, from the memo or built from the records."""
    return acceleration.get_log_index(holder, "scores", kind, build)


def hand_verdict(ctx: PolicyStore, address: str, health: Health) -> None:
    """The verdict get_health will give at this height, handed to the chain."""
    acceleration.hand_verdict(ctx, address, health)
