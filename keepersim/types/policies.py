"""The one registry of health policies: every name a run can use, whether governance can select
it, and whether it is a baseline. Each fact is declared here once; the rest derive from it.

- Params validation (keepersim.types.params) accepts exactly the chain policies
  (:data:`POLICY_NAMES`).
- Their classes are ``keepersim.keeper.policies.BUILTIN_POLICIES``, checked at import to be
  exactly these names. Each class declares its own store prefix, beside the rule whose state it
  keys. types/ is the lowest layer and imports no class.
- Runs (:data:`RUN_POLICIES`) add the harness policies. ``oracle`` is a baseline that knows each
  node's true miss probability (keepersim.sim.oracle). ``devshard-limiter`` is the gateway's
  limiter on the devshard path (keepersim.sim.devshard_path). The chain runs ``none`` for both,
  and governance can never select them.
- Reports and comparisons read :func:`is_baseline`. A baseline is a reference, not a policy
  under test: ``none`` admits everyone, ``oracle`` admits exactly the truly healthy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    """One policy of the registry."""

    name: str
    #: governance can select it (``extension_params.health_params.policy``); else a harness hook
    on_chain: bool
    #: a reference run that comparisons measure the others against
    baseline: bool = False


NO_POLICY: Final = "none"
ORACLE: Final = "oracle"
DEVSHARD_LIMITER: Final = "devshard-limiter"

#: Chain policies first, in the order params validation names them.
POLICIES: Final[tuple[PolicyInfo, ...]] = (
    PolicyInfo("gonka", on_chain=True),
    PolicyInfo("consecutive", on_chain=True),
    PolicyInfo("trin-additive", on_chain=True),
    PolicyInfo("trin-multiplicative", on_chain=True),
    PolicyInfo("sprt", on_chain=True),
    PolicyInfo(NO_POLICY, on_chain=True, baseline=True),
    PolicyInfo("windowed", on_chain=True),
    PolicyInfo(ORACLE, on_chain=False, baseline=True),
    PolicyInfo(DEVSHARD_LIMITER, on_chain=False),
)
POLICY_INFO: Final[Mapping[str, PolicyInfo]] = MappingProxyType({p.name: p for p in POLICIES})
#: What governance can select (and the chain can load).
POLICY_NAMES: Final = tuple(p.name for p in POLICIES if p.on_chain)
#: What a run can use, sorted.
RUN_POLICIES: Final = tuple(sorted(POLICY_INFO))
#: The baselines, ``none`` first.
BASELINES: Final = tuple(p.name for p in POLICIES if p.baseline)


def is_baseline(name: str) -> bool:
    """Whether ``name`` is a baseline (a reference, not a policy under test)."""
    info = POLICY_INFO.get(name)
    return info is not None and info.baseline


def get_unknown_policy_problem(names: Iterable[str], *, on_chain: bool = False) -> str:
    """``"unknown policy 'x'; known: ..."`` for the first of ``names`` that is not a run's policy
    (``on_chain``: not a chain policy); ``""`` when every name is known. The caller prefixes it
    with where the name came from and raises its own error."""
    known = POLICY_NAMES if on_chain else RUN_POLICIES
    for name in names:
        if name not in known:
            return f"unknown policy {name!r}; known: {', '.join(known)}"
    return ""


def get_shared_prefixes(prefixes: Mapping[str, bytes]) -> dict[bytes, list[str]]:
    """Non-empty prefixes owned by more than one policy, with their owners (sorted)."""
    owners: dict[bytes, list[str]] = {}
    for name, prefix in prefixes.items():
        if prefix:
            owners.setdefault(prefix, []).append(name)
    return {p: sorted(names) for p, names in owners.items() if len(names) > 1}
