"""The gateway's session picker (gonka ee730031 ``devshard/cmd/devshardctl/session_picker.go``):
which queued request takes the next nonce of an escrow's session.

The next nonce ``n`` goes to slot ``n % len(group)`` (``keeper.devshard.nonces``); the picker
cannot choose the host, only what the nonce carries. Per iteration of its run loop
(session_picker.go:273-491):

0. drop canceled requests, and every request whose exclude set covers all available
   participants (not PoC-blocked, not throttled) with ``ErrNoAvailableHost`` (:285-292,
   524-593); an empty queue waits without using a nonce;
1a. a PoC-blocked host: the nonce is burned as a ghost probe (:341-344);
1b. a throttled host (the limiter's ``IsBlockedForModel``: probe quarantine or an empty
    bucket; gateway.go:299-307): a ghost probe, no request sent (:355-359);
2.  else the first queued request that has not excluded this participant (and is not known to
    be incompatible with it) is dispatched on the nonce (:370-386);
3.  else the nonce is held while the oldest request is younger than the stale threshold
    (:393-398), then burned as a ghost probe (capability or exclude, :399-410).

Every nonce the session advances through is a dispatch or a ghost (the liveness invariant,
:62-65). Exclusion and availability are by participant, not slot: one participant may hold
several slots. Time is heights; the 200 ms hold is ``stale_blocks``
(``limiter_params.compute_picker_stale_blocks``: 0 at 5 s blocks).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from keepersim.keeper.devshard.nonces import get_slot_for_nonce


class GhostKind(enum.Enum):
    """``ghostKind`` and its log reason (session_picker.go:107-130)."""

    POC = "poc_unavailable_host"
    EXCLUDE = "no_compatible_request_after_stale"
    THROTTLED = "participant_throttled_no_send"
    CAPABILITY = "participant_capability_no_send"


@dataclass(frozen=True)
class PickerRequest:
    """``pickerRequest`` (:143-149): its id, the participants it already tried, when it was
    queued; ``incompatible`` stands for the capability checker's verdicts (:180, 375-381)."""

    request_id: str
    submit_height: int
    exclude: frozenset[str] = frozenset()
    incompatible: frozenset[str] = frozenset()
    canceled: bool = False


@dataclass
class PickerState:
    """One session's picker: the group's participant per slot, the last nonce, the queue."""

    participants: tuple[str, ...]
    nonce: int = 0
    queue: list[PickerRequest] = field(default_factory=list)


@dataclass(frozen=True)
class HostChecks:
    """The picker's two gates, both by participant key: ``shouldUseProbeForParticipant`` (the
    PoC phase) and the throttle checker (None: no throttle info, as ``NewRedundancy``)."""

    poc_blocked: Callable[[str], bool] = lambda _key: False
    throttled: Callable[[str], bool] | None = None


@dataclass(frozen=True)
class PickerEvent:
    """What one step did: ``dispatch`` / ``ghost`` use nonce ``nonce`` on ``slot``; ``drop``
    answers a request without a nonce (``reason``); ``hold`` keeps the nonce until a height."""

    kind: Literal["dispatch", "ghost", "drop", "hold"]
    nonce: int = 0
    slot: int = -1
    participant: str = ""
    request_id: str = ""
    ghost: GhostKind | None = None
    reason: str = ""
    until: int = 0


NO_AVAILABLE_HOST = "no_available_host"  # ErrNoAvailableHost (redundancy.go:603)
CANCELED = "canceled"


def process_submit(state: PickerState, request: PickerRequest) -> None:
    """``submit`` (:240-259): the request joins the end of the queue."""
    state.queue.append(request)


def get_available_participants(state: PickerState, checks: HostChecks) -> set[str]:
    """``computeAvailableParticipants`` (:524-541): neither PoC-blocked nor throttled."""
    return {
        key
        for key in state.participants
        if key
        and not checks.poc_blocked(key)
        and not (checks.throttled is not None and checks.throttled(key))
    }


def _is_viable(request: PickerRequest, available: set[str]) -> bool:
    """``hasCompatibleParticipantLocked`` (:577-593)."""
    return any(k not in request.exclude and k not in request.incompatible for k in available)


def _process_drops(state: PickerState, checks: HostChecks) -> list[PickerEvent]:
    """``dropCanceledLocked`` then ``dropExhaustedLocked`` (:289-291, 556-610)."""
    events = [
        PickerEvent("drop", request_id=r.request_id, reason=CANCELED)
        for r in state.queue
        if r.canceled
    ]
    queue = [r for r in state.queue if not r.canceled]
    available = get_available_participants(state, checks)
    kept = []
    for r in queue:
        if _is_viable(r, available):
            kept.append(r)
        else:
            events.append(PickerEvent("drop", request_id=r.request_id, reason=NO_AVAILABLE_HOST))
    state.queue = kept
    return events


def process_picker_step(
    state: PickerState, checks: HostChecks, height: int, stale_blocks: int
) -> list[PickerEvent]:
    """One iteration of ``run``: the drops, then at most one nonce decision. Returns [] or
    only drops when the queue is (or became) empty."""
    events = _process_drops(state, checks)
    if not state.queue:
        return events
    nonce = state.nonce + 1
    slot = get_slot_for_nonce(nonce, len(state.participants))
    key = state.participants[slot]

    def burn(kind: GhostKind) -> list[PickerEvent]:
        state.nonce = nonce
        return [*events, PickerEvent("ghost", nonce, slot, key, ghost=kind, reason=kind.value)]

    if checks.poc_blocked(key):
        return burn(GhostKind.POC)
    if checks.throttled is not None and checks.throttled(key):
        return burn(GhostKind.THROTTLED)
    capability_blocked = False
    for i, r in enumerate(state.queue):
        if key in r.exclude:
            continue
        if key in r.incompatible:
            capability_blocked = True
            continue
        del state.queue[i]
        state.nonce = nonce
        return [*events, PickerEvent("dispatch", nonce, slot, key, request_id=r.request_id)]
    mature = state.queue[0].submit_height + stale_blocks
    if height < mature:
        return [*events, PickerEvent("hold", nonce, slot, key, until=mature)]
    return burn(GhostKind.CAPABILITY if capability_blocked else GhostKind.EXCLUDE)


def process_picker_run(
    state: PickerState,
    checks: HostChecks,
    height: int,
    stale_blocks: int,
    max_nonces: int | None = None,
) -> list[PickerEvent]:
    """The run loop within one height: steps until the queue is empty, a nonce is held, or
    ``max_nonces`` nonces were used (the escrow's nonce budget, if any)."""
    events: list[PickerEvent] = []
    used = 0
    while max_nonces is None or used < max_nonces:
        step = process_picker_step(state, checks, height, stale_blocks)
        events.extend(step)
        if not step or step[-1].kind not in ("dispatch", "ghost"):
            break  # the queue is empty, or a nonce is held
        used += 1
    return events


def get_dispatches(events: Sequence[PickerEvent]) -> list[PickerEvent]:
    return [e for e in events if e.kind == "dispatch"]
