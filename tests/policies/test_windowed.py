"""keepersim's windowed policy on the real chain."""

from __future__ import annotations

from typing import Any

import pytest
from policy_helpers import MODEL, Net, NetFactory, make_params, to_names

from keepersim.keeper.policies.base import PolicyStore
from keepersim.keeper.policies.windowed_evidence import (
    compute_cooldown,
    compute_jitter_pct,
    is_window_failing,
)
from keepersim.store.cache import forget_all_derived
from keepersim.types.errors import BlockError, InvalidParamsError
from keepersim.types.events import InferenceExpired
from keepersim.types.messages import MsgFinishInference, MsgUpdateParams
from keepersim.types.params import GOV_AUTHORITY, get_default_health_params, validate_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams, WindowedParams
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgUpdateExtensionParams

FLEET = {"a": 100, "b": 100, "c": 100, "d": 100, "e": 100}
EXPIRY = 20


def make_w_params(expiration_blocks: int = EXPIRY, **changes: object) -> ModuleParams:
    """Windowed params with the pipeline's cap and panic off, no jitter and no overdue evidence
    (tests opt in): misses count when they expire. Issue 16's rules are off too and two probes
    may fly at full weight (tests/policies/test_windowed_recovery.py, test_windowed_suspicion.py
    and test_windowed_probing.py turn each rule on)."""
    params = make_params("windowed", expiration_blocks=expiration_blocks)
    w = params.extension_params.health_params.windowed
    w.jitter_pct = 0
    w.initial_cooldown_blocks = 50
    w.max_cooldown_blocks = 800
    w.max_excluded_weight_pct = 100
    w.panic_healthy_weight_pct = 0
    w.overdue_min_blocks = 1000
    w.max_probes = 2
    w.readmit_successes = 0
    w.short_window = 0
    w.incident_blocks = 0
    w.strikes_until_proven = False
    w.recovered_max_cooldown_blocks = 0
    w.suspicion_prior_pct = 0
    w.probe_weight_pct = 0
    for key, value in changes.items():
        setattr(w, key, value)
    return params


def record(net: Net, address: str, successes: int, misses: int) -> None:
    """Start successes + misses inferences in one block; finish the first ones the next block
    and let the others expire (or turn overdue first)."""
    starts = [net.start(address) for _ in range(successes + misses)]
    result = net.block(*starts)
    net.block(*[net.finish(s) for s in starts[:successes]])
    net.run_until(result.height + net.chain.get_params().params.validation_params.expiration_blocks)


def weights(net: Net) -> dict[str, int]:
    table = net.chain.get_selection_table(MODEL)
    out, previous = {}, 0
    for address, cumulative in zip(table.addresses, table.cumulative, strict=True):
        out[address] = cumulative - previous
        previous = cumulative
    return out


# --- the confidence gate ------------------------------------------------------------------


def test_gate_vectors() -> None:
    w = get_default_health_params().windowed
    assert (w.baseline_miss_pct, w.confidence_z_milli, w.min_samples) == (7, 2500, 4)
    assert is_window_failing(10, 32, w)  # 31%
    assert is_window_failing(6, 32, w)  # 19%
    assert not is_window_failing(5, 32, w)  # 16%: above the baseline but not significantly
    assert not is_window_failing(3, 32, w)  # 9%
    assert not is_window_failing(1, 20, w)  # 5%
    assert not is_window_failing(1, 4, w)  # one miss in four is not enough
    assert is_window_failing(2, 4, w)
    assert not is_window_failing(3, 3, w)  # below min_samples
    assert not is_window_failing(0, 32, w)


def test_gate_is_the_one_sided_z_test() -> None:
    """The integer rule equals (m/n - p0) / sqrt(p0 (1 - p0) / n) > z, with m/n > p0."""
    w = WindowedParams(baseline_miss_pct=5, confidence_z_milli=2000, min_samples=1)
    for n in range(1, 65):
        for m in range(n + 1):
            z = (m / n - 0.05) / (0.05 * 0.95 / n) ** 0.5
            if abs(z - 2.0) < 1e-9:
                continue
            assert is_window_failing(m, n, w) == (z > 2.0), (m, n)


def test_gate_excludes_a_30pct_node_but_not_a_5pct_one(make_net: NetFactory) -> None:
    net = make_net(make_w_params(), FLEET)
    record(net, "b", 31, 1)  # ~3%
    record(net, "c", 30, 2)  # ~6%
    record(net, "a", 22, 10)  # ~31%
    assert [(t.address, t.from_state, t.to_state) for t in net.transitions()] == [
        ("a", "healthy", "excluded")
    ]
    assert net.state("a")["window_misses"] == 10
    assert net.state("a")["window_samples"] == 32
    assert net.state("c")["state"] == "healthy"
    assert net.admitted() == {"b", "c", "d", "e"}


def test_gate_needs_enough_samples(make_net: NetFactory) -> None:
    net = make_net(make_w_params(), FLEET)
    record(net, "a", 2, 1)  # 33%, 3 samples
    assert net.state("a")["state"] == "healthy"
    record(net, "a", 1, 0)  # 1 of 4: not significant
    assert net.state("a")["state"] == "healthy"
    record(net, "a", 0, 1)  # 2 of 5
    assert net.state("a")["state"] == "excluded"


def test_pushback_never_counts(make_net: NetFactory) -> None:
    net = make_net(make_w_params(), FLEET)
    for _ in range(6):
        net.push_back("a")
    view = net.state("a")
    assert view["window_samples"] == 0
    assert view["state"] == "healthy"
    record(net, "a", 3, 1)
    for _ in range(3):
        net.push_back("a")
    assert (net.state("a")["window_misses"], net.state("a")["window_samples"]) == (1, 4)


# --- overdue evidence ---------------------------------------------------------------------


def warm_up(net: Net, address: str, latency: int = 2, count: int = 4) -> None:
    for _ in range(count):
        net.succeed(address, latency)


def test_overdue_is_evidence_long_before_expiry(make_net: NetFactory) -> None:
    net = make_net(make_w_params(expiration_blocks=150, overdue_min_blocks=10), FLEET)
    warm_up(net, "a")  # latencies 2, 2, 2, 2 -> overdue after max(10, 3 * 2) = 10 blocks
    assert net.state("a")["overdue_blocks"] == 10
    started = net.block(*[net.start("a") for _ in range(4)]).height
    net.run_until(started + 9)
    assert net.state("a")["state"] == "healthy"
    net.block()
    [t] = net.transitions("a")
    assert (t.from_state, t.to_state, t.height) == ("healthy", "excluded", started + 10)
    assert (net.state("a")["window_misses"], net.state("a")["window_samples"]) == (4, 8)
    # The expiry counts nothing more: each inference is one outcome.
    net.run_until(started + 150)
    expired = [e for r in net.results for e in r.events if isinstance(e, InferenceExpired)]
    assert len(expired) == 4
    view = net.state("a")
    assert (view["window_misses"], view["window_samples"], view["outcomes_recorded"]) == (4, 8, 8)
    assert view["remembered_inferences"] == 0


def test_late_success_undoes_the_provisional_miss(make_net: NetFactory) -> None:
    net = make_net(make_w_params(expiration_blocks=150, overdue_min_blocks=10), FLEET)
    warm_up(net, "a")
    start = net.start("a")
    started = net.block(start).height
    net.run_until(started + 10)
    view = net.state("a")
    assert (view["window_misses"], view["window_samples"], view["open_flagged"]) == (1, 5, 1)
    net.run_until(started + 14)
    net.block(net.finish(start))
    view = net.state("a")
    assert (view["window_misses"], view["window_samples"]) == (0, 5)
    assert view["overdue_undone"] == 1
    assert view["recent_latencies"] == [2, 2, 2, 2, 15]  # a real, slow sample raises the bar
    assert view["overdue_blocks"] == 45


def test_decline_after_overdue_removes_the_provisional_miss(make_net: NetFactory) -> None:
    net = make_net(make_w_params(expiration_blocks=150, overdue_min_blocks=10), FLEET)
    warm_up(net, "a")
    start = net.start("a")
    started = net.block(start).height
    net.run_until(started + 10)
    assert net.state("a")["window_misses"] == 1
    net.block(net.decline(start))
    view = net.state("a")
    assert (view["window_misses"], view["window_samples"], view["outcomes_recorded"]) == (0, 4, 4)


@pytest.mark.parametrize("cold", [False, True], ids=["starts-memo", "timeout-index"])
def test_a_declined_inference_is_never_flagged_overdue(make_net: NetFactory, cold: bool) -> None:
    """A declined inference stays STARTED (with its end height) and keeps its timeout: the
    overdue check skips it whether it lists the starts from memory or, as after a reopen, from
    the chain's timeout index."""
    net = make_net(make_w_params(expiration_blocks=150, overdue_min_blocks=10), FLEET)
    warm_up(net, "a")
    start = net.start("a")
    started = net.block(start).height
    net.block(net.decline(start))
    if cold:
        forget_all_derived()  # the starts memo is gone: the check reads the timeout index
    net.run_until(started + 11)
    view = net.state("a")
    assert (view["overdue_flags"], view["window_misses"], view["window_samples"]) == (0, 0, 4)


def test_a_decline_before_its_own_threshold_cancels_the_overdue_check(
    make_net: NetFactory,
) -> None:
    """Past overdue_min_blocks but before the participant's own threshold the check is put off
    to that height; declined in between, it is not flagged there."""
    net = make_net(make_w_params(expiration_blocks=150, overdue_min_blocks=10), FLEET)
    warm_up(net, "a", latency=5)  # overdue after max(10, 3 * 5) = 15 blocks
    assert net.state("a")["overdue_blocks"] == 15
    start = net.start("a")
    started = net.block(start).height
    net.run_until(started + 12)
    net.block(net.decline(start))
    net.run_until(started + 16)
    view = net.state("a")
    assert (view["overdue_flags"], view["window_misses"], view["window_samples"]) == (0, 0, 4)


def test_late_success_after_exclusion_probes_at_once(make_net: NetFactory) -> None:
    net = make_net(
        make_w_params(expiration_blocks=150, overdue_min_blocks=10, initial_cooldown_blocks=100),
        FLEET,
    )
    warm_up(net, "a")
    starts = [net.start("a") for _ in range(3)]
    started = net.block(*starts).height
    net.run_until(started + 10)
    assert net.state("a")["state"] == "excluded"
    net.block(*[net.finish(s) for s in starts])
    assert to_names(net.transitions("a")) == [("healthy", "excluded"), ("excluded", "probe")]
    assert net.transitions("a")[-1].reason == "overdue evidence withdrawn"
    assert net.state("a")["window_misses"] == 0


def test_slow_but_healthy_nodes_are_not_flagged(make_net: NetFactory) -> None:
    net = make_net(make_w_params(expiration_blocks=150, overdue_min_blocks=10), FLEET)
    warm_up(net, "a", latency=40)
    assert net.state("a")["overdue_blocks"] == 120
    # A newcomer without samples of its own is judged by the fleet's.
    assert net.state("b")["overdue_blocks"] == 120
    for _ in range(3):
        net.succeed("a", 60)
        net.succeed("b", 60)
    assert net.state("a")["overdue_flags"] == net.state("b")["overdue_flags"] == 0
    assert net.transitions() == []


# --- the window is kept -------------------------------------------------------------------


def exclude(net: Net, address: str, successes: int = 2, misses: int = 2) -> None:
    record(net, address, successes, misses)
    assert net.state(address)["state"] == "excluded"


def reach_probe(net: Net, address: str) -> None:
    net.run_until(int(net.state(address)["probe_at_block"]))  # type: ignore[call-overload]
    assert net.state(address)["state"] == "probe"


def test_window_survives_a_probe_success(make_net: NetFactory) -> None:
    net = make_net(make_w_params(), FLEET)
    exclude(net, "a")  # 2 of 4
    reach_probe(net, "a")
    net.succeed("a")  # 2 of 5: still failing
    net.succeed("a")  # 2 of 6: still failing
    view = net.state("a")
    assert (view["state"], view["window_misses"], view["window_samples"]) == ("probe", 2, 6)
    while net.state("a")["state"] == "probe":
        net.succeed("a")
    # Re-admitted once the kept misses are diluted enough: 2 of 7 passes the default gate.
    assert to_names(net.transitions("a"))[-1] == ("probe", "healthy")
    view = net.state("a")
    assert (view["window_misses"], view["window_samples"]) == (2, 7)


def test_window_survives_the_epoch_boundary(make_net: NetFactory) -> None:
    params = make_w_params(initial_cooldown_blocks=100)
    params.params.epoch_params.epoch_length = 60
    net = make_net(params, FLEET)
    exclude(net, "a")
    record(net, "b", 5, 1)
    assert net.height < 60
    before_a, before_b = net.state("a"), net.state("b")
    net.run_until(61)
    after_a, after_b = net.state("a"), net.state("b")
    assert before_a == after_a
    assert before_b == after_b
    assert to_names(net.transitions()) == [("healthy", "excluded")]


# --- probing ------------------------------------------------------------------------------


def test_probe_slots_are_capped_and_freed_by_any_result(make_net: NetFactory) -> None:
    net = make_net(make_w_params(max_probes=2), FLEET)
    exclude(net, "a", successes=0, misses=4)
    reach_probe(net, "a")
    first = net.start("a")
    net.block(first)
    assert "a" in net.admitted()
    second = net.start("a")
    net.block(second)
    assert net.state("a")["probes_in_flight"] == 2
    assert net.state("a")["verdict"] == "probe_full"
    assert "a" not in net.admitted()
    net.block(net.decline(first))  # pushback releases the slot, records nothing
    view = net.state("a")
    assert (view["state"], view["probes_in_flight"], view["window_samples"]) == ("probe", 1, 4)
    assert "a" in net.admitted()


def test_failed_probes_double_the_cooldown(make_net: NetFactory) -> None:
    net = make_net(
        make_w_params(expiration_blocks=150, overdue_min_blocks=10, initial_cooldown_blocks=10),
        FLEET,
    )
    warm_up(net, "a")
    exclude_at = net.block(*[net.start("a") for _ in range(4)]).height + 10
    net.run_until(exclude_at)
    assert net.state("a")["cooldown_blocks"] == 10
    reach_probe(net, "a")
    probe = net.block(net.start("a")).height
    net.run_until(probe + 10)  # the probe turns overdue
    last = net.transitions("a")[-1]
    assert (last.from_state, last.to_state, last.height) == ("probe", "excluded", probe + 10)
    assert "probe overdue" in last.reason
    assert (net.state("a")["strikes"], net.state("a")["cooldown_blocks"]) == (1, 20)
    reach_probe(net, "a")
    net.block(net.start("a"))
    net.run(10)
    assert (net.state("a")["strikes"], net.state("a")["cooldown_blocks"]) == (2, 40)


def test_a_probe_that_expires_fails_it(make_net: NetFactory) -> None:
    net = make_net(make_w_params(initial_cooldown_blocks=10), FLEET)
    exclude(net, "a")
    reach_probe(net, "a")
    net.miss("a")
    last = net.transitions("a")[-1]
    assert (last.from_state, last.to_state) == ("probe", "excluded")
    assert "probe missed" in last.reason
    assert net.state("a")["cooldown_blocks"] == 20


def test_ramp_after_readmission(make_net: NetFactory) -> None:
    net = make_net(make_w_params(ramp_blocks=20, ramp_start_pct=10), {"a": 1000, "b": 1000})
    exclude(net, "a", successes=3, misses=2)
    reach_probe(net, "a")
    while net.state("a")["state"] == "probe":
        net.succeed("a", latency=0)
    readmitted = net.transitions("a")[-1]
    assert (readmitted.from_state, readmitted.to_state) == ("probe", "healthy")
    r = readmitted.height
    seen = {}
    while net.height < r + 21:
        seen[net.height - r] = weights(net)["a"]  # the memoized table, at every height
        net.block()
    assert seen[0] == seen[1] == 100
    assert seen[2] == seen[3] == 190
    assert seen[10] == 550
    assert seen[19] == 910
    assert seen[20] == 1000
    assert list(seen.values()) == sorted(seen.values())


def test_cooldown_jitter_is_deterministic_and_bounded() -> None:
    w = WindowedParams(initial_cooldown_blocks=100, max_cooldown_blocks=1600, jitter_pct=20)
    values = {compute_cooldown(f"gonka1{i}", 0, 1, 0, w) for i in range(200)}
    assert min(values) >= 80
    assert max(values) <= 120
    assert len(values) > 20  # spread: no synchronized probing
    assert compute_cooldown("x", 0, 1, 0, w) == compute_cooldown("x", 0, 1, 0, w)
    assert all(-20 <= compute_jitter_pct("x", n, 20) <= 20 for n in range(100))
    assert compute_jitter_pct("x", 1, 0) == 0
    w.jitter_pct = 0
    assert [compute_cooldown("x", s, 1, 0, w) for s in range(6)] == [100, 200, 400, 800, 1600, 1600]


def test_quick_reexclusion_is_a_strike_and_a_long_healthy_run_clears_it(
    make_net: NetFactory,
) -> None:
    net = make_net(make_w_params(ramp_blocks=30, initial_cooldown_blocks=10), FLEET)
    exclude(net, "a", successes=3, misses=2)
    reach_probe(net, "a")
    while net.state("a")["state"] == "probe":
        net.succeed("a", latency=0)
    assert net.state("a")["state"] == "healthy"
    record(net, "a", 0, 3)  # re-excluded within the probation
    assert (net.state("a")["strikes"], net.state("a")["cooldown_blocks"]) == (1, 20)


# --- pipeline interplay -------------------------------------------------------------------


def test_exclusion_cap_keeps_the_most_degraded_out(make_net: NetFactory) -> None:
    net = make_net(make_w_params(max_excluded_weight_pct=30), FLEET)
    exclude(net, "a", successes=0, misses=4)
    exclude(net, "b", successes=2, misses=2)
    assert net.state("b")["state"] == "excluded"  # the policy's verdict stands...
    table = net.chain.get_selection_table(MODEL)
    assert table.excluded == ("a",)  # ...but only 20% of the weight may be kept out
    assert weights(net) == {"b": 100, "c": 100, "d": 100, "e": 100}


def test_panic_admits_everyone(make_net: NetFactory) -> None:
    net = make_net(make_w_params(panic_healthy_weight_pct=50), FLEET)
    exclude(net, "a")
    exclude(net, "b")
    assert not net.chain.get_selection_table(MODEL).panic  # 60% admitted
    exclude(net, "c")
    table = net.chain.get_selection_table(MODEL)
    assert table.panic
    assert set(table.addresses) == set(FLEET)


def test_shadow_mode_records_state_and_keeps_nobody_out(make_net: NetFactory) -> None:
    params = make_w_params()
    params.extension_params.health_params.shadow = True
    net = make_net(params, FLEET)
    exclude(net, "a")
    table = net.chain.get_selection_table(MODEL)
    assert table.shadow_excluded == ("a",)
    assert "a" in table.addresses


def test_quiet_blocks_read_no_policy_state(
    make_net: NetFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = make_net(make_w_params(), {f"p{i:03d}": 100 for i in range(300)})
    record(net, "p001", 2, 2)
    net.run(5)
    calls = []
    original = PolicyStore.find

    def counting(self: PolicyStore, address: str, decode: Any) -> Any:
        calls.append(address)
        return original(self, address, decode)

    monkeypatch.setattr(PolicyStore, "find", counting)
    net.run(3)
    assert calls == []
    net.run_until(int(net.state("p001")["probe_at_block"]))  # type: ignore[call-overload]
    # The cooldown wake-up looks at exactly the participant's entry and the fleet's (its list
    # of probing participants gains p001).
    assert sorted(set(calls)) == ["", "p001"]


def test_windowed_param_validation_names_the_field() -> None:
    params = make_w_params(ramp_start_pct=0)
    with pytest.raises(InvalidParamsError) as info:
        validate_params(params)
    assert info.value.field == "extension_params.health_params.windowed.ramp_start_pct"
    validate_params(make_w_params())


def test_overdue_flag_of_an_inference_finished_by_another_is_withdrawn(
    make_net: NetFactory,
) -> None:
    net = make_net(make_w_params(expiration_blocks=30, overdue_min_blocks=10), FLEET)
    warm_up(net, "a")
    start = net.start("a")
    started = net.block(start).height
    net.run_until(started + 10)
    assert net.state("a")["window_misses"] == 1
    # Another executor finishes it: the chain never attributes a miss to "a".
    net.block(MsgFinishInference(creator="b", inference_id=start.inference_id, executed_by="b"))
    net.run_until(started + 31)
    assert net.state("a")["window_misses"] == 1  # nothing rewrites the entry while idle
    net.succeed("a")  # the next write prunes the stale record and withdraws its flag
    view = net.state("a")
    assert (view["window_misses"], view["window_samples"]) == (0, 5)
    assert view["remembered_inferences"] == 0


# --- capacity misses and the saturation guard ---------------------------------------------


def overflow(net: Net, address: str, pairs: int) -> None:
    """``pairs`` times: one inference runs, a second starts while it runs and never finishes
    (a node at its capacity of one, as the chain sees it)."""
    for _ in range(pairs):
        running = net.start(address)
        net.block(running)
        dropped = net.start(address)
        net.block(dropped)
        net.block(net.finish(running))
    net.run(net.chain.get_params().params.validation_params.expiration_blocks)


def test_a_miss_beside_a_running_success_is_a_capacity_miss(make_net: NetFactory) -> None:
    net = make_net(make_w_params(min_samples=32), FLEET)
    overflow(net, "c", 3)
    net.miss("d", 2)  # nothing ran beside them: not capacity misses
    c, d = net.state("c"), net.state("d")
    assert (c["served_concurrency"], c["capacity_misses"], c["window_misses"]) == (1, 3, 3)
    assert (d["capacity_misses"], d["window_misses"]) == (0, 2)


def test_a_saturated_fleet_excludes_no_one(make_net: NetFactory) -> None:
    # min_samples 32: nobody is judged before the fleet has shown its state.
    net = make_net(make_w_params(min_samples=32), FLEET)
    for address in ("c", "d", "e"):
        overflow(net, address, 6)  # 18 capacity misses of 18: the fleet is full
    net.succeed_many("a", 20)
    net.miss("a", 12)  # 12/32: fails the gate, but 18 of the fleet's 30 misses were overflow
    a = net.state("a")
    assert a["window_failing"] and a["fleet_saturated"]
    assert net.transitions() == []
    assert net.admitted() == set(FLEET)


def test_the_same_misses_without_saturation_exclude(make_net: NetFactory) -> None:
    net = make_net(make_w_params(min_samples=32), FLEET)
    net.succeed_many("a", 20)
    net.miss("a", 12)
    assert not net.state("a")["fleet_saturated"]
    assert [(t.address, t.to_state) for t in net.transitions()] == [("a", "excluded")]


def test_saturation_guard_off(make_net: NetFactory) -> None:
    net = make_net(make_w_params(min_samples=32, saturation_pct=0), FLEET)
    for address in ("c", "d", "e"):
        overflow(net, address, 6)
    net.succeed_many("a", 20)
    net.miss("a", 12)
    assert [(t.address, t.to_state) for t in net.transitions()] == [("a", "excluded")]


def test_overdue_threshold_is_taken_when_the_inference_is_checked(make_net: NetFactory) -> None:
    """Latencies learned after a start still set its threshold (the check reads them then)."""
    net = make_net(make_w_params(expiration_blocks=150, overdue_min_blocks=10), FLEET)
    start = net.start("a")
    started = net.block(start).height
    assert net.state("a")["overdue_blocks"] is None  # nothing seen yet
    warm_up(net, "a", latency=1)
    net.run_until(started + 10)
    assert net.state("a")["open_flagged"] == 1


def test_a_threshold_above_the_minimum_is_checked_at_its_own_height(make_net: NetFactory) -> None:
    net = make_net(make_w_params(expiration_blocks=150, overdue_min_blocks=10), FLEET)
    warm_up(net, "a", latency=5)  # overdue after max(10, 3 * 5) = 15 blocks
    started = net.block(net.start("a")).height
    net.run_until(started + 14)
    assert net.state("a")["overdue_flags"] == 0
    net.block()
    assert net.state("a")["overdue_flags"] == 1
    assert net.state("a")["window_misses"] == 1


def test_a_failed_block_leaves_no_trace_in_the_carried_entries(make_net: NetFactory) -> None:
    """Entries carried in memory from block to block: a block that fails after changing them
    (its outcome ran, then a message was rejected) must not leak into the next block."""
    nets = [make_net(make_w_params(expiration_blocks=150, overdue_min_blocks=10), FLEET)]
    nets.append(make_net(make_w_params(expiration_blocks=150, overdue_min_blocks=10), FLEET))
    for net in nets:
        warm_up(net, "a")
        started = net.block(*[net.start("a", f"x{i}") for i in range(3)]).height
        net.run_until(started + 10)  # three flagged: "a" is excluded
    failing, clean = nets
    late = [failing.finish(failing.start("a", f"x{i}")) for i in range(3)]
    with pytest.raises(BlockError):
        failing.chain.deliver_block([*late, MsgFinishInference(executed_by="a")], strict=True)
    assert failing.chain.app_hash == clean.chain.app_hash
    for net in nets:
        net.block(late[0])  # one withdrawn flag of three: still excluded
        net.run(3)
    assert failing.state("a") == clean.state("a")
    assert failing.state("a")["window_misses"] == 2
    assert failing.chain.app_hash == clean.chain.app_hash


def test_the_in_memory_starts_list_decides_as_the_timeout_index(make_net: NetFactory) -> None:
    """Overdue checks use the starts this process saw when it saw them all, else the chain's
    timeout index: with the hints forgotten before every block, and across changes of
    expiration_blocks and overdue_min_blocks with inferences in flight, every block's app hash
    is the same."""
    updates: dict[int, list[object]] = {}
    for h, expiration, min_blocks in ((20, 12, 3), (35, 12, 5), (45, 12, 2), (50, 40, 2)):
        params = make_w_params(expiration_blocks=expiration, overdue_min_blocks=min_blocks)
        # expiration_blocks is the chain's param, overdue_min_blocks keepersim's: one of each.
        updates[h] = [
            MsgUpdateParams(authority=GOV_AUTHORITY, params=params.params),
            MsgUpdateExtensionParams(
                authority=GOV_AUTHORITY, extension_params=params.extension_params
            ),
        ]
    hashes = []
    for cold in (False, True):
        net = make_net(make_w_params(expiration_blocks=30, overdue_min_blocks=3), FLEET)
        out = []
        for h in range(70):
            if cold:
                forget_all_derived()
            msgs: list[object] = [net.start(a, f"i{h}{a}") for a in "abc"]
            if h % 3:
                msgs.append(net.finish(net.start("a", f"i{h - 1}a")))
            if h % 4 == 0:
                msgs.append(net.finish(net.start("b", f"i{h - 2}b")))
            msgs.extend(updates.get(h, []))
            out.append(net.block(*msgs).app_hash)
        hashes.append(out)
        assert net.state("c")["overdue_flags"] > 0  # the checks did flag something
    assert hashes[0] == hashes[1]


def test_events_are_handled_in_message_order(make_net: NetFactory) -> None:
    """windowed handles its starts and outcomes as the messages come: a probe started and
    finished in one block takes its slot and frees it (the other way round the slot would stay
    taken), and the re-admission comes with the finish that earned it."""
    net = make_net(make_w_params(), FLEET)
    exclude(net, "a", successes=3, misses=2)
    reach_probe(net, "a")
    results = []
    while net.state("a")["state"] == "probe":
        start = net.start("a")
        results.append(net.block(start, net.finish(start)))
        assert net.state("a")["probes_in_flight"] == 0
    assert len(results) == 2  # 2 of 6 still fails the gate, 2 of 7 passes
    kinds = [type(e).__name__ for e in results[-1].events]
    assert kinds == ["InferenceStarted", "HealthTransition", "InferenceFinished"]


def test_new_params_judge_every_window(make_net: NetFactory) -> None:
    """A window that passes a lax gate is judged again when stricter params take effect, in
    that block, with no outcome of its own (the gate judges every window under new params)."""
    net = make_net(make_w_params(confidence_z_milli=9_000), FLEET)
    record(net, "a", 2, 2)
    assert net.state("a")["state"] == "healthy"
    strict = make_w_params()
    net.block(
        MsgUpdateExtensionParams(authority=GOV_AUTHORITY, extension_params=strict.extension_params)
    )
    net.run(1)  # accepted params take effect in the next block
    assert net.state("a")["state"] == "excluded"
    assert "window 2/4 missed" in net.transitions("a")[-1].reason
