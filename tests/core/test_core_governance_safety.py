"""Governance safety: one policy registry for validation and loading, the authority derived from
the x/gov module, params that cannot load never applied, a harness policy that is not a param."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

import keepersim.module.abci as abci
from keepersim.chain import Chain
from keepersim.keeper.policies import (
    BUILTIN_POLICIES,
    GonkaBreaker,
    HealthPolicy,
    NoPolicy,
    get_registry_problems,
)
from keepersim.module.params_load import get_loaded_policy
from keepersim.types.bech32 import compute_bech32, compute_module_address
from keepersim.types.errors import (
    BlockError,
    GenesisError,
    InvalidParamsError,
    UnauthorizedError,
)
from keepersim.types.events import ParamsRejected, ParamsUpdated
from keepersim.types.messages import MLNodeInfo, MsgStartInference, MsgUpdateParams, Participant
from keepersim.types.params import GOV_AUTHORITY, POLICY_NAMES, get_default_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams, ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgUpdateExtensionParams
from keepersim.types.policies import BASELINES, RUN_POLICIES, get_shared_prefixes


def test_gov_module_address_as_cosmos_derives_it() -> None:
    assert (
        compute_module_address("gov", "cosmos") == "cosmos10d07y265gmmuvt4z0w9aw880jnsr700j6zn9kn"
    )
    assert compute_module_address("gov", "gonka") == "gonka10d07y265gmmuvt4z0w9aw880jnsr700j2h5m33"
    assert compute_module_address("gov", "gonka") == GOV_AUTHORITY


def test_bech32_bip173_vectors() -> None:
    assert compute_bech32("a", b"") == "a12uel5l"
    # BIP-173's P2WPKH example: witness version 0 (a 5-bit group of its own) + the 20-byte hash.
    program = bytes.fromhex("751e76e8199196d454941c45d1b3a323f1433bd6")
    from keepersim.types.bech32 import CHARSET, compute_5bit_groups

    data = [0, *compute_5bit_groups(program)]
    assert "".join(CHARSET[v] for v in data) == "qw508d6qejxtdg4y5r3zarvary0c5xw7k"
    with pytest.raises(ValueError, match="lower-case"):
        compute_bech32("Gonka", b"\x00")


def test_registry_is_what_validation_and_loading_use() -> None:
    assert get_registry_problems(BUILTIN_POLICIES) == []
    assert set(POLICY_NAMES) == set(BUILTIN_POLICIES) < set(RUN_POLICIES)
    assert "oracle" not in POLICY_NAMES and "oracle" in RUN_POLICIES
    assert BASELINES == ("none", "oracle")
    assert get_shared_prefixes({n: c.prefix for n, c in BUILTIN_POLICIES.items()}) == {}
    for name in POLICY_NAMES:
        params = get_default_params()
        params.extension_params.health_params.policy = name
        assert get_loaded_policy(params).name == name


def test_registry_check_finds_each_kind_of_disagreement() -> None:
    class Twin(GonkaBreaker):
        name: ClassVar[str] = "twin"

    class Misnamed(NoPolicy):
        name: ClassVar[str] = "other"

    problems = get_registry_problems({**BUILTIN_POLICIES, "twin": Twin})
    assert any("not the chain's policies" in p for p in problems)
    assert any("prefix b'\\x01' is owned by gonka, twin" in p for p in problems)
    problems = get_registry_problems({**BUILTIN_POLICIES, "none": Misnamed})
    assert problems == ["Misnamed is registered as 'none' but names itself 'other'"]
    missing = dict(BUILTIN_POLICIES)
    del missing["sprt"]
    assert get_registry_problems(missing) != []
    assert get_shared_prefixes({"a": b"", "b": b""}) == {}  # an empty prefix is no one's


@pytest.mark.parametrize("name", ["oracle", "bogus", ""])
def test_unknown_policy_is_refused_by_validation(name: str) -> None:
    params = get_default_params()
    params.extension_params.health_params.policy = name
    with pytest.raises(InvalidParamsError, match="extension_params.health_params.policy"):
        get_loaded_policy(params)


def make_bare_genesis(params: ModuleParams | None = None) -> Genesis:
    params = params if params is not None else get_default_params()
    genesis = Genesis(chain_id="gov")
    genesis.inference.params.CopyFrom(params.params)
    genesis.keepersim.extension_params.CopyFrom(params.extension_params)
    return genesis


def make_chain(**kw: Any) -> Chain:
    node = MLNodeInfo(node_id="n", timeslot_allocation=[True, True])
    genesis = make_bare_genesis()
    for i in range(4):
        genesis.inference.participant_list.append(Participant(address=f"p{i}", weight=1000))
        genesis.keepersim.participant_nodes.append(
            ParticipantNodes(address=f"p{i}", models=["m"], ml_nodes=[node])
        )
    return Chain.open(memory=True, genesis=genesis, **kw)


def test_update_from_another_signer_is_unauthorized() -> None:
    with make_chain() as chain:
        before = chain.get_params()
        params = chain.get_params()
        params.params.validation_params.expiration_blocks = 9
        params.extension_params.cb_min_samples = 9
        for signer in ("", "gonka1someoneelse", compute_module_address("gov", "cosmos")):
            result = chain.deliver_block(
                [
                    MsgUpdateParams(authority=signer, params=params.params),
                    MsgUpdateExtensionParams(
                        authority=signer, extension_params=params.extension_params
                    ),
                ]
            )
            for r in result.tx_results:
                assert r.error.startswith("UnauthorizedError: ") and GOV_AUTHORITY in r.error
        with pytest.raises(BlockError) as exc_info:
            chain.deliver_block([MsgUpdateParams(authority="x", params=params.params)], strict=True)
        assert isinstance(exc_info.value.__cause__, UnauthorizedError)
        assert chain.get_params() == before


@pytest.mark.parametrize("case", ["chain", "extension", "pair"])
def test_params_that_fail_to_load_when_due_are_dropped(
    monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """Accepted by the handler, then unloadable at begin block: the old params stay, the pending
    entries (the chain's and the extension's) are dropped together, ParamsRejected says why, and
    the block commits."""
    real = abci.get_loaded_policy

    def loader(params: ModuleParams) -> HealthPolicy:
        if params.params.validation_params.expiration_blocks == 4242 or (
            params.extension_params.health_params.windowed.jitter_pct == 42
        ):
            raise RuntimeError("the policy cannot be built")
        return real(params)

    monkeypatch.setattr(abci, "get_loaded_policy", loader)
    with make_chain() as chain:
        before = chain.get_params()
        params = chain.get_params()
        msgs: list[Any] = []
        if case != "extension":  # unloadable alone, or the good half of an unloadable pair
            params.params.validation_params.expiration_blocks = 4242 if case == "chain" else 5
            msgs.append(MsgUpdateParams(authority=GOV_AUTHORITY, params=params.params))
        if case != "chain":
            params.extension_params.health_params.windowed.jitter_pct = 42
            msgs.append(
                MsgUpdateExtensionParams(
                    authority=GOV_AUTHORITY, extension_params=params.extension_params
                )
            )
        r1 = chain.deliver_block(msgs)
        assert not r1.get_failed() and ParamsUpdated(1, 2, GOV_AUTHORITY) in r1.events
        start = MsgStartInference(inference_id="a", assigned_to="p0", model="m")
        r2 = chain.deliver_block([start])
        assert not r2.get_failed()
        assert ParamsRejected(2, "RuntimeError: the policy cannot be built") in r2.events
        assert chain.height == 2 and chain.get_params() == before
        with chain.read() as k:
            assert k.get_pending_params() is None
            assert k.get_pending_extension_params() is None
            assert list(k.iterate_timeouts()) == [(2 + 20, "a")]  # the old expiry applied
        assert chain.verify_app_hash()
        r3 = chain.deliver_block([])
        assert r3.events == ()


class Harness(HealthPolicy):
    """A harness policy: admits nobody but p0."""

    name: ClassVar[str] = "harness"
    prefix: ClassVar[bytes] = b"\x7e"

    def get_health(self, reader: Any, address: str, height: int) -> Any:
        from keepersim.keeper.policies import ADMITTED, Health

        return ADMITTED if address == "p0" else Health(False, state="out")

    def is_fallback_allowed(self, params: ExtensionParams) -> bool:
        return False


def test_policy_override_runs_instead_of_the_params_policy() -> None:
    with make_chain(policy_override=Harness) as chain:
        chain.deliver_block([])
        assert chain.get_params().extension_params.health_params.policy == "gonka"
        assert chain.get_policy_name() == "harness"
        assert chain.get_policy_state("p1")["policy"] == "harness"
        table = chain.get_selection_table("m")
        assert table.addresses == ("p0",) and table.excluded == ("p1", "p2", "p3")
        # Governance can still change the params' policy; the harness stays in force.
        ext = chain.get_params().extension_params
        ext.health_params.policy = "windowed"
        chain.deliver_block(
            [MsgUpdateExtensionParams(authority=GOV_AUTHORITY, extension_params=ext)]
        )
        chain.deliver_block([])
        assert chain.get_params().extension_params.health_params.policy == "windowed"
        assert chain.get_policy_name() == "harness"
    with make_chain() as chain:
        assert chain.get_policy_name() == "gonka"


@pytest.mark.parametrize(
    ("factory", "message"),
    [(GonkaBreaker, "cannot be the chain policy 'gonka'"), (NoPolicy, "cannot be the chain")],
)
def test_override_cannot_be_or_share_a_chain_policy(factory: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_chain(policy_override=factory)

    class Clash(HealthPolicy):
        name: ClassVar[str] = "clash"
        prefix: ClassVar[bytes] = factory.prefix

    with pytest.raises(ValueError, match="prefix .* is "):
        make_chain(policy_override=Clash)


@pytest.mark.parametrize("field", ["extension_params", "pending_extension_params"])
def test_genesis_params_must_load(field: str) -> None:
    genesis = make_bare_genesis()
    ext = getattr(genesis.keepersim, field)
    ext.CopyFrom(get_default_params().extension_params)
    ext.health_params.policy = "oracle"
    where = "genesis params" if field == "extension_params" else "genesis pending params"
    with pytest.raises(
        GenesisError, match=f"{where}: .*extension_params.health_params.policy='oracle'"
    ):
        Chain.open(memory=True, genesis=genesis)


@pytest.mark.parametrize("field", ["params", "pending_params"])
def test_genesis_chain_params_must_load(field: str) -> None:
    genesis = make_bare_genesis()
    if field == "params":
        chain = genesis.inference.params
    else:
        chain = genesis.keepersim.pending_params
        chain.CopyFrom(get_default_params().params)
    chain.validation_params.expiration_blocks = 0
    where = "genesis params" if field == "params" else "genesis pending params"
    with pytest.raises(
        GenesisError, match=f"{where}: .*params.validation_params.expiration_blocks=0"
    ):
        Chain.open(memory=True, genesis=genesis)


def test_genesis_without_extension_params_runs_keepersims_defaults() -> None:
    genesis = make_bare_genesis()
    genesis.keepersim.ClearField("extension_params")
    with Chain.open(memory=True, genesis=genesis) as chain:
        assert chain.get_params() == get_default_params()
