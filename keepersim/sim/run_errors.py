"""Why a scenario run cannot start or failed."""

from __future__ import annotations

from keepersim.types.errors import KeepersimError

__all__ = [
    "GovernanceError",
    "SimulationError",
]


class SimulationError(KeepersimError):
    """The run cannot start (bad policy, store folder in use) or failed."""


class GovernanceError(SimulationError):
    """A scheduled params change is invalid (names the entry and the rule it breaks)."""
