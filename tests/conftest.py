"""Fixtures shared by every test folder: a genesis builder and chains on real LevelDB in tmp_path.

Kept small and generic on purpose; folder-specific helpers live in the folder's own conftest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from keepersim.chain import Chain
from keepersim.types.params import get_default_params
from keepersim.types.pb.inference.inference.genesis_pb2 import GenesisState
from keepersim.types.pb.inference.inference.params_pb2 import Params
from keepersim.types.pb.inference.inference.types_pb2 import MLNodeInfo, Participant

TEST_CHAIN_ID = "keepersim-test"
TEST_MODEL = "m"
POC_FIELDS = (
    "poc_stage_duration",
    "poc_validation_delay",
    "poc_validation_duration",
    "set_new_validators_delay",
)


def make_participant(
    address: str,
    weight: int = 1000,
    models: Sequence[str] = (TEST_MODEL,),
    timeslots: Sequence[bool] | None = (True, True),
) -> Participant:
    """A participant listing ``models`` with one ML node (none if ``timeslots`` is None)."""
    nodes = (
        []
        if timeslots is None
        else [
            MLNodeInfo(
                node_id=f"{address}-node", poc_weight=weight, timeslot_allocation=list(timeslots)
            )
        ]
    )
    return Participant(address=address, weight=weight, models=list(models), ml_nodes=nodes)


def make_test_params(*, poc: bool = False) -> Params:
    """The code defaults; PoC stages of zero length unless ``poc``."""
    params = get_default_params()
    if not poc:
        for name in POC_FIELDS:
            setattr(params.epoch_params, name, 0)
    return params


def make_genesis(
    n: int = 4,
    *,
    params: Params | None = None,
    weight: int = 1000,
    participants: Sequence[Participant] | None = None,
    height: int = 0,
    chain_id: str = TEST_CHAIN_ID,
) -> GenesisState:
    """A GenesisState with ``n`` participants p0..p{n-1} (or the given ones)."""
    if participants is None:
        participants = [make_participant(f"p{i}", weight) for i in range(n)]
    return GenesisState(
        params=params if params is not None else make_test_params(),
        chain_id=chain_id,
        height=height,
        participants=participants,
    )


ChainFactory = Callable[..., Chain]


@pytest.fixture
def make_chain(tmp_path: Path) -> Iterator[ChainFactory]:
    """Factory: ``make_chain(genesis, memory=False)`` opens a chain in a fresh tmp folder."""
    opened: list[Chain] = []

    def make(genesis: GenesisState | None = None, *, memory: bool = False, **kw: Any) -> Chain:
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
def make_participant_fixture() -> Callable[..., Participant]:
    """Factory: ``make_participant(address, weight=1000, models=("m",), timeslots=(True, True))``."""
    return make_participant


@pytest.fixture(name="make_test_params")
def make_test_params_fixture() -> Callable[..., Params]:
    """Factory: ``make_test_params(poc=False)``: code defaults, PoC stages 0 unless ``poc``."""
    return make_test_params


@pytest.fixture(name="make_genesis")
def make_genesis_fixture() -> Callable[..., GenesisState]:
    """Factory: ``make_genesis(n=4, params=None, weight=1000, participants=None, height=0)``."""
    return make_genesis


@pytest.fixture
def genesis() -> GenesisState:
    """Four participants of weight 1000 listing model "m", code-default params, no PoC stages."""
    return make_genesis()


@pytest.fixture
def chain(make_chain: ChainFactory, genesis: GenesisState) -> Chain:
    return make_chain(genesis)
