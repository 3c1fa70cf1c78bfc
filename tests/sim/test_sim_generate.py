"""generate_scenario: knobs, validation, determinism, addresses."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from keepersim.sim.generate import (
    generate_scenario,
    make_address,
    select_by_weight_share,
    weight_share,
)
from keepersim.sim.scenario import dump_scenario, parse_scenario
from keepersim.types.bech32 import CHARSET as BECH32_CHARSET
from keepersim.types.bech32 import is_valid_bech32 as bech32_verify


def test_bech32_reference_vector() -> None:
    # BIP-173 valid test vectors; one changed character breaks the checksum.
    assert bech32_verify("abcdef1qpzry9x8gf2tvdw0s3jn54khce6mua7lmqqqxw")
    assert bech32_verify("a12uel5l")
    assert not bech32_verify("abcdef1qpzry9x8gf2tvdw0s3jn54khce6mua7lmqqqxx")
    assert not bech32_verify("a12uel5")


def test_addresses_look_like_gonka_accounts() -> None:
    addresses = {make_address("n", 1, i) for i in range(500)}
    assert len(addresses) == 500
    for a in addresses:
        assert a.startswith("gonka1")
        assert len(a) == len("gonka1") + 38
        assert set(a[6:]) <= set(BECH32_CHARSET)
        assert bech32_verify(a)
    assert make_address("n", 1, 0) == make_address("n", 1, 0)
    assert make_address("n", 1, 0) != make_address("n", 2, 0)
    assert make_address("n", 1, 0) != make_address("m", 1, 0)


def test_defaults() -> None:
    s = generate_scenario("g", 5)
    assert s.name == "g" and s.seed == 5
    assert len(s.participants) == 150
    assert (s.blocks, s.epoch_length, s.expiration_blocks) == (12000, 4000, 150)
    assert s.arrivals_per_block == 4.6
    assert all((p.latency_min, p.latency_max) == (1, 8) for p in s.participants)
    assert all(p.capacity is None for p in s.participants)
    weights = sorted(p.weight for p in s.participants)
    assert 6000 <= weights[75] <= 16000  # median ~10,000
    degraded = [i for i, p in enumerate(s.participants) if p.miss[0][1] >= 0.15]
    assert 0.095 <= weight_share(s, degraded) <= 0.105
    for i, p in enumerate(s.participants):
        assert len(p.miss) == 1
        lo, hi = (0.15, 0.3) if i in degraded else (0.005, 0.02)
        assert lo <= p.miss[0][1] <= hi
    assert parse_scenario(dump_scenario(s), "gen") == s


def test_outages() -> None:
    s = generate_scenario("o", 2, degraded_share=0.0, outage_share=0.2)
    outages = [i for i, p in enumerate(s.participants) if len(p.miss) > 1]
    assert 0.19 <= weight_share(s, outages) <= 0.21
    starts = set()
    for i in outages:
        (b0, p0), (start, p1), (end, p2) = s.participants[i].miss
        assert b0 == 0 and p1 == 1.0 and p0 == p2 <= 0.02
        assert 300 <= end - start <= 1500
        assert s.blocks // 10 <= start and end <= s.blocks * 0.8
        starts.add(start)
    assert len(starts) > len(outages) // 2  # staggered


def test_outages_fit_tiny_runs() -> None:
    for blocks in (1, 2, 10, 100):
        s = generate_scenario(
            "tiny", 1, participants=5, blocks=blocks, outage_share=0.9, degraded_share=0.0
        )
        assert parse_scenario(dump_scenario(s), "tiny") == s


def test_capacity_latency_and_shares() -> None:
    s = generate_scenario(
        "c",
        1,
        participants=40,
        capacity=3,
        latency=(4, 12),
        degraded_share=0.5,
        degraded_miss=(0.4, 0.4),
        healthy_miss=(0.0, 0.0),
        arrivals_per_block=7,
    )
    assert len(s.participants) == 40
    assert all(
        p.capacity == 3 and (p.latency_min, p.latency_max) == (4, 12) for p in s.participants
    )
    assert {p.miss[0][1] for p in s.participants} == {0.0, 0.4}
    assert s.arrivals_per_block == 7.0 and isinstance(s.arrivals_per_block, float)


def test_share_changes_keep_other_draws() -> None:
    a = generate_scenario("k", 9, degraded_share=0.0)
    b = generate_scenario("k", 9, degraded_share=0.3)
    assert [p.weight for p in a.participants] == [p.weight for p in b.participants]
    changed = [
        i for i, (p, q) in enumerate(zip(a.participants, b.participants, strict=True)) if p != q
    ]
    assert changed and all(b.participants[i].miss[0][1] >= 0.15 for i in changed)


def test_deterministic() -> None:
    assert generate_scenario("d", 4) == generate_scenario("d", 4)
    assert generate_scenario("d", 4) != generate_scenario("d", 5)


def test_select_by_weight_share() -> None:
    rng = np.random.default_rng(0)
    weights = [int(w) for w in rng.integers(1, 1000, size=200)]
    total = sum(weights)
    assert select_by_weight_share(np.random.default_rng(1), weights, 0.0) == []
    assert select_by_weight_share(np.random.default_rng(1), weights, 1.0) == list(range(200))
    for share in (0.05, 0.15, 0.5, 0.9):
        chosen = select_by_weight_share(np.random.default_rng(1), weights, share)
        held = sum(weights[i] for i in chosen) / total
        assert share * 0.95 <= held <= share * 1.05
        assert chosen == sorted(set(chosen))
    excluded = set(range(100))
    chosen = select_by_weight_share(np.random.default_rng(1), weights, 0.3, exclude=excluded)
    assert not excluded & set(chosen)
    assert select_by_weight_share(np.random.default_rng(1), weights, 1.0, exclude=excluded) == list(
        range(100, 200)
    )


def test_select_by_weight_share_size_bias() -> None:
    counts: dict[float, list[int]] = {0.0: [], 1.0: []}
    for seed in range(30):
        weights = generate_scenario("b", seed, degraded_share=0.0).participants
        ws = [p.weight for p in weights]
        for bias in counts:
            rng = np.random.default_rng(seed)
            counts[bias].append(len(select_by_weight_share(rng, ws, 0.15, size_bias=bias)))
    assert sum(counts[1.0]) < 0.75 * sum(counts[0.0])


def test_selection_bias_knob() -> None:
    plain = generate_scenario("s", 3, degraded_share=0.3)
    biased = generate_scenario("s", 3, degraded_share=0.3, selection_bias=1.0)
    assert [p.weight for p in plain.participants] == [p.weight for p in biased.participants]
    n_plain = sum(p.miss[0][1] >= 0.15 for p in plain.participants)
    n_biased = sum(p.miss[0][1] >= 0.15 for p in biased.participants)
    assert n_biased < n_plain


@pytest.mark.parametrize(
    ("kwargs", "knob"),
    [
        ({"name": ""}, "name"),
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"participants": 0}, "participants"),
        ({"participants": True}, "participants"),
        ({"blocks": 0}, "blocks"),
        ({"epoch_length": -4}, "epoch_length"),
        ({"expiration_blocks": 0}, "expiration_blocks"),
        ({"arrivals_per_block": -0.1}, "arrivals_per_block"),
        ({"arrivals_per_block": float("nan")}, "arrivals_per_block"),
        ({"degraded_share": 1.1}, "degraded_share"),
        ({"outage_share": -0.1}, "outage_share"),
        ({"degraded_share": 0.6, "outage_share": 0.6}, "degraded_share + outage_share"),
        ({"degraded_miss": (0.3, 0.2)}, "degraded_miss"),
        ({"degraded_miss": (0.3,)}, "degraded_miss"),
        ({"healthy_miss": (0.0, 1.2)}, "healthy_miss"),
        ({"capacity": 0}, "capacity"),
        ({"latency": (0, 3)}, "latency"),
        ({"latency": (5, 3)}, "latency"),
        ({"latency": (1.5, 3)}, "latency"),
        ({"selection_bias": -1}, "selection_bias"),
    ],
)
def test_knob_validation(kwargs: dict[str, Any], knob: str) -> None:
    args: dict[str, Any] = {"name": "v", "seed": 1}
    args.update(kwargs)
    with pytest.raises(ValueError, match=re.escape(f"generate_scenario: {knob} must")):
        generate_scenario(**args)
