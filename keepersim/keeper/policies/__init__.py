"""Health policies, selectable by name through ``Params.health_params.policy``."""

from __future__ import annotations

from collections.abc import Callable

from keepersim.keeper.policies.base import (
    ADMITTED,
    Health,
    HealthPolicy,
    PolicyContext,
    PolicyReader,
)
from keepersim.keeper.policies.consecutive import ConsecutiveBreaker
from keepersim.keeper.policies.gonka import GonkaBreaker
from keepersim.keeper.policies.trin_additive import TrinAdditive
from keepersim.keeper.policies.trin_multiplicative import TrinMultiplicative
from keepersim.keeper.policies.windowed import WindowedBreaker


class NoPolicy(HealthPolicy):
    """No health gate: every candidate is admitted at full weight."""

    name = "none"
    prefix = b"\x00"


class SprtOnlyPolicy(HealthPolicy):
    """The chain's slow deactivation alone: the keeper's SPRT (params.sprt_params) marks
    participants INACTIVE and selection drops them; this policy adds no gate of its own."""

    name = "sprt"
    prefix = b"\x00"


PolicyFactory = Callable[[], HealthPolicy]

BUILTIN_POLICIES: dict[str, PolicyFactory] = {
    "gonka": GonkaBreaker,
    "consecutive": ConsecutiveBreaker,
    "trin-additive": TrinAdditive,
    "trin-multiplicative": TrinMultiplicative,
    "windowed": WindowedBreaker,
    "none": NoPolicy,
    "sprt": SprtOnlyPolicy,
}


def get_policy(name: str, extra: dict[str, PolicyFactory] | None = None) -> HealthPolicy:
    """Instantiate a policy by name; ``extra`` adds run-specific policies (the simulator's oracle)."""
    factories = {**BUILTIN_POLICIES, **(extra or {})}
    if name not in factories:
        raise KeyError(f"unknown health policy {name!r}; known: {sorted(factories)}")
    return factories[name]()


__all__ = [
    "ADMITTED",
    "BUILTIN_POLICIES",
    "ConsecutiveBreaker",
    "GonkaBreaker",
    "Health",
    "HealthPolicy",
    "NoPolicy",
    "PolicyContext",
    "PolicyReader",
    "SprtOnlyPolicy",
    "TrinAdditive",
    "TrinMultiplicative",
    "WindowedBreaker",
    "get_policy",
]
