"""Policy tests: the helpers module (``policy_helpers``) is importable from the tests here."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from keepersim.chain import Chain
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams

sys.path.insert(0, str(Path(__file__).resolve().parent))
# policy_helpers builds on the shared builders of tests/conftest.py (as ``tests.conftest``).
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

from policy_helpers import Net, NetFactory, make_policy_genesis  # noqa: E402


@pytest.fixture
def make_net(tmp_path: Path) -> Iterator[NetFactory]:
    """Net factory on LevelDB chains in tmp_path (``memory=True`` for an in-memory chain)."""
    chains: list[Chain] = []

    def make(params: ModuleParams, weights: dict[str, int], *, memory: bool = False) -> Net:
        genesis = make_policy_genesis(params, weights)
        if memory:
            chain = Chain.open(memory=True, genesis=genesis)
        else:
            chain = Chain.open(tmp_path / f"chain{len(chains)}", genesis=genesis)
        chains.append(chain)
        return Net(chain)

    yield make
    for chain in chains:
        chain.close()
