"""SMG's consecutive-failure breaker on the real chain."""

from __future__ import annotations

import pytest
from policy_helpers import MODEL, NetFactory, make_params, to_names

from keepersim.keeper.policies.consecutive import compute_outcome_class
from keepersim.types.errors import InvalidParamsError, NoExecutorsError
from keepersim.types.events import Outcome
from keepersim.types.params import validate_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ConsecutiveOverride, ModuleParams

WEIGHTS = {"a": 100, "b": 100, "c": 100}


def make_smg_params(**consecutive: object) -> ModuleParams:
    params = make_params("consecutive", expiration_blocks=3)
    c = params.extension_params.health_params.consecutive
    c.failure_threshold = 3
    c.success_threshold = 2
    c.timeout_blocks = 6
    for key, value in consecutive.items():
        if key == "overrides":
            c.overrides.extend(value)  # type: ignore[arg-type]
        else:
            setattr(c, key, value)
    return params


def test_opens_after_consecutive_failures_and_a_success_resets(make_net: NetFactory) -> None:
    net = make_net(make_smg_params(), WEIGHTS)
    net.miss("a", 2)
    net.succeed("a")
    net.miss("a", 2)
    assert net.transitions("a") == []
    assert net.state("a")["consecutive_failures"] == 2
    assert "a" in net.admitted()
    net.miss("a")
    [t] = net.transitions("a")
    assert (t.from_state, t.to_state) == ("closed", "open")
    assert t.height == net.height
    assert "a" not in net.admitted()
    assert net.state("a")["state"] == "open"
    # As SMG's: opening clears only the success streak (test_upstream_smg.py has SMG's tests).
    assert (net.state("a")["consecutive_failures"], net.state("a")["consecutive_successes"]) == (
        3,
        0,
    )


def test_open_moves_to_half_open_at_the_timeout_end_block(make_net: NetFactory) -> None:
    net = make_net(make_smg_params(), WEIGHTS)
    net.miss("a", 3)
    opened = net.height
    for h in range(opened + 1, opened + 6):
        net.block()
        assert net.height == h
        assert "a" not in net.admitted(), h
    net.block()
    assert net.height == opened + 6
    assert to_names(net.transitions("a")) == [("closed", "open"), ("open", "half_open")]
    assert net.transitions("a")[-1].height == opened + 6
    assert "a" in net.admitted()


def test_half_open_needs_success_threshold_successes(make_net: NetFactory) -> None:
    net = make_net(make_smg_params(), WEIGHTS)
    net.miss("a", 3)
    net.run(6)
    net.succeed("a")
    assert net.state("a")["state"] == "half_open"
    assert net.state("a")["consecutive_successes"] == 1
    net.succeed("a")
    assert to_names(net.transitions("a"))[-1] == ("half_open", "closed")
    assert net.state("a")["state"] == "closed"


def test_any_half_open_failure_reopens_and_the_timeout_starts_over(make_net: NetFactory) -> None:
    net = make_net(make_smg_params(), WEIGHTS)
    net.miss("a", 3)
    net.run(6)
    net.succeed("a")  # one success of the two needed
    net.miss("a")
    reopened = net.height
    assert to_names(net.transitions("a"))[-1] == ("half_open", "open")
    assert net.state("a")["half_open_at_block"] == reopened + 6
    net.run(5)
    assert "a" not in net.admitted()
    net.block()
    assert to_names(net.transitions("a"))[-1] == ("open", "half_open")


def test_pushback_records_nothing(make_net: NetFactory) -> None:
    net = make_net(make_smg_params(success_threshold=1), WEIGHTS)
    net.miss("a", 2)
    net.push_back("a")  # must not reset the failure streak
    assert net.state("a")["consecutive_failures"] == 2
    net.miss("a")
    assert net.state("a")["state"] == "open"
    net.run(6)
    assert net.state("a")["state"] == "half_open"
    net.push_back("a")  # must not close a half-open breaker, even at success_threshold 1
    net.push_back("a")
    assert net.state("a")["state"] == "half_open"
    assert net.state("a")["total_neutral"] == 3
    net.succeed("a")
    assert net.state("a")["state"] == "closed"


def test_disabled_keeps_recording_and_never_opens(make_net: NetFactory) -> None:
    net = make_net(make_smg_params(disabled=True), WEIGHTS)
    net.miss("a", 7)
    view = net.state("a")
    assert view["state"] == "closed"
    assert view["consecutive_failures"] == 7
    assert view["total_failures"] == 7
    assert view["would_open_count"] == 1
    assert view["last_would_open_block"] == net.height
    assert net.transitions() == []
    assert "a" in net.admitted()
    net.succeed("a")
    net.miss("a", 3)
    assert net.state("a")["would_open_count"] == 2
    assert "a" in net.admitted()


def test_disabled_still_opens_a_participant_with_its_own_failure_threshold(
    make_net: NetFactory,
) -> None:
    override = ConsecutiveOverride(address="a", failure_threshold=2)
    net = make_net(make_smg_params(disabled=True, overrides=[override]), WEIGHTS)
    net.miss("a", 2)
    net.miss("b", 5)
    assert net.state("a")["state"] == "open"
    assert net.state("b")["state"] == "closed"
    assert net.admitted() == {"b", "c"}


def test_overrides_thresholds_and_timeout(make_net: NetFactory) -> None:
    override = ConsecutiveOverride(
        address="a", failure_threshold=1, success_threshold=1, timeout_blocks=2
    )
    net = make_net(make_smg_params(overrides=[override]), WEIGHTS)
    result = net.block(net.start("a"), net.start("b"))
    net.run_until(result.height + 3)
    opened = net.height
    assert net.state("a")["state"] == "open"
    assert net.state("b")["state"] == "closed"
    net.block()
    assert net.state("a")["state"] == "open"
    net.block()
    assert net.state("a")["state"] == "half_open"
    assert net.transitions("a")[-1].height == opened + 2
    net.succeed("a")
    assert net.state("a")["state"] == "closed"


def test_override_pushback_outcomes(make_net: NetFactory) -> None:
    misses_neutral = ConsecutiveOverride(address="a", pushback_outcomes=["declined", "miss"])
    declines_fail = ConsecutiveOverride(address="b", has_pushback_outcomes=True)
    params = make_smg_params(overrides=[misses_neutral, declines_fail])
    net = make_net(params, WEIGHTS)
    net.miss("a", 5)
    assert net.state("a")["state"] == "closed"
    assert net.state("a")["total_neutral"] == 5
    for _ in range(3):
        net.push_back("b")
    assert net.state("b")["state"] == "open"
    for _ in range(3):
        net.push_back("c")
    assert net.state("c")["state"] == "closed"


def test_outcome_classes() -> None:
    default = frozenset({"declined"})
    assert (
        compute_outcome_class(Outcome.SUCCESS, frozenset({"declined", "miss"})) is Outcome.SUCCESS
    )
    assert compute_outcome_class(Outcome.MISS, default) is Outcome.MISS
    assert compute_outcome_class(Outcome.NEUTRAL, default) is Outcome.NEUTRAL
    assert compute_outcome_class(Outcome.NEUTRAL, frozenset()) is Outcome.MISS
    assert compute_outcome_class(Outcome.MISS, frozenset({"miss"})) is Outcome.NEUTRAL


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"failure_threshold": 0}, "extension_params.health_params.consecutive.failure_threshold"),
        ({"success_threshold": 0}, "extension_params.health_params.consecutive.success_threshold"),
        ({"timeout_blocks": 0}, "extension_params.health_params.consecutive.timeout_blocks"),
        (
            {"overrides": [ConsecutiveOverride(address="a", failure_threshold=0)]},
            "extension_params.health_params.consecutive.overrides[0].failure_threshold",
        ),
        (
            {"overrides": [ConsecutiveOverride(address="a", timeout_blocks=-1)]},
            "extension_params.health_params.consecutive.overrides[0].timeout_blocks",
        ),
        (
            {"overrides": [ConsecutiveOverride(address="a", pushback_outcomes=["503"])]},
            "extension_params.health_params.consecutive.overrides[0].pushback_outcomes",
        ),
        (
            {"overrides": [ConsecutiveOverride(address="a", pushback_outcomes=["miss", "miss"])]},
            "extension_params.health_params.consecutive.overrides[0].pushback_outcomes",
        ),
        (
            {"overrides": [ConsecutiveOverride(address="a"), ConsecutiveOverride(address="a")]},
            "extension_params.health_params.consecutive.overrides[1].address",
        ),
        (
            {"overrides": [ConsecutiveOverride(address="")]},
            "extension_params.health_params.consecutive.overrides[0].address",
        ),
    ],
)
def test_validation_names_the_field(change: dict[str, object], field: str) -> None:
    params = make_smg_params(**change)
    with pytest.raises(InvalidParamsError) as info:
        validate_params(params)
    assert info.value.field == field
    assert field in str(info.value)


def test_valid_smg_params_pass() -> None:
    validate_params(
        make_smg_params(overrides=[ConsecutiveOverride(address="a", success_threshold=1)])
    )


def test_all_open_without_fallback_is_no_available_executors(make_net: NetFactory) -> None:
    net = make_net(make_smg_params(), {"a": 100, "b": 100})
    net.block(*[net.start(a) for a in ("a", "b") for _ in range(3)])
    net.run(3)
    assert net.state("a")["state"] == net.state("b")["state"] == "open"
    with pytest.raises(NoExecutorsError, match="no available executors"):
        net.chain.get_random_executor(MODEL, "r1")


def test_all_open_with_fallback_returns_the_full_list(make_net: NetFactory) -> None:
    net = make_net(make_smg_params(fallback_when_all_open=True), {"a": 100, "b": 100})
    net.block(*[net.start(a) for a in ("a", "b") for _ in range(3)])
    net.run(3)
    table = net.chain.get_selection_table(MODEL)
    assert table.fallback
    assert table.addresses == ("a", "b")
    assert net.chain.get_random_executor(MODEL, "r1").fallback


def test_shadow_mode_records_but_keeps_nobody_out(make_net: NetFactory) -> None:
    params = make_smg_params()
    params.extension_params.health_params.shadow = True
    net = make_net(params, WEIGHTS)
    net.miss("a", 3)
    assert net.state("a")["state"] == "open"
    table = net.chain.get_selection_table(MODEL)
    assert table.shadow_excluded == ("a",)
    assert set(table.addresses) == {"a", "b", "c"}
