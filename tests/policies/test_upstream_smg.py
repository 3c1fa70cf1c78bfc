"""SMG's consecutive-failure breaker against SMG's own unit tests, through ConsecutiveBreakers.

Ported from the ``#[cfg(test)] mod tests`` of ``model_gateway/src/worker/circuit_breaker.rs``
in smg-project/smg at commit 28590879920fb6d7b5e6e786438439f46b0f7600 (SRC below). Time is in
blocks, one block per millisecond of the Rust tests: ``timeout_duration: 100 ms`` is
``timeout_blocks = 100`` and ``thread::sleep(150 ms)`` is reading 150 heights later, since SMG's
``elapsed >= timeout`` is ``height >= opened_at_block + timeout_blocks`` here; the default
config (5 failures, 2 successes, 30 s) is 5 / 2 / 30000 blocks. ``cb.state()`` is
``state(height, address)``, which like SMG's moves a timed-out OPEN breaker to HALF_OPEN as it
reads it. The store is real LevelDB; a hypothesis test then checks the breakers against a
restatement of SMG's struct.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_helpers import Net, make_params, make_policy_genesis

from keepersim.chain import Chain
from keepersim.keeper.keeper import Keeper
from keepersim.keeper.policies.consecutive import ConsecutiveBreaker
from keepersim.keeper.policies.consecutive_api import ConsecutiveBreakers
from keepersim.module.genesis import init_genesis
from keepersim.store.buffer import BlockBuffer
from keepersim.store.leveldb import LevelDBBackend
from keepersim.store.memory import MemoryBackend
from keepersim.types import keys
from keepersim.types.events import HealthTransition
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.health_pb2 import OPEN, ConsecutiveEntry, PolicyStateEntry

SRC = "smg-project/smg 28590879 model_gateway/src/worker/circuit_breaker.rs"
W = "http://worker-1:8000"
T0 = 10  # the height of the tests' first call

Make = Callable[..., ConsecutiveBreakers]


def make_smg_params(
    failure_threshold: int = 5, success_threshold: int = 2, timeout_blocks: int = 30_000
) -> ModuleParams:
    params = make_params("consecutive")
    c = params.extension_params.health_params.consecutive
    c.failure_threshold = failure_threshold
    c.success_threshold = success_threshold
    c.timeout_blocks = timeout_blocks
    return params


def open_breakers(backend: LevelDBBackend | MemoryBackend, **config: int) -> ConsecutiveBreakers:
    keeper = Keeper(BlockBuffer(backend))
    init_genesis(keeper, make_policy_genesis(make_smg_params(**config), {W: 100}))
    return ConsecutiveBreakers.open(keeper)


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Make]:
    """``make(**config)``: breakers over a fresh LevelDB store with SMG's config fields."""
    backends: list[LevelDBBackend] = []

    def build(**config: int) -> ConsecutiveBreakers:
        backend = LevelDBBackend(tmp_path / f"db{len(backends)}")
        backends.append(backend)
        return open_breakers(backend, **config)

    yield build
    for backend in backends:
        backend.close()


def transitions(cb: ConsecutiveBreakers) -> list[tuple[str, str, str]]:
    return [
        (e.address, e.from_state, e.to_state)
        for e in cb.ctx.get_block_keeper().events
        if isinstance(e, HealthTransition)
    ]


def test_transitions_name_the_worker_and_both_states(make: Make) -> None:
    """SRC transition_logs_name_the_worker_and_both_states: each transition names the worker and
    both states; a success while open is counted and changes nothing. (SMG's zero timeout is one
    block: keepersim's timeout is at least 1.)"""
    cb = make(failure_threshold=1, success_threshold=1, timeout_blocks=1)
    cb.record_failure(T0, W)
    assert cb.state(T0 + 1, W) == "half_open"
    cb.record_success(T0 + 1, W)
    assert cb.state(T0 + 1, W) == "closed"
    cb.force_open(T0 + 1, W)
    cb.record_success(T0 + 1, W)
    assert cb.get_entry(W).state == OPEN and cb.total_successes(W) == 2
    assert transitions(cb) == [
        (W, "closed", "open"),
        (W, "open", "half_open"),
        (W, "half_open", "closed"),
        (W, "closed", "open"),
    ]


def test_circuit_breaker_initial_state(make: Make) -> None:
    """SRC test_circuit_breaker_initial_state."""
    cb = make()
    assert cb.state(T0, W) == "closed" and cb.can_execute(T0, W)
    assert (cb.consecutive_failures(W), cb.consecutive_successes(W)) == (0, 0)


def test_circuit_opens_on_threshold(make: Make) -> None:
    """SRC test_circuit_opens_on_threshold: the failure streak survives the move to open (the
    counter keepersim zeroed before)."""
    cb = make(failure_threshold=3)
    assert cb.state(T0, W) == "closed"
    cb.record_failure(T0, W)
    assert cb.state(T0, W) == "closed"
    cb.record_failure(T0, W)
    assert cb.state(T0, W) == "closed"
    cb.record_failure(T0, W)
    assert cb.state(T0, W) == "open" and not cb.can_execute(T0, W)
    assert cb.consecutive_failures(W) == 3


def test_circuit_half_open_after_timeout(make: Make) -> None:
    """SRC test_circuit_half_open_after_timeout (100 ms timeout, 150 ms sleep)."""
    cb = make(failure_threshold=1, timeout_blocks=100)
    cb.record_failure(T0, W)
    assert cb.state(T0, W) == "open"
    assert cb.state(T0 + 99, W) == "open"
    assert cb.state(T0 + 150, W) == "half_open" and cb.can_execute(T0 + 150, W)
    assert (cb.consecutive_failures(W), cb.consecutive_successes(W)) == (0, 0)


def test_circuit_closes_on_success_threshold(make: Make) -> None:
    """SRC test_circuit_closes_on_success_threshold (50 ms timeout, 100 ms sleep)."""
    cb = make(failure_threshold=1, success_threshold=2, timeout_blocks=50)
    cb.record_failure(T0, W)
    assert cb.state(T0, W) == "open"
    h = T0 + 100
    assert cb.state(h, W) == "half_open"
    cb.record_success(h, W)
    assert cb.state(h, W) == "half_open" and cb.consecutive_successes(W) == 1
    cb.record_success(h, W)
    assert cb.state(h, W) == "closed" and cb.can_execute(h, W)
    assert (cb.consecutive_failures(W), cb.consecutive_successes(W)) == (0, 0)


def test_circuit_reopens_on_half_open_failure(make: Make) -> None:
    """SRC test_circuit_reopens_on_half_open_failure; the timeout starts over at the reopening."""
    cb = make(failure_threshold=1, timeout_blocks=50)
    cb.record_failure(T0, W)
    assert cb.state(T0, W) == "open"
    h = T0 + 100
    assert cb.state(h, W) == "half_open"
    cb.record_failure(h, W)
    assert cb.state(h, W) == "open" and not cb.can_execute(h, W)
    assert cb.consecutive_failures(W) == 1
    assert cb.state(h + 49, W) == "open" and cb.state(h + 50, W) == "half_open"


def test_success_resets_failure_count(make: Make) -> None:
    """SRC test_success_resets_failure_count: a success while closed counts in the success
    streak (keepersim counted it only while half-open before)."""
    cb = make(failure_threshold=3)
    cb.record_failure(T0, W)
    cb.record_failure(T0, W)
    assert cb.consecutive_failures(W) == 2
    cb.record_success(T0, W)
    assert (cb.consecutive_failures(W), cb.consecutive_successes(W)) == (0, 1)
    cb.record_failure(T0, W)
    cb.record_failure(T0, W)
    assert cb.state(T0, W) == "closed"
    assert (cb.consecutive_failures(W), cb.consecutive_successes(W)) == (2, 0)


def test_manual_reset(make: Make) -> None:
    """SRC test_manual_reset."""
    cb = make(failure_threshold=1)
    cb.record_failure(T0, W)
    assert cb.state(T0, W) == "open"
    cb.reset(T0, W)
    assert cb.state(T0, W) == "closed"
    assert (cb.consecutive_failures(W), cb.consecutive_successes(W)) == (0, 0)
    assert transitions(cb)[-1] == (W, "open", "closed")


def test_force_open(make: Make) -> None:
    """SRC test_force_open; forcing an open breaker leaves its timeout as it was (SMG's
    transition_to does nothing when the state does not change)."""
    cb = make(timeout_blocks=50)
    assert cb.state(T0, W) == "closed"
    cb.force_open(T0, W)
    assert cb.state(T0, W) == "open" and not cb.can_execute(T0, W)
    cb.force_open(T0 + 30, W)
    assert cb.get_entry(W).opened_at_block == T0
    assert cb.state(T0 + 50, W) == "half_open"


def test_stats(make: Make) -> None:
    """SRC test_stats: open with both failures still in the streak."""
    cb = make(failure_threshold=2)
    cb.record_success(T0, W)
    cb.record_failure(T0, W)
    cb.record_failure(T0, W)
    assert cb.stats(T0, W) == {
        "state": "open",
        "consecutive_failures": 2,
        "consecutive_successes": 0,
        "total_failures": 2,
        "total_successes": 1,
    }


def test_clone(make: Make) -> None:
    """SRC test_clone: a copy of a breaker's state does not move with the breaker (here: the
    entry read from the store)."""
    cb = make()
    cb.record_failure(T0, W)
    copy = cb.get_entry(W)
    assert copy.consecutive_failures == 1
    cb.record_failure(T0, W)
    assert cb.consecutive_failures(W) == 2
    assert copy.consecutive_failures == 1


def test_thread_safety(make: Make) -> None:
    """SRC test_thread_safety: 10 x 100 failures all counted. Blocks run one at a time, so
    this is the count without the threads."""
    cb = make()
    for i in range(1000):
        cb.record_failure(T0 + i // 100, W)
    assert cb.total_failures(W) == 1000
    assert cb.consecutive_failures(W) == 1000  # open since the 5th, every one counted


# on the chain


def test_open_entry_imported_without_its_queue_key_goes_half_open(tmp_path: Path) -> None:
    """An OPEN entry imported through genesis without its queue key goes half-open at its
    timeout (before, it stayed open for good)."""
    params = make_smg_params(failure_threshold=3, timeout_blocks=6)
    genesis = make_policy_genesis(params, {W: 100, "b": 100})
    entry = ConsecutiveEntry(
        address=W, state=OPEN, opened_at_block=0, half_open_at_block=6, consecutive_failures=3
    )
    key = keys.POLICY_STATE + ConsecutiveBreaker.prefix + W.encode()
    genesis.keepersim.policy_state.append(
        PolicyStateEntry(key=key, value=entry.SerializeToString())
    )
    with Chain.open(tmp_path / "a", genesis=genesis) as chain:
        net = Net(chain)
        while net.height < 5:
            net.block()
        assert W not in net.admitted()
        net.block()
        view = net.state(W)
        assert (view["state"], view["consecutive_failures"]) == ("half_open", 0)
        assert W in net.admitted()


def test_end_block_moves_open_to_half_open_as_a_state_read_would(make: Make) -> None:
    """The chain's end block (process_timeouts) and SMG's state() check do the same move."""
    a = make(failure_threshold=1, timeout_blocks=20)
    b = make(failure_threshold=1, timeout_blocks=20)
    for cb in (a, b):
        cb.record_failure(T0, W)
        cb.record_failure(T0 + 1, W)  # a late failure while open: counted
        assert cb.consecutive_failures(W) == 2
    a.process_timeouts(T0 + 19)
    assert a.get_entry(W).state == OPEN
    a.process_timeouts(T0 + 20)
    assert b.state(T0 + 20, W) == "half_open"
    assert a.get_entry(W) == b.get_entry(W)


# the breakers against a restatement of SMG's struct


@dataclass
class SmgModel:
    """SMG's CircuitBreaker, restated with heights for its clock."""

    failure_threshold: int
    success_threshold: int
    timeout: int
    state: str = "closed"
    failures: int = 0
    successes: int = 0
    total_failures: int = 0
    total_successes: int = 0
    changed_at: int = 0

    def check(self, now: int) -> str:
        if self.state == "open" and now - self.changed_at >= self.timeout:
            self.state, self.changed_at, self.failures, self.successes = "half_open", now, 0, 0
        return self.state

    def transition(self, new: str, now: int) -> None:
        if new == self.state:
            return
        self.state, self.changed_at = new, now
        self.successes = 0
        if new != "open":
            self.failures = 0

    def success(self, now: int) -> None:
        self.total_successes += 1
        self.failures = 0
        self.successes += 1
        if self.state == "half_open" and self.successes >= self.success_threshold:
            self.transition("closed", now)

    def failure(self, now: int) -> None:
        self.total_failures += 1
        self.successes = 0
        self.failures += 1
        if (self.state == "closed" and self.failures >= self.failure_threshold) or (
            self.state == "half_open"
        ):
            self.transition("open", now)

    def reset(self, now: int) -> None:
        self.transition("closed", now)
        self.failures = self.successes = 0


OPS = ("success", "failure", "state", "reset", "force_open")


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(1, 8),
    st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 5)), max_size=60),
)
def test_breakers_match_smg(
    failure_threshold: int, success_threshold: int, timeout: int, ops: list[tuple[str, int]]
) -> None:
    """Any sequence of results, state checks, resets and forced openings (heights moving on by
    0-5 between calls) leaves the same state and counters as SMG's breaker."""
    cb = open_breakers(
        MemoryBackend(),
        failure_threshold=failure_threshold,
        success_threshold=success_threshold,
        timeout_blocks=timeout,
    )
    model = SmgModel(failure_threshold, success_threshold, timeout)
    height = T0
    for op, step in ops:
        height += step
        if op == "success":
            cb.record_success(height, W)
            model.success(height)
        elif op == "failure":
            cb.record_failure(height, W)
            model.failure(height)
        elif op == "state":
            assert cb.state(height, W) == model.check(height)
        elif op == "reset":
            cb.reset(height, W)
            model.reset(height)
        else:
            cb.force_open(height, W)
            model.transition("open", height)
        entry = cb.get_entry(W)
        assert (
            {0: "closed", 1: "open", 2: "half_open"}[entry.state],
            entry.consecutive_failures,
            entry.consecutive_successes,
            entry.total_failures,
            entry.total_successes,
        ) == (
            model.state,
            model.failures,
            model.successes,
            model.total_failures,
            model.total_successes,
        )
        if model.state == "open":
            assert entry.half_open_at_block == model.changed_at + timeout
