"""Governance can never stall the chain: random sequences of valid and invalid MsgUpdateParams
and MsgUpdateExtensionParams, alone or as a pair in one block (bad values, unknown policies
including the simulator's ``oracle``, wrong signers, params that validate but then fail to load
when due), with inference traffic in between. After each update the next block commits, and the
params in force are valid and loadable."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from google.protobuf.message import Message
from hypothesis import given, settings
from hypothesis import strategies as st

import keepersim.module.abci as abci
from keepersim.chain import Chain
from keepersim.keeper.policies import HealthPolicy
from keepersim.module.params_load import get_loaded_policy
from keepersim.types.chain_decimal import compute_chain_decimal
from keepersim.types.events import ParamsRejected
from keepersim.types.messages import (
    MLNodeInfo,
    MsgFinishInference,
    MsgStartInference,
    MsgUpdateParams,
    Participant,
)
from keepersim.types.params import GOV_AUTHORITY, POLICY_NAMES, get_default_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgUpdateExtensionParams

# Values the patched begin-block loader refuses (the handlers' check passes them): one in each
# half of the params.
UNLOADABLE_EXPIRY = 4242  # params.validation_params.expiration_blocks
UNLOADABLE_JITTER = 42  # extension_params.health_params.windowed.jitter_pct
ADDRESSES = [f"p{i}" for i in range(4)]
CHAIN, EXTENSION = "params", "extension_params"
HALVES = [(CHAIN,), (EXTENSION,), (CHAIN, EXTENSION), (EXTENSION, CHAIN)]

Mutation = Callable[[ModuleParams], None]


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
    params: ModuleParams
    authority: str
    halves: tuple[str, ...]  # which messages the block carries, in order

    def get_messages(self) -> list[Message]:
        return [
            MsgUpdateParams(authority=self.authority, params=self.params.params)
            if half == CHAIN
            else MsgUpdateExtensionParams(
                authority=self.authority, extension_params=self.params.extension_params
            )
            for half in self.halves
        ]


X = "extension_params."
VALID_CHANGES: list[st.SearchStrategy[Mutation]] = [
    st.integers(1, 60).map(lambda v: setter("params.validation_params.expiration_blocks", v)),
    st.integers(0, 100).map(lambda v: setter(X + "cb_miss_threshold_pct", v)),
    st.integers(0, 20).map(lambda v: setter(X + "cb_min_samples", v)),
    st.integers(1, 10).map(lambda v: setter(X + "health_params.consecutive.failure_threshold", v)),
    st.integers(4, 64).map(lambda v: setter(X + "health_params.windowed.window", v)),
    st.integers(1, 32).map(lambda v: setter(X + "health_params.trin_multiplicative.history", v)),
    st.booleans().map(lambda v: setter(X + "health_params.shadow", v)),
    st.booleans().map(lambda v: setter(X + "sprt_enabled", v)),
]
# (the half it is in, the change): each breaks a rule whatever the other half says
INVALID_CHANGES: list[tuple[str, Mutation]] = [
    (CHAIN, setter("params.validation_params.expiration_blocks", 0)),
    (CHAIN, setter("params.validation_params.epochs_to_max", 0)),
    (
        CHAIN,
        setter("params.validation_params.miss_percentage_cutoff", compute_chain_decimal("1.5")),
    ),
    (CHAIN, setter("params.epoch_params.epoch_length", 0)),
    (EXTENSION, setter(X + "cb_miss_threshold_pct", 101)),
    (EXTENSION, setter(X + "cb_max_cooldown_blocks", 10)),  # < the initial 50
    (EXTENSION, setter(X + "health_params.windowed.window", 3)),
    (EXTENSION, setter(X + "health_params.trin_additive.initial_score", 0)),
]
BAD_POLICIES = ["oracle", "bogus", "", "Gonka", "none "]
BAD_SIGNERS = ["", "gonka1someoneelse", "cosmos10d07y265gmmuvt4z0w9aw880jnsr700j6zn9kn"]


def make_short_poc(params: ModuleParams) -> None:
    """The shortest PoC the chain accepts (1 + 1 blocks)."""
    epoch = params.params.epoch_params
    epoch.poc_stage_duration = epoch.poc_validation_duration = 1
    epoch.poc_exchange_duration = epoch.poc_validation_delay = 0
    epoch.set_new_validators_delay = 0


@st.composite
def updates(draw: st.DrawFn) -> Update:
    params = get_default_params()
    make_short_poc(params)
    params.params.epoch_params.epoch_length = 6
    health = params.extension_params.health_params
    health.policy = draw(st.sampled_from(POLICY_NAMES))
    for change in draw(st.lists(st.one_of(VALID_CHANGES), max_size=3)):
        change(params)
    if health.windowed.min_samples > health.windowed.window:
        health.windowed.min_samples = health.windowed.window
    kind = draw(st.sampled_from(["valid", "valid", "invalid", "policy", "signer", "unloadable"]))
    authority = GOV_AUTHORITY
    halves = draw(st.sampled_from(HALVES))
    if kind == "invalid":
        half, change = draw(st.sampled_from(INVALID_CHANGES))
        change(params)
        halves = (half,)
    elif kind == "policy":
        health.policy = draw(st.sampled_from(BAD_POLICIES))
        halves = (EXTENSION,)
    elif kind == "signer":
        authority = draw(st.sampled_from(BAD_SIGNERS))
    elif kind == "unloadable":
        # In one half of what is sent: the pair as a whole cannot load.
        if draw(st.sampled_from(halves)) == CHAIN:
            params.params.validation_params.expiration_blocks = UNLOADABLE_EXPIRY
        else:
            health.windowed.jitter_pct = UNLOADABLE_JITTER
    return Update(kind, params, authority, halves)


def open_chain(policy: str) -> Chain:
    params = get_default_params()
    params.extension_params.health_params.policy = policy
    params.params.epoch_params.epoch_length = 6  # epoch boundaries inside short sequences
    make_short_poc(params)
    node = MLNodeInfo(node_id="n", timeslot_allocation=[True, True])
    genesis = Genesis(chain_id="gov-property")
    genesis.inference.params.CopyFrom(params.params)
    genesis.keepersim.extension_params.CopyFrom(params.extension_params)
    for a in ADDRESSES:
        genesis.inference.participant_list.append(Participant(address=a, weight=1000))
        genesis.keepersim.participant_nodes.append(
            ParticipantNodes(address=a, models=["m"], ml_nodes=[node])
        )
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


def check_params_in_force(chain: Chain) -> ModuleParams:
    params = chain.get_params()
    get_loaded_policy(params)  # valid and loadable
    return params


def get_expected(before: ModuleParams, update: Update) -> ModuleParams:
    """The params in force after ``update``'s block and the next: the halves it sent, if valid."""
    if update.kind != "valid":
        return before
    expected = ModuleParams()
    expected.CopyFrom(before)
    for half in update.halves:
        getattr(expected, half).CopyFrom(getattr(update.params, half))
    return expected


@pytest.fixture(scope="module")
def unloadable_loader() -> Any:
    """Begin block's loader refuses params with an UNLOADABLE_* value (the handlers' check passes
    them): params that validate but fail to load when due."""
    real = abci.get_loaded_policy

    def loader(params: ModuleParams) -> HealthPolicy:
        if (
            params.params.validation_params.expiration_blocks == UNLOADABLE_EXPIRY
            or params.extension_params.health_params.windowed.jitter_pct == UNLOADABLE_JITTER
        ):
            raise RuntimeError("cannot build the policy")
        return real(params)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(abci, "get_loaded_policy", loader)
        yield


GOV_KINDS = ("MsgUpdateParams", "MsgUpdateExtensionParams")


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
            at = data.draw(st.integers(0, len(msgs)))
            msgs[at:at] = update.get_messages()
            height = chain.height
            sent = chain.deliver_block(msgs)
            gov = [r for r in sent.tx_results if r.kind in GOV_KINDS]
            assert [r.kind for r in gov] == [
                "MsgUpdateParams" if h == CHAIN else "MsgUpdateExtensionParams"
                for h in update.halves
            ]
            accepted = update.kind in ("valid", "unloadable")
            assert all(r.ok == accepted for r in gov), sent.get_failed()
            due = chain.deliver_block(traffic.get_block(chain, data.draw))  # never raises
            assert chain.height == height + 2 == due.height
            in_force = check_params_in_force(chain)
            rejected = [e for e in due.events if isinstance(e, ParamsRejected)]
            assert in_force == get_expected(before, update)
            # An unloadable pair is dropped as a whole, with one ParamsRejected.
            assert len(rejected) == (update.kind == "unloadable")
            with chain.read() as k:
                assert k.get_pending_params() is None
                assert k.get_pending_extension_params() is None
        chain.deliver_block([])  # and the chain goes on
        assert chain.verify_app_hash()
