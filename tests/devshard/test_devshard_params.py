"""``extension_params.devshard_params`` (issue 33): the devshard path's knobs and the gateway
limiter's settings as params. Additive (unset: every encoded params and app hash as before),
every field 0 / "" keeps the scenario's value, each rule is checked with it broken, and a
value set through params or governance acts as the same value in the scenario's key."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.gateway.limiter_params import DEFAULT_THROTTLE_SETTINGS, ThrottleSettings
from keepersim.gateway.signals import MISS_SIGNALS
from keepersim.sim.devshard_path import DevshardPath
from keepersim.sim.devshard_spec import DevshardSpec, compute_effective_spec
from keepersim.sim.governance import parse_governance
from keepersim.sim.run_genesis import build_params
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.scenario import ParticipantSpec, Scenario
from keepersim.types.devshard_params import (
    LIMITER_FIELDS,
    MAX_BLOCK_TIME_MS,
    MAX_GROUP_SIZE,
    MAX_LIMITER_VALUE,
    MAX_NONCES_PER_ESCROW,
    MISS_SIGNAL_NAMES,
)
from keepersim.types.errors import InvalidParamsError
from keepersim.types.params import (
    get_default_params,
    get_mainnet_params,
    params_from_dict,
    params_to_dict,
    validate_params,
)
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import DevshardParams
from keepersim.types.policies import DEVSHARD_LIMITER

FIELD = "extension_params.devshard_params."


def test_the_names_match_the_gateway_and_the_spec() -> None:
    assert tuple(s.value for s in MISS_SIGNALS) == MISS_SIGNAL_NAMES
    assert tuple(f.name for f in dataclasses.fields(ThrottleSettings)) == LIMITER_FIELDS
    proto = {f.name for f in DevshardParams.DESCRIPTOR.fields}
    assert set(LIMITER_FIELDS) <= proto
    spec = {f.name for f in dataclasses.fields(DevshardSpec)}
    assert proto - set(LIMITER_FIELDS) <= spec  # every knob is one of the scenario key's


@pytest.mark.parametrize("params", [get_default_params(), get_mainnet_params()])
def test_unset_devshard_params_leave_the_encoding_and_json_as_before(params: Any) -> None:
    ext = params.extension_params
    assert not ext.HasField("devshard_params")
    # field 8 never appears in the bytes the app hash reads, nor in the params JSON
    assert b"\x42" not in ext.SerializeToString()[:1]
    assert "devshard_params" not in params_to_dict(params)["extension_params"]
    # an all-zero message is "not set" in behaviour too
    spec = DevshardSpec(nonces_per_escrow=7, limiter=ThrottleSettings(request_burst=3))
    assert compute_effective_spec(spec, DevshardParams()) == spec


_BROKEN = [
    ("block_time_ms", MAX_BLOCK_TIME_MS + 1),
    ("group_size", MAX_GROUP_SIZE + 1),
    ("nonces_per_escrow", MAX_NONCES_PER_ESCROW + 1),
    ("miss_signal", "http_throttle"),  # a decline's signal, not a miss's
    ("miss_signal", "bogus"),
    *[(name, MAX_LIMITER_VALUE + 1) for name in LIMITER_FIELDS],
]


@pytest.mark.parametrize(("name", "value"), _BROKEN, ids=lambda v: str(v))
def test_each_rule_broken_is_refused_naming_its_field(name: str, value: object) -> None:
    params = get_default_params()
    setattr(params.extension_params.devshard_params, name, value)
    with pytest.raises(InvalidParamsError) as info:
        validate_params(params)
    assert info.value.field == FIELD + name


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, MAX_BLOCK_TIME_MS),
    st.integers(0, MAX_GROUP_SIZE),
    st.integers(0, MAX_NONCES_PER_ESCROW),
    st.sampled_from(("", *MISS_SIGNAL_NAMES)),
    st.lists(st.integers(0, MAX_LIMITER_VALUE), min_size=8, max_size=8),
)
def test_values_in_bounds_pass_and_override_only_where_set(
    block_time: int, group: int, nonces: int, miss: str, limiter: list[int]
) -> None:
    params = get_default_params()
    d = params.extension_params.devshard_params
    d.block_time_ms, d.group_size, d.nonces_per_escrow, d.miss_signal = (
        block_time,
        group,
        nonces,
        miss,
    )
    for name, value in zip(LIMITER_FIELDS, limiter, strict=True):
        setattr(d, name, value)
    validate_params(params)
    # through the params JSON and back
    assert params_from_dict(params_to_dict(params)) == params
    base = DevshardSpec(share=0.5, open_escrows=2, slot_filter=True)
    eff = compute_effective_spec(base, d)
    assert (eff.share, eff.open_escrows, eff.slot_filter) == (0.5, 2, True)
    assert eff.block_time_ms == (block_time or base.block_time_ms)
    assert eff.group_size == (group or base.group_size)
    assert eff.nonces_per_escrow == (nonces or base.nonces_per_escrow)
    assert eff.miss_signal == (miss or base.miss_signal)
    for name, value in zip(LIMITER_FIELDS, limiter, strict=True):
        default = getattr(DEFAULT_THROTTLE_SETTINGS, name)
        assert getattr(eff.limiter, name) == (value or default)


def _scenario(spec: DevshardSpec) -> Scenario:
    participants = [
        ParticipantSpec(f"p{i}", weight=w, latency_min=1, latency_max=3, miss=((0, 0.02),))
        for i, w in enumerate([100, 200, 300, 400])
    ]
    participants.append(
        ParticipantSpec("bad", weight=300, latency_min=1, latency_max=3, miss=((0, 0.6),))
    )
    return Scenario(
        name="devshard-params",
        seed=5,
        blocks=240,
        epoch_length=10_000,
        expiration_blocks=20,
        arrivals_per_block=3.0,
        participants=tuple(participants),
        devshard=spec,
    )


def _record_path(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, Any, Any]]:
    """(height, effective spec, limiter params) after each block's devshard step. Metrics
    cannot tell a params value from the same value in the scenario key: the params are chain
    state, so the app hash, and with it every escrow's slot draw, differs."""
    seen: list[tuple[int, Any, Any]] = []
    original = DevshardPath.process_block

    def process_block(self: DevshardPath, height: int, chain: Any) -> Any:
        out = original(self, height, chain)
        seen.append((height, self.spec, None if self.limiter is None else self.limiter.params))
        return out

    monkeypatch.setattr(DevshardPath, "process_block", process_block)
    return seen


def test_a_value_in_params_acts_as_the_same_value_in_the_scenario_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _record_path(monkeypatch)
    spec = DevshardSpec(nonces_per_escrow=300)
    keyed = dataclasses.replace(
        spec,
        miss_signal="eof_transport",
        block_time_ms=6000,
        limiter=ThrottleSettings(transport_failure_quarantine_ms=120_000, request_burst=5),
    )
    run_scenario(_scenario(keyed), DEVSHARD_LIMITER)
    by_key, seen[:] = list(seen), []
    params = build_params(_scenario(spec), DEVSHARD_LIMITER)
    d = params.extension_params.devshard_params
    d.miss_signal = "eof_transport"
    d.block_time_ms = 6000
    d.transport_failure_quarantine_ms = 120_000
    d.request_burst = 5
    run_scenario(_scenario(spec), DEVSHARD_LIMITER, params=params)
    assert seen == by_key
    assert by_key[0][2].transport_failure_quarantine_blocks == 20  # 120 s at 6 s a block


def test_governance_changes_the_limiter_from_the_block_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _record_path(monkeypatch)
    spec = DevshardSpec(nonces_per_escrow=300)
    base = build_params(_scenario(spec), DEVSHARD_LIMITER)
    entry = {"height": 100, "set": {FIELD + "http_quarantine_ms": 5_000, FIELD + "group_size": 4}}
    schedule = parse_governance([entry], base)
    result = run_scenario(_scenario(spec), DEVSHARD_LIMITER, governance=schedule)
    assert result.governance_heights == [100]
    by_height = {h: (s, p) for h, s, p in seen}
    assert by_height[100][1].http_quarantine_blocks == 720  # upstream's 60 min
    assert by_height[101][1].http_quarantine_blocks == 1
    assert (by_height[100][0].group_size, by_height[101][0].group_size) == (0, 4)
    assert by_height[240][1] == by_height[101][1]
