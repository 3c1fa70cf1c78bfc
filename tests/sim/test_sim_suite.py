"""The built-in scenario suite: every scenario is valid, reproducible and has its stated shape."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from keepersim.sim.generate import weight_share
from keepersim.sim.scenario import (
    ParticipantSpec,
    Scenario,
    ScenarioError,
    dump_scenario,
    get_schema,
    load_scenario,
    parse_scenario,
    save_scenario,
)
from keepersim.sim.suite import (
    MAINNET_TARGET_MISS,
    OVERLOAD_CAPACITY_RATIO,
    get_builtin_scenario,
    get_offered_load,
    get_traffic_weighted_miss,
    list_builtin_scenarios,
)

NAMES = [
    "mainnet_like",
    "steady_degraded",
    "sudden_outage",
    "flapping",
    "gradual",
    "mass_degradation",
    "sparse",
    "overload",
    "overload_pushback",
    "slow_healthy",
    "late_epoch",
    "big_node_degrades",
    "shared_outage",
    "very_sparse",
    "threshold_edge",
    "mixed_shapes",
]
SEEDS = (1, 2, 3, 17)


def indices(s: Scenario, pred: object) -> list[int]:
    assert callable(pred)
    return [i for i, p in enumerate(s.participants) if pred(p)]


def is_healthy_const(p: ParticipantSpec) -> bool:
    return len(p.miss) == 1 and p.miss[0][1] <= 0.02


def test_list() -> None:
    assert list_builtin_scenarios() == NAMES


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(ScenarioError) as info:
        get_builtin_scenario("mainnet")
    msg = str(info.value)
    assert "'mainnet'" in msg
    for name in NAMES:
        assert name in msg


def test_bad_seed() -> None:
    with pytest.raises(ScenarioError, match="seed"):
        get_builtin_scenario("sparse", -1)


@pytest.mark.parametrize("name", NAMES)
def test_common_properties(name: str, tmp_path: Path) -> None:
    s = get_builtin_scenario(name, 3)
    assert s.name == name and s.seed == 3
    assert s.description
    dumped = dump_scenario(s)
    jsonschema.Draft202012Validator(get_schema()).validate(dumped)
    assert parse_scenario(dumped, name) == s
    assert parse_scenario(json.loads(json.dumps(dumped)), name) == s
    path = tmp_path / f"{name}.json"
    save_scenario(s, path)
    assert load_scenario(path) == s
    # mainnet_like has epoch 158's fleet (279 participants, median ~4,700; the weight
    # distribution itself is checked in test_epoch158_weights.py); the others the generator's.
    mainnet = name == "mainnet_like"
    assert len(s.participants) == (279 if mainnet else 150)
    expected = (4000, 2000, 150) if name.startswith("overload") else (12000, 4000, 150)
    assert (s.blocks, s.epoch_length, s.expiration_blocks) == expected
    for p in s.participants:
        assert p.address.startswith("gonka1") and len(p.address) == 44
        assert p.weight >= 1
    weights = sorted(p.weight for p in s.participants)
    low, high = (2500, 10000) if mainnet else (5000, 20000)
    assert low <= weights[len(weights) // 2] <= high
    # Above the reputation floor: weight // 100 stays proportional in the first epoch.
    assert weights[0] >= 100


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_scenario_different_seed_different(name: str) -> None:
    a = get_builtin_scenario(name, 5)
    assert get_builtin_scenario(name, 5) == a
    assert dump_scenario(get_builtin_scenario(name, 5)) == dump_scenario(a)
    b = get_builtin_scenario(name, 6)
    assert b != a
    assert [p.weight for p in a.participants] != [p.weight for p in b.participants]
    assert a.participants[0].address != b.participants[0].address


def test_default_seed_is_1() -> None:
    assert get_builtin_scenario("flapping") == get_builtin_scenario("flapping", 1)


@pytest.mark.parametrize("seed", [*SEEDS, 4, 5, 6, 7, 8, 9, 10, 123, 9999])
def test_mainnet_like_calibration(seed: int) -> None:
    s = get_builtin_scenario("mainnet_like", seed)
    miss = get_traffic_weighted_miss(s)
    assert abs(miss - MAINNET_TARGET_MISS) <= 0.003
    assert abs(miss - 0.030) <= 0.003
    assert all(len(p.miss) == 1 for p in s.participants)
    assert all((p.latency_min, p.latency_max) == (1, 8) for p in s.participants)
    healthy = indices(s, lambda p: 0.005 <= p.miss[0][1] <= 0.02)
    degraded = indices(s, lambda p: 0.05 <= p.miss[0][1] <= 0.28)
    n = len(s.participants)
    assert len(healthy) + len(degraded) == n
    assert 3 <= len(degraded) <= 0.2 * n  # a minority (median over seeds ~12%)
    assert 0.095 <= weight_share(s, degraded) <= 0.105
    assert max(s.participants[i].miss[0][1] for i in degraded) >= 0.2


@pytest.mark.parametrize("seed", SEEDS)
def test_steady_degraded(seed: int) -> None:
    s = get_builtin_scenario("steady_degraded", seed)
    degraded = indices(s, lambda p: p.miss[0][1] >= 0.15)
    assert all(len(p.miss) == 1 for p in s.participants)
    assert all(0.15 <= s.participants[i].miss[0][1] <= 0.30 for i in degraded)
    assert 0.1425 <= weight_share(s, degraded) <= 0.1575
    assert 3 <= len(degraded) <= 0.25 * 150
    assert all(0.005 <= p.miss[0][1] <= 0.015 for p in s.participants if p.miss[0][1] < 0.15)


@pytest.mark.parametrize("seed", SEEDS)
def test_sudden_outage(seed: int) -> None:
    s = get_builtin_scenario("sudden_outage", seed)
    out = indices(s, lambda p: len(p.miss) == 3)
    assert 0.1425 <= weight_share(s, out) <= 0.1575
    assert 3 <= len(out) <= 25  # several (large-ish) nodes
    starts = set()
    for i in out:
        (_, good), (start, dark), (end, back) = s.participants[i].miss
        assert dark == 1.0 and good == back <= 0.015
        assert 300 <= end - start <= 1500 and end < s.blocks
        starts.add(start)
    assert len(starts) >= 0.8 * len(out)  # staggered
    assert all(is_healthy_const(s.participants[i]) for i in range(150) if i not in out)


@pytest.mark.parametrize("seed", SEEDS)
def test_flapping(seed: int) -> None:
    s = get_builtin_scenario("flapping", seed)
    flap = indices(s, lambda p: len(p.miss) > 1)
    assert len(flap) == 10
    for i in flap:
        miss = s.participants[i].miss
        good = miss[0][1]
        assert good <= 0.015
        bads = {p for _, p in miss[1::2]}
        assert len(bads) == 1 and 0.6 <= bads.pop() <= 1.0
        assert all(p == good for _, p in miss[2::2])
        lengths = [b - a for (a, _), (b, _) in zip(miss[1:], miss[2:], strict=False)]
        assert all(200 <= n <= 600 for n in lengths)
        assert len(miss) >= 15  # many alternations over 12000 blocks


@pytest.mark.parametrize("seed", SEEDS)
def test_gradual(seed: int) -> None:
    s = get_builtin_scenario("gradual", seed)
    ramp = indices(s, lambda p: len(p.miss) > 1)
    assert len(ramp) == 15
    for i in ramp:
        miss = s.participants[i].miss
        assert [b for b, _ in miss] == list(range(0, s.blocks, 500))
        probs = [p for _, p in miss]
        assert probs == sorted(probs)
        assert probs[0] <= 0.015 and 0.4 <= probs[-1] <= 0.6


@pytest.mark.parametrize("seed", SEEDS)
def test_mass_degradation(seed: int) -> None:
    s = get_builtin_scenario("mass_degradation", seed)
    hit = indices(s, lambda p: len(p.miss) == 3)
    share = weight_share(s, hit)
    assert 0.57 <= share <= 0.63
    for i in hit:
        (_, good), (start, bad), (end, back) = s.participants[i].miss
        assert start % s.epoch_length != 0
        assert abs(start - s.blocks / 3) <= 500
        assert end - start == 2000
        assert 0.3 <= bad <= 0.5 and good == back <= 0.015
    mid = s.participants[hit[0]].miss[1][0] + 1000
    assert get_traffic_weighted_miss(s, mid) >= 0.55 * 0.3


@pytest.mark.parametrize("seed", SEEDS)
def test_sparse(seed: int) -> None:
    s = get_builtin_scenario("sparse", seed)
    assert s.arrivals_per_block == 0.3
    degraded = indices(s, lambda p: p.miss[0][1] == 0.3)
    assert 0.095 <= weight_share(s, degraded) <= 0.105


@pytest.mark.parametrize("seed", SEEDS)
def test_overload(seed: int) -> None:
    s = get_builtin_scenario("overload", seed)
    assert s.pushback is False
    caps = [p.capacity for p in s.participants]
    assert all(c is not None and 1 <= c <= 3 for c in caps)
    assert {1, 2, 3} <= set(caps)
    assert all((p.latency_min, p.latency_max) == (4, 12) for p in s.participants)
    total_capacity = sum(c for c in caps if c is not None)
    ratio = total_capacity / get_offered_load(s)
    assert abs(ratio - OVERLOAD_CAPACITY_RATIO) <= 0.01
    degraded = indices(s, lambda p: p.miss[0][1] >= 0.2)
    assert 1 <= len(degraded) <= 15
    assert 0.038 <= weight_share(s, degraded) <= 0.042


@pytest.mark.parametrize("seed", SEEDS)
def test_overload_pushback_is_same_fleet(seed: int) -> None:
    a = get_builtin_scenario("overload", seed)
    b = get_builtin_scenario("overload_pushback", seed)
    assert b.pushback is True and b.name == "overload_pushback"
    assert b.participants == a.participants
    assert (b.arrivals_per_block, b.blocks, b.seed) == (a.arrivals_per_block, a.blocks, a.seed)
    assert dump_scenario(b)["pushback"] is True


@pytest.mark.parametrize("seed", SEEDS)
def test_slow_healthy(seed: int) -> None:
    s = get_builtin_scenario("slow_healthy", seed)
    slow = indices(s, lambda p: p.latency_max >= 30)
    degraded = indices(s, lambda p: p.miss[0][1] == 0.25)
    assert not set(slow) & set(degraded)
    assert 0.285 <= weight_share(s, slow) <= 0.315
    assert 0.076 <= weight_share(s, degraded) <= 0.084
    for i in slow:
        p = s.participants[i]
        assert p.miss == ((0, 0.01),)
        assert 10 <= p.latency_min <= 20 and 30 <= p.latency_max <= 60
    assert max(s.participants[i].latency_max for i in slow) >= 50
    assert all(
        (p.latency_min, p.latency_max) == (1, 8)
        for i, p in enumerate(s.participants)
        if i not in slow
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_late_epoch(seed: int) -> None:
    s = get_builtin_scenario("late_epoch", seed)
    late = indices(s, lambda p: len(p.miss) > 1)
    assert len(late) == 8
    q = s.epoch_length // 4
    for i in late:
        p = s.participants[i]
        for h in range(1, s.blocks + 1, 97):
            in_last_quarter = h % s.epoch_length >= s.epoch_length - q
            prob = p.get_miss_probability(h)
            assert (0.3 <= prob <= 0.5) if in_last_quarter else prob <= 0.015


@pytest.mark.parametrize("seed", SEEDS)
def test_big_node_degrades(seed: int) -> None:
    s = get_builtin_scenario("big_node_degrades", seed)
    big = max(range(150), key=lambda i: s.participants[i].weight)
    assert abs(weight_share(s, [big]) - 0.20) <= 0.005
    weights = sorted(p.weight for p in s.participants)
    assert weights[-1] > 2 * weights[-2]
    p = s.participants[big]
    assert p.miss[1] == (s.blocks // 4, 0.35)
    assert p.get_miss_probability(s.blocks // 4 - 1) <= 0.015
    assert all(is_healthy_const(q) for i, q in enumerate(s.participants) if i != big)


@pytest.mark.parametrize("seed", SEEDS)
def test_shared_outage(seed: int) -> None:
    s = get_builtin_scenario("shared_outage", seed)
    hit = indices(s, lambda p: len(p.miss) > 1)
    assert 0.38 <= weight_share(s, hit) <= 0.42
    schedules = {s.participants[i].miss[1:] for i in hit}
    assert len({tuple((b, p > 0.05) for b, p in m) for m in schedules}) == 1  # one shared failure
    bad = [(b, p) for b, p in s.participants[hit[0]].miss if p > 0.05]
    assert 2 <= len(bad) <= 4 and all(p == 0.9 for _, p in bad)
    spans = s.participants[hit[0]].miss[1:]
    for (start, p), (end, q) in zip(spans[::2], spans[1::2], strict=True):
        assert p == 0.9 and q <= 0.015 and 60 <= end - start <= 200
    assert all(is_healthy_const(q) for i, q in enumerate(s.participants) if i not in hit)


@pytest.mark.parametrize("seed", SEEDS)
def test_very_sparse(seed: int) -> None:
    s = get_builtin_scenario("very_sparse", seed)
    assert s.arrivals_per_block == 0.1
    degraded = indices(s, lambda p: p.miss[0][1] == 0.4)
    assert 0.095 <= weight_share(s, degraded) <= 0.105


@pytest.mark.parametrize("seed", SEEDS)
def test_threshold_edge(seed: int) -> None:
    s = get_builtin_scenario("threshold_edge", seed)
    below = indices(s, lambda p: 0.03 <= p.miss[0][1] <= 0.05)
    above = indices(s, lambda p: 0.06 <= p.miss[0][1] <= 0.09)
    assert 0.14 <= weight_share(s, below) <= 0.16
    assert 0.095 <= weight_share(s, above) <= 0.105
    rest = set(range(len(s.participants))) - set(below) - set(above)
    assert all(is_healthy_const(s.participants[i]) for i in rest)


@pytest.mark.parametrize("seed", SEEDS)
def test_mixed_shapes(seed: int) -> None:
    s = get_builtin_scenario("mixed_shapes", seed)
    hit = indices(s, lambda p: len(p.miss) > 1)
    epochs = -(-s.blocks // s.epoch_length)
    assert 12 <= len(hit) <= 12 * epochs
    peaks = sorted(max(p for _, p in s.participants[i].miss) for i in hit)
    assert peaks[0] >= 0.4 and peaks[-1] == 1.0
    for i in hit:  # every degradation ends healthy, inside the run
        last_from, last_p = s.participants[i].miss[-1]
        assert last_p <= 0.015 and last_from < s.blocks + s.epoch_length
