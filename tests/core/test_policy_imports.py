"""Rules apart from their speed-ups, read from the source with ``ast``: no policy file imports
the keeper, and a policy's rules reach the acceleration layer (keepersim.keeper.acceleration)
only through their own index, ``<policy>_index.py``."""

from __future__ import annotations

from test_core_layers import PACKAGE, iter_imports

POLICIES = PACKAGE / "keeper" / "policies"
KEEPER = "keepersim.keeper.keeper"
ACCELERATION = "keepersim.keeper.acceleration"
PREFIX = "keepersim.keeper.policies."
#: The upstream-shaped keeper APIs (``<policy>_api.py``) are adapters, not rules: they open a
#: chain-side store of their own (acceleration.policy_store.ChainPolicyStore) to run alone.
ADAPTER_SUFFIX = "_api"


def is_in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def find_violations(sources: dict[str, str]) -> list[str]:
    """``name:line: reason`` for every import that breaks the rules above; ``sources`` maps a
    file stem of keepersim/keeper/policies to its source."""
    out = []
    for stem, source in sorted(sources.items()):
        module = PREFIX + stem
        for line, target, names in iter_imports(module, source):
            targets = [target, *(f"{target}.{name}" for name in names)]
            where = f"{stem}:{line}"
            if any(is_in(t, KEEPER) for t in targets):
                out.append(f"{where}: imports the keeper ({target})")
            if stem.endswith(("_index", ADAPTER_SUFFIX)):
                continue
            if any(is_in(t, ACCELERATION) for t in targets):
                out.append(f"{where}: imports the acceleration layer ({target})")
            for t in targets:
                if t.startswith(PREFIX) and t.endswith("_index") and t != f"{module}_index":
                    out.append(f"{where}: imports another policy's index ({t})")
    return out


def test_no_policy_imports_the_keeper_or_the_acceleration_layer() -> None:
    sources = {p.stem: p.read_text(encoding="utf-8") for p in sorted(POLICIES.glob("*.py"))}
    assert {
        "base",
        "gonka",
        "gonka_index",
        "trin_additive_index",
        "windowed",
        "windowed_index",
        "trin_multiplicative_index",
    } <= set(sources)
    assert find_violations(sources) == []


def test_the_check_finds_each_kind_of_violation() -> None:
    made_up = {
        "a": "from keepersim.keeper.keeper import Keeper\n",
        "b": "from keepersim.keeper.acceleration.policy_store import hand_verdict\n",
        "c": "from keepersim.keeper import acceleration\n",
        "d": "from keepersim.keeper.policies.a_index import x\n",
        "d_index": "from keepersim.keeper.acceleration import policy_store\n",
        "e": "from keepersim.keeper.policies.e_index import x\n",
        "f_api": "import keepersim.keeper.keeper\n",
    }
    assert find_violations(made_up) == [
        "a:1: imports the keeper (keepersim.keeper.keeper)",
        "b:1: imports the acceleration layer (keepersim.keeper.acceleration.policy_store)",
        "c:1: imports the acceleration layer (keepersim.keeper)",
        "d:1: imports another policy's index (keepersim.keeper.policies.a_index)",
        "f_api:1: imports the keeper (keepersim.keeper.keeper)",
    ]
