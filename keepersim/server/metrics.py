"""Prometheus metrics of a keepersim server, one :class:`CollectorRegistry` per app.

Families (names follow the SMG circuit-breaker metrics: ``_state`` with -1 once removed,
``_transitions_total``, ``_outcomes_total``):

``keepersim_policy_state{participant,policy}``
    The participant's health-policy state as a number (:data:`STATE_CODES`): 0 healthy (also
    ``closed``, ``scored``), 1 excluded (``open``, ``zero``), 2 probe (``half_open``,
    ``probe_full``), 3 ramping, 4 any other state name. -1 once the participant is out of the
    selection pool for the rest of the epoch: not a member of the epoch group any more, or
    declared INACTIVE by SPRT. Updated from the ``HealthTransition`` events of each block and
    re-read from the chain at start-up, at every epoch settlement and when the policy changes.
``keepersim_policy_transitions_total{policy,from,to}``
    Health transitions (``HealthTransition`` events).
``keepersim_outcomes_total{outcome}``
    ``success`` (an inference finished), ``miss`` (expired), ``neutral`` (declined: pushback).
``keepersim_selections_total`` / ``keepersim_fallback_selections_total``
    Executors selected (``get_random_executor`` answers and scenario-runner selections), and
    those drawn from the unfiltered list because the health gate left nobody (fallback).
``keepersim_cache_events_total{cache,event}``
    The single-flight caches' events (``hit``, ``recompute``, ``stale``, ``cold_wait``,
    ``unavailable``, ``refresh_failed``), from the cache's ``on_event`` hook.
``keepersim_block_processing_seconds``
    Histogram of ``deliver_block`` wall time (begin block, messages, end block, commit).
``keepersim_height``
    Last committed height.
``keepersim_runner_up``
    1 unless the runner driving the chain failed; 0 after a failure (the chain stays at
    ``keepersim_height``). A runner that finished its last block, a stopped one and a chain with
    no runner (blocks posted) are 1.
``keepersim_runner_failures_total``
    Runner failures (a bad trace line, a block that failed, a scenario error).

All updates are thread-safe (prometheus-client locks per metric); block updates come from the
thread that delivered the block.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from keepersim.server.cache import CACHE_EVENTS
from keepersim.types.events import (
    EpochSettled,
    HealthTransition,
    InferenceDeclined,
    InferenceExpired,
    InferenceFinished,
    ParticipantDeactivated,
)
from keepersim.types.messages import ACTIVE

if TYPE_CHECKING:
    from keepersim.chain import BlockResult, Chain

__all__ = [
    "CONTENT_TYPE",
    "OUTCOMES",
    "REMOVED",
    "STATE_CODES",
    "ServerMetrics",
    "get_state_code",
]

CONTENT_TYPE = CONTENT_TYPE_LATEST
#: Value of ``keepersim_policy_state`` for a participant out of the pool (SMG: removed worker).
REMOVED = -1
#: Policy state name -> ``keepersim_policy_state`` value (shared by every built-in policy).
STATE_CODES: dict[str, int] = {
    "healthy": 0,
    "closed": 0,
    "scored": 0,
    "excluded": 1,
    "open": 1,
    "zero": 1,
    "probe": 2,
    "half_open": 2,
    "probe_full": 2,
    "ramping": 3,
}
OTHER_STATE = 4
OUTCOMES = ("success", "miss", "neutral")
#: Caches whose events are exported (label ``cache``).
CACHE_NAMES = ("selection", "reputation")
BLOCK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


def get_state_code(state: str) -> int:
    """``keepersim_policy_state`` value of a policy state name (4 for an unknown name)."""
    return STATE_CODES.get(state, OTHER_STATE)


class ServerMetrics:
    """The metric families of one server, in a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.policy_state = Gauge(
            "keepersim_policy_state",
            "Health-policy state (0 healthy, 1 excluded, 2 probe, 3 ramping, 4 other; "
            "-1 out of the pool: removed from the group or INACTIVE)",
            ["participant", "policy"],
            registry=r,
        )
        self.transitions = Counter(
            "keepersim_policy_transitions",
            "Health-policy state transitions",
            ["policy", "from", "to"],
            registry=r,
        )
        self.outcomes = Counter(
            "keepersim_outcomes",
            "Inference outcomes: success (finished), miss (expired), neutral (declined)",
            ["outcome"],
            registry=r,
        )
        self.selections = Counter(
            "keepersim_selections", "Executors selected (get_random_executor)", registry=r
        )
        self.fallback_selections = Counter(
            "keepersim_fallback_selections",
            "Selections from the unfiltered list because the health gate left nobody",
            registry=r,
        )
        self.cache_events = Counter(
            "keepersim_cache_events",
            "Single-flight cache events",
            ["cache", "event"],
            registry=r,
        )
        self.block_seconds = Histogram(
            "keepersim_block_processing_seconds",
            "Wall time of deliver_block (begin block, messages, end block, commit)",
            buckets=BLOCK_BUCKETS,
            registry=r,
        )
        self.height = Gauge("keepersim_height", "Last committed height", registry=r)
        self.runner_up = Gauge(
            "keepersim_runner_up",
            "1 unless the runner driving the chain failed (0: the chain stopped at "
            "keepersim_height; the error is in /keepersim/v1/status)",
            registry=r,
        )
        self.runner_up.set(1)
        self.runner_failures = Counter(
            "keepersim_runner_failures",
            "Runner failures (a bad trace line, a block that failed, a scenario error)",
            registry=r,
        )
        for outcome in OUTCOMES:
            self.outcomes.labels(outcome)
        for cache in CACHE_NAMES:
            for event in CACHE_EVENTS:
                self.cache_events.labels(cache, event)
        self._lock = threading.Lock()
        self._policy = ""
        # participant -> last exported value, for the current policy
        self._states: dict[str, int] = {}
        # participants out of the pool until the next resync: their transitions do not count
        self._removed: set[str] = set()

    # exposition ----------------------------------------------------------------------------

    def render(self) -> bytes:
        """The registry in the Prometheus text format."""
        return bytes(generate_latest(self.registry))

    # hooks ---------------------------------------------------------------------------------

    def get_cache_hook(self, cache: str) -> Callable[[str], None]:
        """An ``on_event`` hook for :class:`~keepersim.server.cache.SingleFlightCache`."""

        def on_event(event: str) -> None:
            self.cache_events.labels(cache, event).inc()

        return on_event

    def record_selection(self, fallback: bool) -> None:
        """One executor selected; ``fallback``: drawn from the unfiltered list."""
        self.selections.inc()
        if fallback:
            self.fallback_selections.inc()

    def record_runner_failure(self) -> None:
        """The runner stopped on a failure: ``keepersim_runner_up`` 0, one more failure."""
        self.runner_up.set(0)
        self.runner_failures.inc()

    # blocks --------------------------------------------------------------------------------

    def observe_block(self, result: BlockResult, seconds: float, chain: Chain) -> None:
        """Account for one delivered block (call from the thread that delivered it)."""
        self.block_seconds.observe(seconds)
        self.height.set(result.height)
        resync = False
        for event in result.events:
            if isinstance(event, InferenceFinished):
                self.outcomes.labels("success").inc()
            elif isinstance(event, InferenceExpired):
                self.outcomes.labels("miss").inc()
            elif isinstance(event, InferenceDeclined):
                self.outcomes.labels("neutral").inc()
            elif isinstance(event, HealthTransition):
                self.transitions.labels(event.policy, event.from_state, event.to_state).inc()
                self._set_state(event.address, event.policy, get_state_code(event.to_state))
            elif isinstance(event, ParticipantDeactivated):
                self._set_state(event.address, self._policy, REMOVED)
                with self._lock:
                    self._removed.add(event.address)
            elif isinstance(event, EpochSettled):
                resync = True
        if resync or chain.get_policy_name() != self._policy:
            self.sync_policy_states(chain)

    def sync_policy_states(self, chain: Chain) -> None:
        """Re-read every participant's state: members of the effective epoch group that are
        ACTIVE get their policy state, everyone else exported before gets -1."""
        policy = chain.get_policy_name()
        with chain.read() as k:
            group = k.get_epoch_group(k.get_effective_epoch_index(), "")
            members: list[str] = []
            if group is not None:
                for member in group.validation_weights:
                    participant = k.get_participant(member.member_address)
                    if participant is not None and participant.status == ACTIVE:
                        members.append(member.member_address)
        states = {a: get_state_code(str(chain.get_policy_state(a)["state"])) for a in members}
        with self._lock:
            if policy != self._policy:
                for address in self._states:
                    self._remove(address, self._policy)
                self._states = {}
                self._policy = policy
            self._removed = {a for a in self._states if a not in states}
            for address in self._removed:
                self._states[address] = REMOVED
                self.policy_state.labels(address, policy).set(REMOVED)
            for address, code in states.items():
                self._states[address] = code
                self.policy_state.labels(address, policy).set(code)
        self.height.set(chain.height)

    def get_policy_states(self) -> dict[str, int]:
        """Snapshot: participant -> exported state value (current policy)."""
        with self._lock:
            return dict(self._states)

    def _set_state(self, address: str, policy: str, code: int) -> None:
        with self._lock:
            if policy != self._policy and self._policy:
                return  # a stale policy's event; the resync after this block fixes the view
            if address in self._removed:
                return  # out of the pool until the next resync
            self._states[address] = code
            self.policy_state.labels(address, policy or self._policy).set(code)

    def _remove(self, address: str, policy: str) -> None:
        with contextlib.suppress(KeyError):
            self.policy_state.remove(address, policy)


def get_family_names(metrics: ServerMetrics) -> Iterable[str]:
    """Names of the families in the registry (as exposed, counters with ``_total``)."""
    for family in metrics.registry.collect():
        yield family.name
