"""Fixtures shared by every test folder: a genesis builder and chains on real LevelDB in tmp_path.

Kept small and generic on purpose; folder-specific helpers live in the folder's own conftest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from keepersim.chain import Chain
from keepersim.store.cache import StateCache
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis

# Every object the state cache hands from one block to the next must encode to its bytes.
StateCache.verify_objects = True

# The builders live in a module of their own (tests/ is on pythonpath), so a test module can
# import them by name: "from conftest import" finds whichever conftest came first.
from chain_builders import (  # noqa: E402
    TestParticipant,
    make_genesis,
    make_participant,
    make_test_params,
)

ChainFactory = Callable[..., Chain]


@pytest.fixture
def make_chain(tmp_path: Path) -> Iterator[ChainFactory]:
    """Factory: ``make_chain(genesis, memory=False)`` opens a chain in a fresh tmp folder."""
    opened: list[Chain] = []

    def make(genesis: Genesis | None = None, *, memory: bool = False, **kw: Any) -> Chain:
        if memory:
            chain = Chain.open(memory=True, genesis=genesis, **kw)
        else:
            chain = Chain.open(tmp_path / f"db{len(opened)}", genesis=genesis, **kw)
        opened.append(chain)
        return chain

    yield make
    for chain in opened:
        chain.close()


@pytest.fixture(name="make_participant")
def make_participant_fixture() -> Callable[..., TestParticipant]:
    """Factory: ``make_participant(address, weight=1000, models=("m",), timeslots=(True, True))``."""
    return make_participant


@pytest.fixture(name="make_test_params")
def make_test_params_fixture() -> Callable[..., ModuleParams]:
    """Factory: ``make_test_params(poc=False)``: code defaults, the shortest PoC unless ``poc``."""
    return make_test_params


@pytest.fixture(name="make_genesis")
def make_genesis_fixture() -> Callable[..., Genesis]:
    """Factory: ``make_genesis(n=4, params=None, weight=1000, participants=None, height=0)``."""
    return make_genesis


@pytest.fixture
def genesis() -> Genesis:
    """Four participants of weight 1000 listing model "m", code-default params, no PoC stages."""
    return make_genesis()


@pytest.fixture
def chain(make_chain: ChainFactory, genesis: Genesis) -> Chain:
    return make_chain(genesis)
