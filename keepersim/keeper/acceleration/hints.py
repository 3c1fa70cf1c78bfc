"""What a block tells the chain's verdict memo (keepersim.chain's _SelectionIndex) at commit.

Speed-up state only: with every set empty and ``verdicts_reset`` true, the chain asks every
verdict afresh and selects the same (tests/policies/test_properties.py compares the memo's
tables with fresh ones at every height).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from keepersim.keeper.policies.base import Health


class BlockHints:
    """One block's hints, kept by the block's keeper."""

    __slots__ = ("touched", "verdict_touched", "verdicts_reset", "verdicts")

    def __init__(self) -> None:
        # Addresses written in this block (participant records or policy state), and those of
        # them whose policy state changed in a way that may alter the health verdict.
        self.touched: set[str] = set()
        self.verdict_touched: set[str] = set()
        # Every verdict may have changed (an input all of them read moved): the chain drops its
        # selection memo after the block, as for new params.
        self.verdicts_reset = False
        # Verdicts the policy computed for this height, handed over so the chain need not ask.
        self.verdicts: dict[str, Health] = {}

    def mark(self, address: str, *, verdict: bool = True) -> None:
        """``address`` was written; ``verdict``: in a way that may move its verdict."""
        self.touched.add(address)
        if verdict:
            self.verdict_touched.add(address)

    def mark_all(self, addresses: list[str]) -> None:
        """Everyone may have moved (new params)."""
        self.touched.update(addresses)
        self.verdict_touched.update(addresses)

    def get_mark(self) -> tuple[int, int]:
        return len(self.touched), len(self.verdict_touched)
