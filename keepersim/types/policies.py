"""The health policies the chain can run, by name, with the store prefix each one owns.

One list for both params validation (keepersim.types.params) and policy loading
(keepersim.keeper.policies, which checks at import that its classes are exactly these, with these
prefixes), so governance can only select a policy the chain can load. A simulator-only policy
(the oracle baseline) is not a chain policy: a harness runs it through
``Chain.open(policy_override=...)``, never through params.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

# name -> the prefix byte of its state under keys.POLICY_STATE / POLICY_QUEUE / POLICY_ITEMS /
# POLICY_LOG. Each prefix is the policy's own (none and sprt keep no state but own one too).
CHAIN_POLICIES: Final[Mapping[str, bytes]] = MappingProxyType(
    {
        "gonka": b"\x01",
        "consecutive": b"\x02",
        "trin-additive": b"\x03",
        "trin-multiplicative": b"\x04",
        "sprt": b"\x06",
        "none": b"\x00",
        "windowed": b"\x05",
    }
)
POLICY_NAMES: Final = tuple(CHAIN_POLICIES)


def get_shared_prefixes(prefixes: Mapping[str, bytes]) -> dict[bytes, list[str]]:
    """Non-empty prefixes owned by more than one policy, with their owners (sorted)."""
    owners: dict[bytes, list[str]] = {}
    for name, prefix in prefixes.items():
        if prefix:
            owners.setdefault(prefix, []).append(name)
    return {p: sorted(names) for p, names in owners.items() if len(names) > 1}
