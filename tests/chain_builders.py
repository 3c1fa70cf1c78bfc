"""Builders of genesis states for tests: participants, the tests' params, a Genesis (the
shared fixtures of tests/conftest.py hand these out; a module imports them from here)."""

from __future__ import annotations

from collections.abc import Sequence

from keepersim.module.genesis import compute_genesis
from keepersim.types.messages import MLNodeInfo, Participant
from keepersim.types.params import get_default_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes

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
