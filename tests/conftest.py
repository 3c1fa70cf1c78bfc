"""Fixtures shared by every test folder: a genesis builder and chains on real LevelDB in tmp_path.

Kept small and generic on purpose; folder-specific helpers live in the folder's own conftest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from keepersim.chain import Chain
from keepersim.module.genesis import compute_genesis
from keepersim.store.cache import StateCache
from keepersim.types.messages import MLNodeInfo, Participant
from keepersim.types.params import get_default_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes

# Every object the state cache hands from one block to the next must encode to its bytes.
StateCache.verify_objects = True

TEST_CHAIN_ID = "keepersim-test"
TEST_MODEL = "m"
#: The PoC stages that may be 0 on the chain (stage and validation durations must be positive).
POC_ZERO_FIELDS = ("poc_exchange_duration", "poc_validation_delay", "set_new_validators_delay")

#: A genesis participant: the chain's Participant and the models and ML nodes it registered.
TestParticipant = tuple[Participant, ParticipantNodes]


def make_participant(
    address: str,
    weight: int = 1000,
    models: Sequence[str] = (TEST_MODEL,),
    timeslots: Sequence[bool] | None = (True, True),
) -> TestParticipant:
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
    return (
        Participant(address=address, weight=weight),
        ParticipantNodes(address=address, models=list(models), ml_nodes=nodes),
    )


def make_test_params(*, poc: bool = False) -> ModuleParams:
    """The code defaults; unless ``poc``, the shortest PoC the chain accepts (1 + 1 blocks)."""
    params = get_default_params()
    if not poc:
        epoch = params.params.epoch_params
        epoch.poc_stage_duration = 1
        epoch.poc_validation_duration = 1
        for name in POC_ZERO_FIELDS:
            setattr(epoch, name, 0)
    return params


def make_genesis(
    n: int = 4,
    *,
    params: ModuleParams | None = None,
    weight: int = 1000,
    participants: Sequence[TestParticipant] | None = None,
    height: int = 0,
    chain_id: str = TEST_CHAIN_ID,
) -> Genesis:
    """A Genesis with ``n`` participants p0..p{n-1} (or the given ones)."""
    if participants is None:
        participants = [make_participant(f"p{i}", weight) for i in range(n)]
    params = params if params is not None else make_test_params()
    return compute_genesis(chain_id, params, participants, height)


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
