"""Properties of every policy under random outcome sequences (hypothesis).

1. With a fallback or a panic enabled, the pool is never empty.
2. The chain's memoized selection table equals one computed from fresh verdicts at every height
   (every verdict's valid_until is right).
3. Same inputs, same app hashes and transitions: twice on LevelDB and once in memory, and once
   more with the in-memory hints (entries carried between blocks, queue floors) forgotten
   before every other block, as after a reopen.

Weights are >= 2^17: the pipeline floors ``weight * factor_num // factor_den`` and drops 0, so
a small weight times a small factor (trin-multiplicative's 1/2^16) would vanish (see the report).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_helpers import MODEL, make_params, make_policy_genesis

from keepersim.chain import Chain
from keepersim.keeper.policies.base import PolicyReader
from keepersim.keeper.selection import (
    SelectionTable,
    compute_selection_table,
    get_candidates,
    get_pipeline_rules,
)
from keepersim.store.cache import forget_all_derived
from keepersim.types.events import HealthTransition
from keepersim.types.messages import MsgFinishInference, MsgStartInference
from keepersim.types.params import validate_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgDeclineInference

EXPIRY = 6
ADDRESSES = ("p0", "p1", "p2", "p3", "p4")


def make_policy_params(name: str) -> ModuleParams:
    """Params that make each policy move fast, with its fallback or panic on."""
    policy = "windowed" if name.startswith("windowed") else name
    params = make_params(policy, expiration_blocks=EXPIRY, epoch_length=40)
    h = params.extension_params.health_params
    h.consecutive.failure_threshold = 2
    h.consecutive.success_threshold = 1
    h.consecutive.timeout_blocks = 4
    h.consecutive.fallback_when_all_open = True
    h.trin_additive.window_blocks = 30
    h.trin_additive.miss_delta = -60
    h.trin_additive.fallback_when_all_zero = True
    h.trin_multiplicative.history = 8
    h.trin_multiplicative.recency_blocks = 10
    w = h.windowed
    w.min_samples = 2
    w.initial_cooldown_blocks = 5
    w.max_cooldown_blocks = 40
    w.overdue_min_blocks = 2
    w.overdue_factor = 1
    w.max_probes = 1
    w.ramp_blocks = 10
    w.max_excluded_weight_pct = 100
    # "windowed-panic": panic below 50% admitted weight; "windowed": only the fallback.
    w.panic_healthy_weight_pct = 50 if name == "windowed-panic" else 0
    params.extension_params.cb_initial_cooldown_blocks = 5
    params.extension_params.cb_max_cooldown_blocks = 40
    validate_params(params)
    return params


POLICIES = (
    "gonka",
    "consecutive",
    "trin-additive",
    "trin-multiplicative",
    "windowed",
    "windowed-panic",
)


@dataclass(frozen=True)
class Step:
    starts: tuple[int, ...]
    finishes: tuple[int, ...]
    declines: tuple[int, ...]
    wait: int


steps_strategy = st.lists(
    st.builds(
        Step,
        starts=st.lists(st.integers(0, len(ADDRESSES) - 1), max_size=4).map(tuple),
        finishes=st.lists(st.integers(0, 50), max_size=3).map(tuple),
        declines=st.lists(st.integers(0, 50), max_size=1).map(tuple),
        wait=st.integers(0, 4),
    ),
    min_size=5,
    max_size=25,
)
weights_strategy = st.lists(st.integers(1 << 17, 1 << 20), min_size=5, max_size=5)


def compute_fresh_table(chain: Chain) -> SelectionTable:
    """The selection table from verdicts computed now, without the chain's memo."""
    with chain.read() as keeper:
        params = keeper.get_extension_params()
        policy = chain.get_policy_object(params.health_params.policy)
        reader = PolicyReader(keeper, policy)
        candidates = get_candidates(keeper, MODEL, chain.height)
        healths = [policy.get_health(reader, c.address, chain.height) for c in candidates]
        return compute_selection_table(
            candidates,
            healths,
            height=chain.height,
            model=MODEL,
            rules=get_pipeline_rules(policy, params),
        )


def run(
    chain: Chain, steps: list[Step], *, check: bool, cold: bool = False, check_every: int = 1
) -> list[tuple[bytes, tuple[object, ...]]]:
    """Deliver the steps; return (app hash, transitions) per block; check the tables if asked
    (at every ``check_every``-th height only: verdicts then lapse several steps between two
    tables); ``cold``: forget the policy context's in-memory hints before every other block (as
    after a reopen; the hints then rebuilt from the store carry on into the next block)."""
    pending: list[tuple[int, MsgStartInference]] = []
    out: list[tuple[bytes, tuple[object, ...]]] = []
    serial = 0

    def deliver(msgs: list[object]) -> None:
        if cold and chain.height % 2 == 0:
            forget_all_derived()
        result = chain.deliver_block(msgs, strict=True)  # type: ignore[arg-type]
        transitions = tuple(e for e in result.events if isinstance(e, HealthTransition))
        out.append((result.app_hash, transitions))
        if check and chain.height % check_every == 0:
            table = chain.get_selection_table(MODEL)
            assert len(table.addresses) >= 1
            assert table.total > 0
            fresh = compute_fresh_table(chain)
            assert (table.addresses, table.cumulative, table.excluded, table.panic) == (
                fresh.addresses,
                fresh.cumulative,
                fresh.excluded,
                fresh.panic,
            )
            chain.get_random_executor(MODEL, f"r{chain.height}")

    for step in steps:
        height = chain.height + 1
        live = [(h, s) for h, s in pending if h + EXPIRY >= height]
        msgs: list[object] = []
        used: set[int] = set()
        for i in step.finishes:
            if live and i % len(live) not in used:
                used.add(i % len(live))
                start = live[i % len(live)][1]
                msgs.append(
                    MsgFinishInference(
                        creator=start.assigned_to,
                        inference_id=start.inference_id,
                        executed_by=start.assigned_to,
                    )
                )
        for i in step.declines:
            if live and i % len(live) not in used:
                used.add(i % len(live))
                start = live[i % len(live)][1]
                msgs.append(
                    MsgDeclineInference(creator=start.assigned_to, inference_id=start.inference_id)
                )
        pending = [p for j, p in enumerate(live) if j not in used]
        for index in step.starts:
            serial += 1
            start = MsgStartInference(
                creator="ta",
                inference_id=f"i{serial}",
                assigned_to=ADDRESSES[index],
                model=MODEL,
            )
            msgs.append(start)
            pending.append((height, start))
        deliver(msgs)
        for _ in range(step.wait):
            deliver([])
    return out


def open_chain(name: str, weights: list[int], folder: Path | None) -> Chain:
    genesis = make_policy_genesis(
        make_policy_params(name), dict(zip(ADDRESSES, weights, strict=True))
    )
    if folder is None:
        return Chain.open(memory=True, genesis=genesis)
    return Chain.open(folder, genesis=genesis)


@pytest.mark.parametrize("name", POLICIES)
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(steps=steps_strategy, weights=weights_strategy)
def test_pool_never_empty_and_memo_is_exact(
    name: str, steps: list[Step], weights: list[int]
) -> None:
    with open_chain(name, weights, None) as chain:
        run(chain, steps, check=True)


@pytest.mark.parametrize("name", ("trin-additive", "trin-multiplicative", "windowed"))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps_strategy, weights=weights_strategy)
def test_memo_is_exact_when_tables_are_rare(
    name: str, steps: list[Step], weights: list[int]
) -> None:
    """Tables asked for every 5th height only: lapsed verdicts follow several steps of their
    ``then`` (or of get_health) at once, and handed-over verdicts wait through heights."""
    with open_chain(name, weights, None) as chain:
        run(chain, steps, check=True, check_every=5)


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps_strategy, weights=weights_strategy)
def test_deterministic_on_leveldb_and_memory(
    name: str, steps: list[Step], weights: list[int]
) -> None:
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(2):
            with open_chain(name, weights, Path(tmp) / f"db{i}") as chain:
                runs.append(run(chain, steps, check=False))
                # What commits took from memory (old values of rewritten keys) was right.
                assert chain.verify_app_hash()
    with open_chain(name, weights, None) as chain:
        runs.append(run(chain, steps, check=False))
    with open_chain(name, weights, None) as chain:
        runs.append(run(chain, steps, check=False, cold=True))
        assert chain.verify_app_hash()
    assert runs[0] == runs[1] == runs[2] == runs[3]


def test_the_random_sequences_do_move_every_policy() -> None:
    """The properties would be vacuous if no transitions happened: check a fixed busy sequence."""
    steps = [Step(starts=(0, 0, 1), finishes=(), declines=(), wait=2) for _ in range(12)]
    steps += [Step(starts=(2,), finishes=(0, 1), declines=(0,), wait=1) for _ in range(12)]
    for name in POLICIES:
        with open_chain(name, [1 << 17] * 5, None) as chain:
            transitions = [t for _, ts in run(chain, steps, check=True) for t in ts]
            if name.startswith("trin"):
                # Score policies have no transitions; their weights must have moved instead.
                table = chain.get_selection_table(MODEL)
                assert table.cumulative != tuple((i + 1) << 17 for i in range(len(table.addresses)))
            else:
                assert transitions, name
