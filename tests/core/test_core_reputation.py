"""Reputation by the chain's formula, and its effect on the next epoch group and selection.

m_i = missed_i / inference_count_i (0 without inferences); actual = N - MRP * sum(m_i > MPC);
rep = 100 if actual > ETM, 0 if actual <= 0, else trunc(actual / ETM, 2) * 100.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from core_helpers import MODEL, Driver

from keepersim.keeper.reputation import compute_adjusted_weight, compute_reputation
from keepersim.types.chain_decimal import compute_chain_decimal
from keepersim.types.messages import EpochPerformanceSummary, ValidationParams
from keepersim.types.params import GOV_AUTHORITY, get_default_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgUpdateExtensionParams


def summaries(*counts: tuple[int, int]) -> list[EpochPerformanceSummary]:
    """One summary per (inference_count, missed_requests), newest first."""
    return [
        EpochPerformanceSummary(epoch_index=len(counts) - i, inference_count=ok, missed_requests=m)
        for i, (ok, m) in enumerate(counts)
    ]


def rep_params(etm: int = 30, cutoff: str = "0.01", penalty: str = "1.0") -> ValidationParams:
    return ValidationParams(
        epochs_to_max=etm,
        miss_percentage_cutoff=compute_chain_decimal(cutoff),
        miss_requests_penalty=compute_chain_decimal(penalty),
    )


CLEAN = (10, 0)


@pytest.mark.parametrize(
    ("history", "params", "expected"),
    [
        # no history: actual = 0 -> 0
        ([], rep_params(), 0),
        # 10 clean epochs of 30: 0.3333 -> 33
        ([CLEAN] * 10, rep_params(), 33),
        # 20 of 30 = 0.6666: truncated to 66, not rounded to 67
        ([CLEAN] * 20, rep_params(), 66),
        # 29.6 / 30 = 0.98666: truncated to 98 (one epoch with m = 2/5 = 0.4)
        ([CLEAN] * 29 + [(5, 2)], rep_params(), 98),
        # exactly ETM: trunc(1.00) -> 100
        ([CLEAN] * 30, rep_params(), 100),
        # above ETM -> 100
        ([CLEAN] * 31, rep_params(), 100),
        ([CLEAN] * 40 + [(1, 9)], rep_params(), 100),
        # the cutoff is strict: m = 1/100 = 0.01 is not penalized, 2/100 is (29.98 / 30 -> 99)
        ([CLEAN] * 29 + [(100, 1)], rep_params(), 100),
        ([CLEAN] * 29 + [(100, 2)], rep_params(), 99),
        # ETM 3 makes the strictness visible on its own: 2.98 / 3 = 0.9933 -> 99
        ([(100, 1), CLEAN, CLEAN], rep_params(3), 100),
        ([(100, 2), CLEAN, CLEAN], rep_params(3), 99),
        # actual <= 0 -> 0: one epoch with every request missed (m = 1), or m > 1
        ([(5, 5)], rep_params(), 0),
        ([(1, 3)], rep_params(), 0),
        ([(1, 3), CLEAN], rep_params(), 0),  # 2 - 3 < 0
        # an epoch without inferences has m = 0 even with misses: 1 / 30 -> 3
        ([(0, 5)], rep_params(), 3),
        # MRP scales the penalty: 3 - 2 * (0.25 + 0.5) = 1.5, / 4 = 0.375 -> 37
        ([(4, 1), (2, 1), CLEAN], rep_params(4, penalty="2.0"), 37),
        # exact decimal arithmetic: 29 / 100 = 0.29 -> 29 (binary floats give 28.999...)
        ([CLEAN] * 29, rep_params(100), 29),
        # a higher cutoff forgives: m = 0.25 <= 0.25
        ([(4, 1), CLEAN], rep_params(4, cutoff="0.25"), 50),
    ],
)
def test_compute_reputation(
    history: list[tuple[int, int]], params: ValidationParams, expected: int
) -> None:
    assert compute_reputation(summaries(*history), params) == expected


def test_default_reputation_params_are_the_chains() -> None:
    r = get_default_params().params.validation_params
    assert (r.epochs_to_max, r.miss_percentage_cutoff, r.miss_requests_penalty) == (
        30,
        compute_chain_decimal("0.01"),
        compute_chain_decimal("1"),
    )
    assert compute_reputation(summaries(*[CLEAN] * 15), r) == 50
    assert compute_reputation(summaries(*[CLEAN] * 14, (4, 1)), r) == 49  # 14.75 / 30


@pytest.mark.parametrize(
    ("weight", "rep", "adjusted"),
    [
        (1000, 100, 1000),
        (1000, 50, 500),
        (1001, 33, 330),
        (1000, 0, 10),
        (1000, 1, 10),
        (1000, 2, 20),
        (50, 0, 0),
        (250, 0, 2),
    ],
)
def test_adjusted_weight(weight: int, rep: int, adjusted: int) -> None:
    assert compute_adjusted_weight(weight, rep) == adjusted


@pytest.fixture
def rep_driver(
    make_driver: Callable[..., Driver], make_test_params: Callable[..., ModuleParams]
) -> Driver:
    params = make_test_params()
    params.params.epoch_params.epoch_length = 10
    params.params.validation_params.expiration_blocks = 3
    params.params.validation_params.epochs_to_max = 4
    ext = params.extension_params
    ext.health_params.policy = "none"
    ext.sprt_enabled = False
    ext.reputation_weighting = True  # the fork's option, off by default
    return make_driver(params, n=4)


def test_reputation_sets_next_epoch_group(rep_driver: Driver) -> None:
    d = rep_driver
    # epoch 0 (blocks 1..10)
    d.success("p0", 2, 2)
    d.success("p1", 2, 4)
    d.miss("p1", 5)  # m = 1/4
    d.miss("p2", 5, 2)  # no completions: m = 0
    d.success("p3", 2)
    d.miss("p3", 6, 2)  # m = 2
    # epoch 1 (blocks 11..20)
    d.success("p0", 12)
    d.success("p1", 12)
    d.miss("p1", 15)  # m = 1
    # epoch 2 (blocks 21..30)
    d.success("p0", 22)
    d.success("p1", 22, 3)
    d.success("p2", 22)
    d.miss("p2", 25)  # m = 1
    d.success("p3", 22, 8)

    def group_reps(epoch: int) -> dict[str, int]:
        with d.chain.read() as k:
            group = k.get_epoch_group(epoch, MODEL)
        assert group is not None
        return {m.member_address: m.reputation for m in group.validation_weights}

    assert group_reps(0) == {"p0": 0, "p1": 0, "p2": 0, "p3": 0}
    d.run_to(10)
    # N = 1, ETM = 4: p0 1/4, p1 (1 - 0.25)/4 = 0.1875, p2 1/4, p3 (1 - 2) <= 0
    assert group_reps(1) == {"p0": 25, "p1": 18, "p2": 25, "p3": 0}
    table = d.chain.get_selection_table(MODEL)
    weights = dict(zip(table.addresses, _weights(table.cumulative), strict=True))
    assert weights == {"p0": 250, "p1": 180, "p2": 250, "p3": 10}  # p3: floor 1000 / 100
    d.run_to(20)
    # N = 2: p0 2/4, p1 (2 - 1.25)/4 = 0.1875, p2 2/4, p3 (2 - 2)/4 = 0
    assert group_reps(2) == {"p0": 50, "p1": 18, "p2": 50, "p3": 0}
    d.run_to(30)
    # N = 3: p0 3/4, p1 (3 - 1.25)/4 = 0.4375, p2 (3 - 1)/4, p3 (3 - 2)/4
    assert group_reps(3) == {"p0": 75, "p1": 43, "p2": 50, "p3": 25}
    table = d.chain.get_selection_table(MODEL)
    weights = dict(zip(table.addresses, _weights(table.cumulative), strict=True))
    assert weights == {"p0": 750, "p1": 430, "p2": 500, "p3": 250}


def test_weighting_off_uses_raw_weights(rep_driver: Driver) -> None:
    d = rep_driver
    ext = d.chain.get_params().extension_params
    ext.reputation_weighting = False
    d.add(1, MsgUpdateExtensionParams(authority=GOV_AUTHORITY, extension_params=ext))
    d.run_to(2)
    table = d.chain.get_selection_table(MODEL)
    assert _weights(table.cumulative) == [1000, 1000, 1000, 1000]


def _weights(cumulative: tuple[int, ...]) -> list[int]:
    return [b - a for a, b in zip((0, *cumulative), cumulative, strict=False)]
