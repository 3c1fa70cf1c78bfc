"""The chain driver: determinism, paired streams, outcome and capacity semantics, governance."""

from __future__ import annotations

import heapq
from pathlib import Path
from typing import Any

import pytest

from keepersim.chain import Chain
from keepersim.keeper.inferences import is_declined
from keepersim.keeper.selection import SELECTION_BY_REPUTATION, SELECTION_BY_WEIGHT
from keepersim.sim.governance import parse_governance
from keepersim.sim.oracle import HEALTHY_MISS_THRESHOLD, OraclePolicy
from keepersim.sim.run_errors import GovernanceError, SimulationError
from keepersim.sim.run_genesis import build_params, compute_run_mechanisms
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.scenario import Scenario, parse_scenario
from keepersim.sim.stepper import draw_outcome, get_request_id
from keepersim.types.messages import (
    EXPIRED,
    FINISHED,
    STARTED,
    Inference,
)
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.policies import RUN_POLICIES

TIMING_KEYS = {"wall_seconds", "inferences_per_second", "blocks_per_second", "store"}


def make_scenario(**overrides: Any) -> Scenario:
    """Four participants; "b" degrades to 90% misses in blocks [60, 180)."""
    data: dict[str, Any] = {
        "name": "tiny",
        "seed": 3,
        "blocks": 240,
        "epoch_length": 100,
        "expiration_blocks": 20,
        "arrivals_per_block": 2.0,
        "participants": [
            {"address": "a", "weight": 1000, "miss": [[0, 0.01]]},
            {
                "address": "b",
                "weight": 600,
                "latency_blocks": [1, 4],
                "miss": [[0, 0.0], [60, 0.9], [180, 0.0]],
            },
            {"address": "c", "weight": 400, "miss": [[0, 0.02]]},
            {"address": "d", "weight": 800, "latency_blocks": 3, "miss": [[0, 0.3]]},
        ],
    }
    data.update(overrides)
    return parse_scenario(data, "test")


def without_timing(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in TIMING_KEYS}


def read_inferences(folder: Path) -> list[Inference]:
    with Chain.open(folder) as chain, chain.read() as k:
        return list(k.iterate_inferences())


def request_index(inference_id: str) -> int:
    return int(inference_id.split("/")[0].removeprefix("req-"))


# determinism and pairing ------------------------------------------------------------------


def test_same_inputs_give_identical_results() -> None:
    s = make_scenario()
    first = run_scenario(s, "gonka", store="memory").to_dict()
    second = run_scenario(s, "gonka", store="memory").to_dict()
    assert without_timing(first) == without_timing(second)


def test_leveldb_and_memory_give_the_same_app_hash() -> None:
    s = make_scenario(blocks=150)
    on_disk = run_scenario(s, "gonka", store="leveldb")
    in_memory = run_scenario(s, "gonka", store="memory")
    assert on_disk.app_hash == in_memory.app_hash
    assert without_timing(on_disk.to_dict()) == without_timing(in_memory.to_dict())


def test_seed_override_changes_the_stream() -> None:
    s = make_scenario()
    a = run_scenario(s, "none", store="memory")
    b = run_scenario(s, "none", store="memory", seed=s.seed + 1)
    assert a.seed == s.seed and b.seed == s.seed + 1
    assert a.app_hash != b.app_hash


def test_every_policy_sees_the_same_request_stream() -> None:
    s = make_scenario()
    runs = {p: run_scenario(s, p, store="memory").to_dict() for p in ("none", "oracle", "gonka")}
    assert len({r["requests"] for r in runs.values()}) == 1
    # Without pushback every request is assigned exactly once.
    assert all(r["selections"] == r["requests"] for r in runs.values())
    assert runs["oracle"]["misses"] < runs["none"]["misses"]


def test_outcome_draw_is_keyed_by_seed_request_and_executor() -> None:
    assert draw_outcome(1, 5, "a", 1, 8) == draw_outcome(1, 5, "a", 1, 8)
    draws = {draw_outcome(1, 5, addr, 1, 8) for addr in "abcdefgh"}
    assert len(draws) == 8
    assert draw_outcome(1, 5, "a", 1, 8) != draw_outcome(2, 5, "a", 1, 8)
    for n in range(200):
        u, latency = draw_outcome(7, n, "x", 2, 5)
        assert 0.0 <= u < 1.0
        assert 2 <= latency <= 5
    assert get_request_id(12) == "req-00000012"
    assert get_request_id(12, 2) == "req-00000012/r2"


# oracle ------------------------------------------------------------------------------------


def test_oracle_never_excludes_the_healthy_and_catches_degradation_at_once() -> None:
    s = make_scenario()
    result = run_scenario(s, "oracle", store="memory").to_dict()
    assert result["false_exclusion_weight_share"] == 0.0
    assert result["degraded_traffic_share"] == 0.0
    none = run_scenario(s, "none", store="memory").to_dict()
    assert none["degraded_traffic_share"] > 0.2
    # "d" (p = 0.3) is out for the whole run, "b" for [60, 180): (800 * 240 + 600 * 120) / 240
    expected = (800 * 240 + 600 * 120) / 240 / s.get_total_weight()
    assert result["excluded_weight_share"] == pytest.approx(expected)
    assert result["detection_delay"]["median"] == 0.0
    assert result["recovery_delay"]["max"] == 0
    assert result["undetected_share"] == 0.0
    by_address = {p["address"]: p for p in result["participants"]}
    assert by_address["d"]["assigned"] == 0
    assert by_address["d"]["kept_out_blocks"] == 240


def test_oracle_verdict_targets_the_next_height() -> None:
    s = make_scenario()
    oracle = OraclePolicy(s)
    reader: Any = None
    # The table at committed height 59 serves block 60, where "b" degrades.
    assert oracle.get_health(reader, "b", 58).admitted
    verdict = oracle.get_health(reader, "b", 59)
    assert not verdict.admitted
    assert verdict.valid_until == 178  # the table at 179 serves block 180 (healthy again)
    assert oracle.get_health(reader, "b", 179).admitted
    assert oracle.get_health(reader, "unknown", 1).admitted
    assert HEALTHY_MISS_THRESHOLD == 0.05


def test_shadow_mode_reports_exclusions_without_applying_them() -> None:
    s = make_scenario()
    none = run_scenario(s, "none", store="memory").to_dict()
    shadow = run_scenario(s, "gonka", store="memory", shadow=True).to_dict()
    live = run_scenario(s, "gonka", store="memory").to_dict()
    # Selection is unfiltered in shadow mode: the same assignments and outcomes as `none`.
    assert shadow["misses"] == none["misses"]
    assert shadow["inferences"] == none["inferences"]
    assert shadow["excluded_weight_share"] > 0
    assert live["misses"] != none["misses"]


# outcome accounting --------------------------------------------------------------------------


def test_misses_match_the_chains_expiries_and_the_keyed_draws(tmp_path: Path) -> None:
    s = make_scenario()
    folder = tmp_path / "chain"
    result = run_scenario(s, "gonka", store_dir=folder).to_dict()
    inferences = read_inferences(folder)
    status = [i.status for i in inferences]
    assert status.count(EXPIRED) == result["misses"]
    assert status.count(FINISHED) == result["finished"]
    assert status.count(STARTED) == result["in_flight_at_end"]
    assert len(inferences) == result["selections"] == result["requests"]
    assert result["inferences"] == result["finished"] + result["misses"]
    specs = {p.address: p for p in s.participants}
    for inf in inferences:
        spec = specs[inf.assigned_to]
        u, latency = draw_outcome(
            s.seed,
            request_index(inf.inference_id),
            inf.assigned_to,
            spec.latency_min,
            spec.latency_max,
        )
        miss = u < spec.get_miss_probability(inf.start_block_height)
        if inf.status == FINISHED:
            assert not miss
            assert inf.end_block_height == inf.start_block_height + latency
        elif inf.status == EXPIRED:
            assert miss
        else:
            deadline = inf.start_block_height + (s.expiration_blocks if miss else latency)
            assert deadline > s.blocks


def test_late_finish_beyond_expiry_is_a_miss(tmp_path: Path) -> None:
    s = make_scenario(
        expiration_blocks=5,
        participants=[
            {"address": "slow", "weight": 1000, "latency_blocks": [4, 7], "miss": [[0, 0.0]]}
        ],
    )
    folder = tmp_path / "chain"
    result = run_scenario(s, "none", store_dir=folder).to_dict()
    for inf in read_inferences(folder):
        _, latency = draw_outcome(s.seed, request_index(inf.inference_id), "slow", 4, 7)
        if inf.status == EXPIRED:
            assert latency > 5
        elif inf.status == FINISHED:
            assert latency <= 5
    assert 0 < result["misses"] < result["inferences"]


def test_capacity_overflow_is_a_miss_and_takes_no_slot(tmp_path: Path) -> None:
    s = make_scenario(
        blocks=120,
        arrivals_per_block=1.5,
        participants=[
            {
                "address": "solo",
                "weight": 1000,
                "latency_blocks": [2, 5],
                "miss": [[0, 0.0]],
                "capacity": 2,
            }
        ],
    )
    folder = tmp_path / "chain"
    result = run_scenario(s, "none", store_dir=folder).to_dict()
    inferences = sorted(
        read_inferences(folder), key=lambda i: (i.start_block_height, i.inference_id)
    )
    releases: list[int] = []
    overflow = 0
    for inf in inferences:
        h = inf.start_block_height
        _, latency = draw_outcome(s.seed, request_index(inf.inference_id), "solo", 2, 5)
        while releases and releases[0] <= h:
            heapq.heappop(releases)
        if len(releases) >= 2:
            overflow += 1
            expected = EXPIRED if h + s.expiration_blocks <= s.blocks else STARTED
        else:
            heapq.heappush(releases, h + latency)
            expected = FINISHED if h + latency <= s.blocks else STARTED
        assert inf.status == expected, inf.inference_id
    assert overflow > 10
    assert result["misses"] == sum(1 for i in inferences if i.status == EXPIRED)


def test_capacity_pushback_declines_and_reselects(tmp_path: Path) -> None:
    s = make_scenario(
        blocks=120,
        arrivals_per_block=2.0,
        pushback=True,
        max_reselects=1,
        participants=[
            {
                "address": "x",
                "weight": 1000,
                "latency_blocks": 4,
                "miss": [[0, 0.0]],
                "capacity": 2,
            },
            {
                "address": "y",
                "weight": 1000,
                "latency_blocks": 4,
                "miss": [[0, 0.0]],
                "capacity": 2,
            },
        ],
    )
    folder = tmp_path / "chain"
    result = run_scenario(s, "none", store_dir=folder).to_dict()
    inferences = {i.inference_id: i for i in read_inferences(folder)}
    declined = [i for i in inferences.values() if is_declined(i)]
    assert declined and result["declines"] == len(declined)
    assert result["misses"] == 0  # p = 0 and overflow is pushback, not a miss
    for inf in declined:
        assert inf.end_block_height == inf.start_block_height + 1  # the executor's answer
        if "/r" not in inf.inference_id and inf.end_block_height <= s.blocks:
            retry = inferences[inf.inference_id + "/r1"]
            assert retry.start_block_height == inf.start_block_height + 1
    retries = [i for i in inferences.values() if "/r1" in i.inference_id]
    assert result["selections"] == result["requests"] + len(retries)
    # Declines are not inferences: the miss rate is over finished + expired only.
    assert result["inferences"] == result["finished"] + result["misses"]
    assert (
        result["inferences"] + result["declines"] + result["in_flight_at_end"]
        == result["selections"]
    )
    last_declined = sum(1 for i in retries if is_declined(i))
    started_last = sum(
        1
        for i in retries
        if i.status == STARTED and not is_declined(i) and i.start_block_height == s.blocks
    )
    assert last_declined <= result["unserved_requests"] <= last_declined + started_last
    assert not any("/r2" in i for i in inferences)


# governance ----------------------------------------------------------------------------------


def test_governance_changes_params_at_the_given_height() -> None:
    s = make_scenario(blocks=200)
    base = build_params(s, "none")
    schedule = parse_governance(
        [
            {
                "height": 100,
                "set": {
                    "extension_params.health_params.policy": "gonka",
                    "params.validation_params.expiration_blocks": 30,
                },
            },
            {"height": 150, "extension_params": {"cb_min_samples": 9}},
        ],
        base,
    )
    seen: dict[int, ModuleParams] = {}

    def on_block(chain: Chain, height: int) -> None:
        if height in (100, 101, 150, 151):
            seen[height] = chain.get_params()

    result = run_scenario(s, "none", store="memory", governance=schedule, on_block=on_block)
    assert seen[100].extension_params.health_params.policy == "none"
    assert seen[101].extension_params.health_params.policy == "gonka"
    assert seen[101].params.validation_params.expiration_blocks == 30
    assert seen[150].extension_params.cb_min_samples == 4
    assert seen[151].extension_params.cb_min_samples == 9
    # the patch applied to the params in force
    assert seen[151].extension_params.health_params.policy == "gonka"
    assert seen[151].params.validation_params.expiration_blocks == 30
    timeline = result.metrics["timeline"]
    assert timeline[0]["excluded_weight_share"] == 0.0  # blocks 1-100 under `none`
    assert timeline[1]["excluded_weight_share"] > 0.0  # 101-200 under gonka
    assert result.governance_heights == [100, 150]


def test_governance_cannot_select_the_oracle() -> None:
    """The oracle is the simulator's harness policy, not a chain param."""
    s = make_scenario(blocks=200)
    with pytest.raises(GovernanceError, match=r"governance\[0\].*health_params.policy='oracle'"):
        parse_governance(
            [{"height": 5, "set": {"extension_params.health_params.policy": "oracle"}}],
            build_params(s, "none"),
        )


def test_governance_errors_name_the_entry_and_rule() -> None:
    s = make_scenario()
    base = build_params(s, "gonka")
    expiry = "params.validation_params.expiration_blocks"
    with pytest.raises(
        GovernanceError, match=r"governance\[0\].*cb_miss_threshold_pct.*\[1, 100\]"
    ):
        parse_governance(
            [{"height": 5, "set": {"extension_params.cb_miss_threshold_pct": 101}}], base
        )
    with pytest.raises(GovernanceError, match=r"governance\[0\].*expiration_blocks.*> 0"):
        parse_governance([{"height": 5, "set": {expiry: 0}}], base)
    with pytest.raises(GovernanceError, match="no field 'nope'"):
        parse_governance([{"height": 5, "set": {"extension_params.nope": 1}}], base)
    with pytest.raises(GovernanceError, match="no field 'expiration_blocks'"):
        parse_governance([{"height": 5, "set": {"expiration_blocks": 3}}], base)
    with pytest.raises(GovernanceError, match="'height' must be an integer >= 1"):
        parse_governance([{"height": 0, "set": {expiry: 3}}], base)
    with pytest.raises(GovernanceError, match="not both"):
        parse_governance([{"height": 3}], base)
    with pytest.raises(GovernanceError, match="unknown key"):
        parse_governance([{"height": 3, "set": {expiry: 3}, "x": 1}], base)
    with pytest.raises(GovernanceError, match="expected a JSON list"):
        parse_governance({"height": 3}, base)
    good = "params.validation_params.downtime_good_percentage"
    decimal = parse_governance([{"height": 3, "set": {good: "0.05"}}], base)
    # The chain's shortest form (DecimalFromFloat): 0.05 -> {5, -2}.
    d = decimal[0][1].params.validation_params.downtime_good_percentage
    assert (d.value, d.exponent) == (5, -2)
    # cb_* 0 means "use the default", as upstream #942: accepted.
    zero = parse_governance([{"height": 3, "set": {"extension_params.cb_min_samples": 0}}], base)
    assert zero[0][1].extension_params.cb_min_samples == 0
    with pytest.raises(GovernanceError, match="height must be an integer in"):
        run_scenario(s, "gonka", store="memory", governance=[(s.blocks + 1, base)])


# params and errors -----------------------------------------------------------------------


def test_run_params_follow_the_scenario_and_disable_sprt_except_for_sprt() -> None:
    s = make_scenario()
    gonka = build_params(s, "gonka")
    assert gonka.params.validation_params.expiration_blocks == s.expiration_blocks
    assert gonka.params.epoch_params.epoch_length == s.epoch_length
    # The shortest PoC the chain's validation accepts (stage and validation > 0).
    assert gonka.params.epoch_params.poc_stage_duration == 1
    assert gonka.params.epoch_params.poc_validation_duration == 1
    assert not gonka.extension_params.sprt_enabled
    assert gonka.extension_params.health_params.policy == "gonka"
    sprt = build_params(s, "sprt")
    assert sprt.extension_params.sprt_enabled
    assert build_params(s, "gonka", shadow=True).extension_params.health_params.shadow


def test_bad_runs_fail_before_starting(tmp_path: Path) -> None:
    s = make_scenario()
    with pytest.raises(SimulationError, match="unknown policy 'bogus'"):
        run_scenario(s, "bogus", store="memory")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "file").write_text("x")
    with pytest.raises(SimulationError, match="not empty"):
        run_scenario(s, "none", store_dir=busy)
    with pytest.raises(SimulationError, match="leveldb store only"):
        run_scenario(s, "none", store="memory", store_dir=tmp_path / "x")


def test_sprt_deactivations_count_as_kept_out() -> None:
    s = make_scenario(blocks=300)
    result = run_scenario(s, "sprt", store="memory").to_dict()
    assert result["excluded_weight_share"] > 0
    assert result["detection_delay"]["count"] >= 1


def test_in_flight_requests_at_the_end_are_not_counted() -> None:
    s = make_scenario(blocks=30)
    r = run_scenario(s, "none", store="memory").to_dict()
    assert r["in_flight_at_end"] > 0
    assert r["inferences"] + r["in_flight_at_end"] == r["selections"]
    assert r["miss_rate"] == pytest.approx(r["misses"] / r["inferences"])


def test_degraded_period_metrics_use_the_scenario_schedule() -> None:
    s = make_scenario()
    r = run_scenario(s, "gonka", store="memory").to_dict()
    # "b" has one degraded period [60, 180), "d" one for the whole run.
    assert r["degraded_periods"] == 2
    assert r["undetected_periods"] + r["detection_delay"]["count"] == 2
    buckets = r["timeline"]
    assert [b["start"] for b in buckets] == [1, 101, 201]
    assert buckets[-1]["end"] == 240
    assert sum(b["inferences"] for b in buckets) == r["inferences"]
    assert sum(b["misses"] for b in buckets) == r["misses"]


# selection rule ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weighting", "rule"), [(False, SELECTION_BY_WEIGHT), (True, SELECTION_BY_REPUTATION)]
)
def test_reputation_weighting_reaches_the_chain(weighting: bool, rule: str) -> None:
    s = make_scenario(blocks=120)
    seen: list[bool] = []

    def on_block(chain: Chain, height: int) -> None:
        seen.append(chain.get_params().extension_params.reputation_weighting)

    result = run_scenario(
        s, "none", store="memory", reputation_weighting=weighting, on_block=on_block
    )
    assert seen == [weighting] * 120
    assert result.selection == rule and result.to_dict()["selection"] == rule
    assert (
        build_params(
            s, "gonka", reputation_weighting=weighting
        ).extension_params.reputation_weighting
        is weighting
    )


def test_selection_names_a_governance_change_of_the_rule() -> None:
    s = make_scenario(blocks=120)
    on = {"set": {"extension_params.reputation_weighting": True}}
    off = {"set": {"extension_params.reputation_weighting": False}}
    schedule = parse_governance(
        [{"height": 40, **on}, {"height": 60, **on}, {"height": 90, **off}], build_params(s, "none")
    )
    result = run_scenario(s, "none", store="memory", governance=schedule)
    assert result.selection == (
        f"{SELECTION_BY_WEIGHT}; from height 41: {SELECTION_BY_REPUTATION}; "
        f"from height 91: {SELECTION_BY_WEIGHT}"
    )


def test_run_mechanisms_are_read_from_the_built_params() -> None:
    s = make_scenario()
    for weighting, rule in ((False, SELECTION_BY_WEIGHT), (True, SELECTION_BY_REPUTATION)):
        stated = compute_run_mechanisms(s, reputation_weighting=weighting)
        assert stated["selection"] == rule
    sprt_runs = [p for p in RUN_POLICIES if build_params(s, p).extension_params.sprt_enabled]
    assert sprt_runs == ["sprt"]
    assert (
        compute_run_mechanisms(s)["sprt"]
        == "off except in sprt runs (downtime_good_percentage 0.1, downtime_bad_percentage 0.2, "
        "downtime_h_threshold 4)"
    )
