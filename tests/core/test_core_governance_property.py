"""Governance can never stall the chain: random sequences of valid and invalid MsgUpdateParams
(bad values, unknown policies including the simulator's ``oracle``, wrong signers, params that
validate but then fail to load when due), with inference traffic in between. After each update
the next block commits, and the params in force are valid and loadable."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import keepersim.module.abci as abci
from keepersim.chain import Chain
from keepersim.keeper.policies import HealthPolicy
from keepersim.module.params_load import get_loaded_policy
from keepersim.types.events import ParamsRejected
from keepersim.types.messages import GenesisState, MLNodeInfo, Params, Participant
from keepersim.types.params import GOV_AUTHORITY, POLICY_NAMES, compute_decimal, get_default_params
from keepersim.types.pb.inference.inference.tx_pb2 import (
    MsgFinishInference,
    MsgStartInference,
    MsgUpdateParams,
)

UNLOADABLE = 4242  # expiration_blocks that the patched begin-block loader refuses
ADDRESSES = [f"p{i}" for i in range(4)]

Mutation = Callable[[Params], None]


def setter(path: str, value: Any) -> Mutation:
    *parents, name = path.split(".")

    def mutate(params: Any) -> None:
        for part in parents:
            params = getattr(params, part)
        if hasattr(getattr(params, name), "CopyFrom"):
            getattr(params, name).CopyFrom(value)
        else:
            setattr(params, name, value)

    return mutate


@dataclass(frozen=True)
class Update:
    kind: str  # "valid", "invalid", "policy", "signer", "unloadable"
    params: Params
    authority: str


VALID_CHANGES: list[st.SearchStrategy[Mutation]] = [
    st.integers(1, 60).map(lambda v: setter("expiration_blocks", v)),
    st.integers(1, 100).map(lambda v: setter("circuit_breaker_params.miss_threshold_pct", v)),
    st.integers(1, 20).map(lambda v: setter("circuit_breaker_params.min_samples", v)),
    st.integers(1, 10).map(lambda v: setter("health_params.consecutive.failure_threshold", v)),
    st.integers(4, 64).map(lambda v: setter("health_params.windowed.window", v)),
    st.integers(1, 32).map(lambda v: setter("health_params.trin_multiplicative.history", v)),
    st.booleans().map(lambda v: setter("health_params.shadow", v)),
    st.booleans().map(lambda v: setter("sprt_params.enabled", v)),
]
INVALID_CHANGES: list[Mutation] = [
    setter("expiration_blocks", 0),
    setter("circuit_breaker_params.miss_threshold_pct", 0),
    setter("circuit_breaker_params.miss_threshold_pct", 101),
    setter("epoch_params.epoch_length", 0),
    setter("sprt_params.p0", compute_decimal("0.5")),  # p0 >= p1
    setter("health_params.windowed.window", 3),
    setter("health_params.trin_additive.initial_score", 0),
]
BAD_POLICIES = ["oracle", "bogus", "", "Gonka", "none "]
BAD_SIGNERS = ["", "gonka1someoneelse", "cosmos10d07y265gmmuvt4z0w9aw880jnsr700j6zn9kn"]


@st.composite
def updates(draw: st.DrawFn) -> Update:
    params = get_default_params()
    for f in ("poc_stage_duration", "poc_validation_delay", "poc_validation_duration"):
        setattr(params.epoch_params, f, 0)
    params.epoch_params.set_new_validators_delay = 0
    params.health_params.policy = draw(st.sampled_from(POLICY_NAMES))
    for change in draw(st.lists(st.one_of(VALID_CHANGES), max_size=3)):
        change(params)
    if params.health_params.windowed.min_samples > params.health_params.windowed.window:
        params.health_params.windowed.min_samples = params.health_params.windowed.window
    kind = draw(st.sampled_from(["valid", "valid", "invalid", "policy", "signer", "unloadable"]))
    authority = GOV_AUTHORITY
    if kind == "invalid":
        draw(st.sampled_from(INVALID_CHANGES))(params)
    elif kind == "policy":
        params.health_params.policy = draw(st.sampled_from(BAD_POLICIES))
    elif kind == "signer":
        authority = draw(st.sampled_from(BAD_SIGNERS))
    elif kind == "unloadable":
        params.expiration_blocks = UNLOADABLE
    return Update(kind, params, authority)


def open_chain(policy: str) -> Chain:
    params = get_default_params()
    params.health_params.policy = policy
    params.epoch_params.epoch_length = 6  # epoch boundaries inside short sequences
    for f in ("poc_stage_duration", "poc_validation_delay", "poc_validation_duration"):
        setattr(params.epoch_params, f, 0)
    params.epoch_params.set_new_validators_delay = 0
    node = MLNodeInfo(node_id="n", timeslot_allocation=[True, True])
    participants = [
        Participant(address=a, weight=1000, models=["m"], ml_nodes=[node]) for a in ADDRESSES
    ]
    genesis = GenesisState(params=params, chain_id="gov-property", participants=participants)
    return Chain.open(memory=True, genesis=genesis)


class Traffic:
    """A few starts per block on chosen executors, and finishes of some earlier ones."""

    def __init__(self) -> None:
        self.n = 0
        self.open: list[tuple[str, str]] = []

    def get_block(self, chain: Chain, draw: Callable[[st.SearchStrategy[Any]], Any]) -> list[Any]:
        msgs: list[Any] = []
        for inference_id, address in self.open:
            if draw(st.booleans()):
                msgs.append(MsgFinishInference(inference_id=inference_id, executed_by=address))
        self.open = []
        for _ in range(draw(st.integers(0, 3))):
            self.n += 1
            inference_id = f"i{self.n}"
            try:
                address = chain.get_random_executor("m", inference_id).address
            except Exception:  # noqa: BLE001 - a gate that keeps everyone out: pick anyone
                address = draw(st.sampled_from(ADDRESSES))
            msgs.append(
                MsgStartInference(inference_id=inference_id, assigned_to=address, model="m")
            )
            self.open.append((inference_id, address))
        return msgs


def check_params_in_force(chain: Chain) -> Params:
    params = chain.get_params()
    get_loaded_policy(params)  # valid and loadable
    return params


@pytest.fixture(scope="module")
def unloadable_loader() -> Any:
    """Begin block's loader refuses params with expiration_blocks UNLOADABLE (the handler's
    check passes them): params that validate but fail to load when due."""
    real = abci.get_loaded_policy

    def loader(params: Params) -> HealthPolicy:
        if params.expiration_blocks == UNLOADABLE:
            raise RuntimeError("cannot build the policy")
        return real(params)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(abci, "get_loaded_policy", loader)
        yield


@settings(max_examples=1000, derandomize=True, deadline=None)
@given(
    policy=st.sampled_from(POLICY_NAMES),
    sequence=st.lists(updates(), min_size=1, max_size=4),
    data=st.data(),
)
def test_no_update_sequence_stalls_the_chain(
    unloadable_loader: Any, policy: str, sequence: list[Update], data: st.DataObject
) -> None:
    traffic = Traffic()
    with open_chain(policy) as chain:
        for update in sequence:
            before = check_params_in_force(chain)
            msgs = traffic.get_block(chain, data.draw)
            msgs.insert(
                data.draw(st.integers(0, len(msgs))),
                MsgUpdateParams(authority=update.authority, params=update.params),
            )
            height = chain.height
            sent = chain.deliver_block(msgs)
            accepted = next(r for r in sent.tx_results if r.kind == "MsgUpdateParams").ok
            assert accepted == (update.kind in ("valid", "unloadable")), sent.get_failed()
            due = chain.deliver_block(traffic.get_block(chain, data.draw))  # never raises
            assert chain.height == height + 2 == due.height
            in_force = check_params_in_force(chain)
            rejected = [e for e in due.events if isinstance(e, ParamsRejected)]
            if update.kind == "valid":
                assert in_force == update.params and not rejected
            else:
                assert in_force == before
                assert len(rejected) == (update.kind == "unloadable")
            with chain.read() as k:
                assert k.get_pending_params() is None
        chain.deliver_block([])  # and the chain goes on
        assert chain.verify_app_hash()
