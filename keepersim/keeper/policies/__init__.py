"""Health policies, selectable by name through ``Params.health_params.policy``.

The classes here are exactly the chain policies of the registry keepersim.types.policies
(checked at import): params validation and loading cannot disagree. Each class declares its
store prefix, and no two share one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from keepersim.keeper.policies.base import (
    ADMITTED,
    ChainView,
    Health,
    HealthPolicy,
    PolicyReader,
    PolicyStore,
)
from keepersim.keeper.policies.consecutive import ConsecutiveBreaker
from keepersim.keeper.policies.gonka import GonkaBreaker
from keepersim.keeper.policies.trin_additive import TrinAdditive
from keepersim.keeper.policies.trin_multiplicative import TrinMultiplicative
from keepersim.keeper.policies.windowed import WindowedBreaker
from keepersim.types.policies import POLICY_NAMES, get_shared_prefixes


class NoPolicy(HealthPolicy):
    """No health gate: every candidate is admitted at full weight."""

    name = "none"
    prefix = b"\x00"


class SprtOnlyPolicy(HealthPolicy):
    """The chain's slow deactivation alone: the keeper's SPRT (the chain's
    ``validation_params.downtime_*``, on when ``extension_params.sprt_enabled``) marks
    participants INACTIVE and selection drops them; this policy adds no gate of its own."""

    name = "sprt"
    prefix = b"\x06"


PolicyFactory = Callable[[], HealthPolicy]

BUILTIN_POLICIES: dict[str, type[HealthPolicy]] = {
    "gonka": GonkaBreaker,
    "consecutive": ConsecutiveBreaker,
    "trin-additive": TrinAdditive,
    "trin-multiplicative": TrinMultiplicative,
    "windowed": WindowedBreaker,
    "none": NoPolicy,
    "sprt": SprtOnlyPolicy,
}


def get_registry_problems(classes: Mapping[str, type[HealthPolicy]]) -> list[str]:
    """How ``classes`` differ from the registry's chain policies (keepersim.types.policies):
    names, each class's own name, prefixes owned twice. Empty: they agree."""
    problems = []
    if set(classes) != set(POLICY_NAMES):
        problems.append(
            f"policy classes {sorted(classes)} are not the chain's policies {sorted(POLICY_NAMES)}"
        )
    for name, cls in classes.items():
        if cls.name != name:
            problems.append(
                f"{cls.__name__} is registered as {name!r} but names itself {cls.name!r}"
            )
    prefixes = {name: cls.prefix for name, cls in classes.items()}
    for prefix, names in get_shared_prefixes(prefixes).items():
        problems.append(f"prefix {prefix!r} is owned by {', '.join(names)}")
    return problems


_PROBLEMS = get_registry_problems(BUILTIN_POLICIES)
if _PROBLEMS:
    raise RuntimeError("health policy registry: " + "; ".join(_PROBLEMS))


def get_policy(name: str) -> HealthPolicy:
    """Instantiate a chain policy by name (KeyError naming the known ones)."""
    cls = BUILTIN_POLICIES.get(name)
    if cls is None:
        raise KeyError(f"unknown health policy {name!r}; known: {sorted(BUILTIN_POLICIES)}")
    return cls()


def get_override(factory: PolicyFactory) -> HealthPolicy:
    """A harness's policy, built: not a chain policy's name, nor any chain policy's prefix (its
    state must never mix with theirs)."""
    policy = factory()
    if policy.name in POLICY_NAMES:
        raise ValueError(f"a policy override cannot be the chain policy {policy.name!r}")
    owner = [name for name, cls in BUILTIN_POLICIES.items() if cls.prefix == policy.prefix]
    if owner:
        raise ValueError(
            f"policy override {policy.name!r}: prefix {policy.prefix!r} is {owner[0]}'s"
        )
    return policy


__all__ = [
    "ADMITTED",
    "BUILTIN_POLICIES",
    "ChainView",
    "ConsecutiveBreaker",
    "GonkaBreaker",
    "Health",
    "HealthPolicy",
    "NoPolicy",
    "PolicyStore",
    "PolicyReader",
    "SprtOnlyPolicy",
    "TrinAdditive",
    "TrinMultiplicative",
    "WindowedBreaker",
    "PolicyFactory",
    "get_override",
    "get_policy",
    "get_registry_problems",
]
