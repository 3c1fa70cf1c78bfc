"""What a scenario run starts from: its params and its genesis.

ModuleParams
    Unless ``params`` is given: the chain's code defaults (:func:`get_default_params`: upstream
    ``DefaultParams()`` and keepersim's extension defaults) with
    ``validation_params.expiration_blocks`` and ``epoch_params.epoch_length`` from the scenario
    and the shortest PoC the chain accepts (stage 1, validation 1, the rest 0 blocks; every
    participant keeps serving during PoC, so it changes no selection).
    ``extension_params.health_params.policy`` is the run's policy (an ``oracle`` run's params name
    ``none``; its chain runs the oracle as a harness hook). SPRT: for every policy except
    ``sprt``, ``extension_params.sprt_enabled`` is False, as on mainnet (where the downtime
    thresholds make it "effectively disabled"), so that a policy is measured alone; for ``sprt``
    the chain's code defaults stay (``downtime_good_percentage`` 0.1, ``downtime_bad_percentage``
    0.2, ``downtime_h_threshold`` 4) and SPRT deactivation is the whole policy. Selection is by
    weight alone, as upstream; ``reputation_weighting`` selects by weight x reputation instead
    (the fork's PR #8; reputation is recomputed at every epoch's end). A given ``params`` is used
    as is, except for the policy (and ``shadow``, and ``reputation_weighting`` when true).
    :func:`compute_run_mechanisms` states these rules.

Genesis
    Every scenario participant with its weight (the chain's ``participant_list``), and its models
    (default ``["default"]``) and one ML node with ``timeslot_allocation [True, True]`` as its
    registered nodes (``keepersim.participant_nodes``); chain id ``keepersim-<scenario name>``.
"""

from __future__ import annotations

from collections.abc import Sequence

from keepersim.keeper.selection import get_selection_rule
from keepersim.module.genesis import compute_genesis
from keepersim.sim.oracle import get_chain_policy_name
from keepersim.sim.scenario import Scenario
from keepersim.sim.scenario_extras import compute_params_patch
from keepersim.types.messages import MLNodeInfo, Participant
from keepersim.types.params import (
    get_decimal_value,
    get_default_params,
    params_from_dict,
    params_to_dict,
    validate_params,
)
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes
from keepersim.types.policies import NO_POLICY, RUN_POLICIES

__all__ = [
    "build_genesis",
    "build_params",
    "build_scenario_params",
    "compute_run_mechanisms",
    "compute_selection_history",
]


def build_scenario_params(scenario: Scenario, policy: str) -> ModuleParams:
    """The run's default params before the policy: the chain's code defaults with the
    scenario's expiry, epoch length and shortest PoC (the module docstring), then the scenario's
    own ``params`` patch, if any."""
    out = get_default_params()
    out.params.validation_params.expiration_blocks = scenario.expiration_blocks
    epoch = out.params.epoch_params
    epoch.epoch_length = scenario.epoch_length
    epoch.poc_stage_duration = 1
    epoch.poc_exchange_duration = 0
    epoch.poc_validation_delay = 0
    epoch.poc_validation_duration = 1
    epoch.set_new_validators_delay = 0
    out.extension_params.sprt_enabled = policy == "sprt"
    if scenario.params is not None:
        out = params_from_dict(compute_params_patch(params_to_dict(out), scenario.params))
    return out


def build_params(
    scenario: Scenario,
    policy: str,
    *,
    params: ModuleParams | None = None,
    shadow: bool = False,
    reputation_weighting: bool = False,
) -> ModuleParams:
    """The params a run starts with (see the module docstring); validated."""
    out = ModuleParams()
    if params is None:
        out.CopyFrom(build_scenario_params(scenario, policy))
    else:
        out.CopyFrom(params)
    health = out.extension_params.health_params
    health.policy = get_chain_policy_name(policy)
    if shadow:
        health.shadow = True
    if reputation_weighting:
        out.extension_params.reputation_weighting = True
    validate_params(out)
    return out


def compute_run_mechanisms(
    scenario: Scenario, *, reputation_weighting: bool = False
) -> dict[str, str]:
    """What every run of ``scenario`` has besides its health policy, read from
    :func:`build_params`: ``selection`` (the rule, see :func:`get_selection_rule`) and ``sprt``
    (the policies whose runs deactivate by SPRT, with its params)."""
    built = {
        policy: build_params(scenario, policy, reputation_weighting=reputation_weighting)
        for policy in RUN_POLICIES
    }
    sprt_on = [policy for policy, p in built.items() if p.extension_params.sprt_enabled]
    sprt = "off"
    if sprt_on:
        v = built[sprt_on[0]].params.validation_params
        values = ", ".join(
            f"{name} {get_decimal_value(getattr(v, name)).normalize():f}"
            for name in (
                "downtime_good_percentage",
                "downtime_bad_percentage",
                "downtime_h_threshold",
            )
        )
        sprt = f"off except in {', '.join(sprt_on)} runs ({values})"
    return {"selection": get_selection_rule(built[NO_POLICY].extension_params), "sprt": sprt}


def compute_selection_history(
    initial: ModuleParams, schedule: Sequence[tuple[int, ModuleParams]]
) -> str:
    """The run's selection rule, and each change a governance update makes to it (effective from
    the block after the update's)."""
    current = get_selection_rule(initial.extension_params)
    out = current
    for height, params in schedule:
        rule = get_selection_rule(params.extension_params)
        if rule != current:
            out += f"; from height {height + 1}: {rule}"
            current = rule
    return out


def build_genesis(scenario: Scenario, params: ModuleParams) -> Genesis:
    return compute_genesis(
        f"keepersim-{scenario.name}",
        params,
        (
            (
                Participant(address=spec.address, index=spec.address, weight=spec.weight),
                ParticipantNodes(
                    address=spec.address,
                    models=list(spec.models),
                    model_weights=dict(spec.model_weights),
                    ml_nodes=[MLNodeInfo(node_id="node-0", timeslot_allocation=[True, True])],
                ),
            )
            for spec in scenario.participants
        ),
    )
