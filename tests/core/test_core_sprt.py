"""Slow deactivation: the chain's downtime SPRT (code defaults 0.10 / 0.20 / H 4; mainnet
0.98 / 0.99 / 100), driven by expiries through real blocks, with the "sprt" policy so that the
circuit breaker does not interfere."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal, localcontext

import pytest
from core_helpers import MODEL, Driver

from keepersim.keeper.sprt import compute_sprt_constants
from keepersim.types.events import EpochSettled, ParticipantDeactivated
from keepersim.types.messages import ACTIVE, INACTIVE
from keepersim.types.params import get_default_params, get_mainnet_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams

P = "p0"


def ln_units(x: Decimal) -> int:
    """ln(x) in 1e-12 units, rounded half-even, computed independently at 50 digits."""
    with localcontext() as ctx:
        ctx.prec = 50
        return int((x.ln() * 10**12).to_integral_value())


LOG_FAIL = ln_units(Decimal("0.20") / Decimal("0.10"))  # ln 2
LOG_PASS = ln_units(Decimal("0.80") / Decimal("0.90"))


@pytest.fixture
def sprt_params(make_test_params: Callable[..., ModuleParams]) -> ModuleParams:
    params = make_test_params()  # epoch length 40, expiry 20 blocks, SPRT 0.10 / 0.20 / 4
    params.extension_params.health_params.policy = "sprt"
    return params


def test_default_constants() -> None:
    c = compute_sprt_constants(get_default_params().params.validation_params)
    assert (c.log_fail, c.log_pass, c.threshold) == (LOG_FAIL, LOG_PASS, 4 * 10**12)
    assert (LOG_FAIL, LOG_PASS) == (693_147_180_560, -117_783_035_656)


@pytest.mark.parametrize(("misses", "tripped"), [(5, False), (6, True)])
def test_straight_misses_trip_at_six(
    make_driver: Callable[..., Driver], sprt_params: ModuleParams, misses: int, tripped: bool
) -> None:
    d = make_driver(sprt_params)
    for i in range(misses):
        d.miss(P, 21 + i)  # one miss per block, 21..26
    d.run_to(30)
    p = d.participant(P)
    assert p.current_epoch_stats.missed_requests == misses
    assert p.current_epoch_stats.inactiveLLR.value == misses * LOG_FAIL
    assert p.current_epoch_stats.inactiveLLR.exponent == -12
    deactivated = [
        e for r in d.results.values() for e in r.events if isinstance(e, ParticipantDeactivated)
    ]
    with d.chain.read() as k:
        excluded = list(k.iterate_excluded(0))
    table = d.chain.get_selection_table(MODEL)
    if tripped:
        assert p.status == INACTIVE
        assert [(e.height, e.address) for e in deactivated] == [(26, P)]
        assert [(x.address, x.reason, x.exclusion_block_height) for x in excluded] == [
            (P, "downtime", 26)
        ]
        assert P not in table.addresses
        assert all(d.chain.get_random_executor(MODEL, f"r{i}").address != P for i in range(500))
        assert sorted(d.chain.select_executors(MODEL, 4, "all")) == ["p1", "p2", "p3"]
    else:
        assert p.status == ACTIVE
        assert deactivated == [] and excluded == []
        assert P in table.addresses
        assert sorted(d.chain.select_executors(MODEL, 4, "all")) == ["p0", "p1", "p2", "p3"]


@pytest.mark.parametrize(("passes", "tripped"), [(1, True), (2, False)])
def test_completions_pull_the_llr_down(
    make_driver: Callable[..., Driver], sprt_params: ModuleParams, passes: int, tripped: bool
) -> None:
    # 6 ln2 + 1 ln(8/9) = 4.04 >= 4 trips; 6 ln2 + 2 ln(8/9) = 3.92 does not.
    d = make_driver(sprt_params)
    d.success(P, 2, passes)
    for i in range(6):
        d.miss(P, 21 + i)
    d.run_to(30)
    p = d.participant(P)
    assert p.current_epoch_stats.inactiveLLR.value == 6 * LOG_FAIL + passes * LOG_PASS
    assert (p.status == INACTIVE) is tripped


def test_mainnet_sprt_does_not_trip_on_six(
    make_driver: Callable[..., Driver], sprt_params: ModuleParams
) -> None:
    mainnet = get_mainnet_params().params.validation_params
    ours = sprt_params.params.validation_params
    for name in ("downtime_good_percentage", "downtime_bad_percentage", "downtime_h_threshold"):
        getattr(ours, name).CopyFrom(getattr(mainnet, name))
    d = make_driver(sprt_params)
    d.miss(P, 21, 6)
    for i in range(6):
        d.miss(P, 22 + i)
    d.run_to(30)
    p = d.participant(P)
    assert p.current_epoch_stats.missed_requests == 12
    assert p.current_epoch_stats.inactiveLLR.value == 12 * ln_units(
        Decimal("0.99") / Decimal("0.98")
    )
    assert p.status == ACTIVE
    assert P in d.chain.get_selection_table(MODEL).addresses


def test_sprt_switched_off_keeps_no_llr(
    make_driver: Callable[..., Driver], sprt_params: ModuleParams
) -> None:
    sprt_params.extension_params.sprt_enabled = False
    d = make_driver(sprt_params)
    for i in range(8):
        d.miss(P, 21 + i)
    d.run_to(30)
    p = d.participant(P)
    assert p.current_epoch_stats.missed_requests == 8
    assert p.current_epoch_stats.inactiveLLR.value == 0 and p.status == ACTIVE
    with d.chain.read() as k:
        assert list(k.iterate_excluded()) == []


def test_llr_resets_at_epoch_boundary(
    make_driver: Callable[..., Driver], sprt_params: ModuleParams
) -> None:
    d = make_driver(sprt_params)
    d.miss(P, 21, 6)
    d.run_to(39)
    assert d.participant(P).status == INACTIVE
    d.run_to(40)
    assert any(isinstance(e, EpochSettled) for e in d.results[40].events)
    p = d.participant(P)
    assert p.status == ACTIVE
    assert p.current_epoch_stats.inactiveLLR.value == 0
    assert p.current_epoch_stats.missed_requests == 0
    with d.chain.read() as k:
        summary = k.get_summary(P, 0)
        group = k.get_epoch_group(1, MODEL)
    assert summary is not None and summary.missed_requests == 6
    assert group is not None and P in [m.member_address for m in group.validation_weights]
    assert P in d.chain.get_selection_table(MODEL).addresses
    # A fresh epoch needs six fresh misses again: five are not enough.
    for i in range(5):
        d.miss(P, 61 + i)
    d.run_to(70)
    assert d.participant(P).status == ACTIVE
