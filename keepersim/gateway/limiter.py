"""The gateway's ``ParticipantRequestLimiter`` as a state machine over heights (gonka ee730031
``devshard/cmd/devshardctl/participant_limiter.go``; ``devshard/docs/host-health.md``).

One entry per participant (its gonka address), scoped to the models it misbehaved on (an empty
set: every model). Its ``failure_strikes`` drive the states: 0 healthy; 1-2 probation (traffic,
but no win); a soft signal reaching the threshold (3), or a hard one at once, quarantines:
probe (no traffic: nonces that land on it are burned as ghost probes) or shadow (traffic, no
win). A quarantine ends at its height and leaves the host on probation with 2 strikes; each
success takes one off, and at 0 the entry is dropped. The longer of overlapping quarantines
wins. Probe quarantine also drains the token bucket, which refills afterwards.

Every function names its upstream counterpart. Functions named ``process_*`` change the state
exactly where upstream's do (an expired quarantine is turned into probation when upstream's
code looks at it, an entry dropped where upstream deletes it); ``get_status`` / ``is_admitted``
read without changing anything (they see an expired quarantine as the probation it becomes).
One consequence differs from upstream: its read-only looking calls (``IsBlocked`` ...) also
clear an expired quarantine, which can decide whether a later hard failure of an unscoped
(model "") entry is scoped to a model; keepersim always names the model, so its entries are
scoped from their first signal and the two agree (but for an unscoped row restored by
``process_load_state``).
Heights are block heights; ``now.Before(until)`` is ``height < until``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from keepersim.gateway.limiter_params import STRIKES_AFTER_QUARANTINE, TOKEN_UNITS, LimiterParams
from keepersim.gateway.signals import OutcomeClass, Signal, get_outcome_signal


class QuarantineMode(enum.IntEnum):
    """``participantQuarantineMode`` (participant_limiter.go:53-79)."""

    NONE = 0
    PROBE = 1
    SHADOW = 2


@dataclass
class HostState:
    """``participantRequestState`` (participant_limiter.go:249-256); tokens in
    ``TOKEN_UNITS`` per token, ``quarantine_until`` a height (None: upstream's zero time)."""

    tokens: int
    last_refill: int
    model_ids: set[str] = field(default_factory=set)
    quarantine_until: int | None = None
    mode: QuarantineMode = QuarantineMode.NONE
    failure_strikes: int = 0


@dataclass
class LimiterState:
    params: LimiterParams
    hosts: dict[str, HostState] = field(default_factory=dict)


@dataclass(frozen=True)
class HostStatus:
    """What the gateway asks of one host for one model at a height."""

    tracked: bool
    quarantined: bool = False  # inQuarantine (the entry applies to the model)
    probe_quarantined: bool = False  # IsBlocked by quarantine: no traffic, ghost probes
    shadow_quarantined: bool = False  # traffic, no win
    probationary: bool = False  # strikes > 0 and no quarantine: traffic, no win
    blocked: bool = False  # IsBlockedForModel: the picker ghost-burns its nonces
    no_winner: bool = False  # NoWinnerStatusForModel: shadow quarantine or probation
    failure_strikes: int = 0
    tokens: int = 0  # in TOKEN_UNITS
    quarantine_until: int | None = None

    @property
    def admitted(self) -> bool:
        """``AllowRequestForModel`` would let a request through (before taking its token)."""
        return not self.blocked


# --- the entry's predicates (participant_limiter.go:138-148, 1178-1192) ---


def _normalize(model: str) -> str:
    return model.strip()


def is_scoped_to(st: HostState, model: str) -> bool:
    """``stateAppliesToModel``: an unscoped entry or an unnamed model always applies."""
    model = _normalize(model)
    return not st.model_ids or not model or model in st.model_ids


def is_in_quarantine(st: HostState, height: int) -> bool:
    return st.quarantine_until is not None and height < st.quarantine_until


def is_in_probe_quarantine(st: HostState, height: int) -> bool:
    return is_in_quarantine(st, height) and st.mode != QuarantineMode.SHADOW


def is_in_shadow_quarantine(st: HostState, height: int) -> bool:
    return is_in_quarantine(st, height) and st.mode == QuarantineMode.SHADOW


def is_probation_active(st: HostState) -> bool:
    return st.failure_strikes > 0 and st.quarantine_until is None


# --- upstream's locked helpers ---


def _ensure(state: LimiterState, host: str, height: int) -> HostState:
    """``ensureStateLocked`` (:1284-1294): a new entry starts with a full bucket."""
    st = state.hosts.get(host)
    if st is None:
        st = HostState(tokens=state.params.burst_units, last_refill=height)
        state.hosts[host] = st
    return st


def _add_model(st: HostState, model: str) -> None:
    """``addModelLocked`` (:1212-1224): an unscoped entry under quarantine stays unscoped."""
    model = _normalize(model)
    if not model or (not st.model_ids and st.mode != QuarantineMode.NONE):
        return
    st.model_ids.add(model)


def _clear_expired(params: LimiterParams, st: HostState, height: int) -> None:
    """``clearExpiredQuarantineIfAnyLocked`` (:1226-1243): an ended quarantine becomes
    probation with 2 strikes and a full bucket."""
    if is_in_quarantine(st, height) or st.quarantine_until is None:
        return
    st.quarantine_until = None
    st.mode = QuarantineMode.NONE
    st.tokens = params.burst_units
    st.last_refill = height
    st.failure_strikes = STRIKES_AFTER_QUARANTINE


def _refill(params: LimiterParams, st: HostState, height: int) -> None:
    """``refillLocked`` (:944-953), in integer units."""
    elapsed = height - st.last_refill
    if elapsed > 0:
        st.tokens = min(params.burst_units, st.tokens + elapsed * params.refill_units_per_block)
        st.last_refill = height


def _apply_quarantine(
    state: LimiterState, host: str, model: str, end: int, height: int, mode: QuarantineMode
) -> HostState:
    """``applyQuarantineLocked`` (:1194-1210): probe drains the bucket, shadow fills it;
    strikes rise to the threshold; the later end wins (and brings its mode)."""
    st = _ensure(state, host, height)
    _add_model(st, model)
    if mode == QuarantineMode.PROBE:
        st.tokens = 0
    elif st.tokens < state.params.burst_units:
        st.tokens = state.params.burst_units
    st.last_refill = height
    st.failure_strikes = max(st.failure_strikes, state.params.strike_threshold)
    if st.quarantine_until is None or end > st.quarantine_until:
        st.quarantine_until = end
        st.mode = mode
    return st


def _tracked(state: LimiterState, host: str, height: int) -> HostState | None:
    """The entry after upstream's ``clearExpiredQuarantineIfAnyLocked`` at a read."""
    st = state.hosts.get(host)
    if st is not None:
        _clear_expired(state.params, st, height)
    return st


# --- transitions ---


def _process_soft_strike(
    state: LimiterState, host: str, model: str, height: int, signal: Signal
) -> None:
    """EOF transport failures (:580-604) and empty streams (:650-680): one more strike, the
    threshold quarantines (probe for EOF, shadow for empty streams); nothing while
    quarantined."""
    p = state.params
    st = _ensure(state, host, height)
    _clear_expired(p, st, height)
    if is_in_quarantine(st, height):
        return
    _add_model(st, model)
    st.failure_strikes += 1
    if st.failure_strikes >= p.strike_threshold:
        if signal == Signal.EOF_TRANSPORT:
            end, mode = height + p.transport_failure_quarantine_blocks, QuarantineMode.PROBE
        else:
            end, mode = height + p.empty_stream_quarantine_blocks, QuarantineMode.SHADOW
        _apply_quarantine(state, host, model, end, height, mode)


def _process_success(state: LimiterState, host: str, model: str, height: int) -> None:
    """``ObserveSuccessfulInferenceForModel`` (:711-746): one strike off; at 0 with a full
    bucket and no quarantine the entry is dropped (probation passed)."""
    st = _tracked(state, host, height)
    if st is None or not is_scoped_to(st, model) or st.failure_strikes == 0:
        return
    st.failure_strikes -= 1
    if st.tokens >= state.params.burst_units and st.quarantine_until is None:
        if st.failure_strikes > 0:
            return
        del state.hosts[host]


def process_signal(state: LimiterState, host: str, model: str, signal: Signal, height: int) -> None:
    """One observation of ``host`` serving ``model`` at ``height`` (the ``Observe*ForModel``
    methods). An empty host key is ignored, as upstream."""
    if not host:
        return
    p = state.params
    if signal == Signal.SUCCESS:
        _process_success(state, host, model, height)
    elif signal == Signal.HTTP_THROTTLE:  # ObserveResultWithBodyForModel (:531-553)
        end = height + p.http_quarantine_blocks
        _apply_quarantine(state, host, model, end, height, QuarantineMode.PROBE)
    elif signal in (Signal.HTTP_ROUTE_FAILURE, Signal.TRANSPORT_FAILURE):  # (:531-553, 606-610)
        end = height + p.transport_failure_quarantine_blocks
        _apply_quarantine(state, host, model, end, height, QuarantineMode.PROBE)
    elif signal in (Signal.EOF_TRANSPORT, Signal.EMPTY_STREAM):
        _process_soft_strike(state, host, model, height, signal)
    elif signal == Signal.STALLED_WINNER:  # ObserveStalledWinnerForModel (:690-703)
        end = height + p.stalled_winner_quarantine_blocks
        _apply_quarantine(state, host, model, end, height, QuarantineMode.SHADOW)
    # MODEL_BURN_EMPTY: telemetry only (:634-641)


def process_outcome(
    state: LimiterState,
    host: str,
    model: str,
    outcome: OutcomeClass,
    height: int,
    miss_signal: Signal = Signal.TRANSPORT_FAILURE,
) -> None:
    """A keepersim outcome (finish / miss / decline) as the signal it stands for
    (``signals.get_outcome_signal``)."""
    process_signal(state, host, model, get_outcome_signal(outcome, miss_signal), height)


def process_admission(state: LimiterState, host: str, model: str, height: int) -> bool:
    """``AllowRequestForModel`` / ``allowForModel`` (:443-502): False in probe quarantine or
    with less than a token; a request below a full bucket takes a token; a full bucket without
    probation drops the entry. The relaxed-PoC bypass (:447) is not modelled."""
    if not host:
        return True
    p = state.params
    st = _tracked(state, host, height)
    if st is None or not is_scoped_to(st, model):
        return True
    if is_in_probe_quarantine(st, height):
        return False
    if is_in_shadow_quarantine(st, height):
        return True
    _refill(p, st, height)
    if st.tokens >= p.burst_units:
        if not is_probation_active(st):
            del state.hosts[host]
        return True
    if st.tokens < TOKEN_UNITS:
        return False
    st.tokens -= TOKEN_UNITS
    return True


def process_clear_quarantine(state: LimiterState, host: str, height: int) -> bool:
    """``ClearQuarantine`` (:752-771), the admin's unquarantine: probation with 2 strikes."""
    st = state.hosts.get(host) if host else None
    if st is None:
        return False
    st.tokens = state.params.burst_units
    st.last_refill = height
    st.quarantine_until = None
    st.mode = QuarantineMode.NONE
    st.failure_strikes = STRIKES_AFTER_QUARANTINE
    return True


def process_update_params(state: LimiterState, params: LimiterParams) -> None:
    """``UpdateSettings`` (:297-344): new params; buckets above the new burst are cut."""
    state.params = params
    for st in state.hosts.values():
        st.tokens = min(st.tokens, params.burst_units)


def process_load_state(
    state: LimiterState,
    host: str,
    model_ids: Iterable[str],
    tokens: int,
    last_refill: int,
    status: int,
    quarantine_until: int | None,
    failure_strikes: int,
    height: int,
) -> None:
    """``LoadStateWithQuarantine`` (:355-425): a persisted row back at a restart. A quarantine
    still running resumes (strikes at least the threshold); an ended one resumes as probation;
    a full bucket without strikes is dropped; a legacy 429 / 503 row without an end gets one
    at the time its bucket would be full, at most the HTTP quarantine. The refill since the
    row's ``last_refill`` is not capped at the burst, as upstream."""
    p = state.params
    scope = {m for m in (_normalize(m) for m in model_ids) if m}
    if quarantine_until is not None:
        if height < quarantine_until:
            state.hosts[host] = HostState(
                tokens=0,
                last_refill=height,
                model_ids=scope,
                quarantine_until=quarantine_until,
                mode=QuarantineMode.SHADOW if status in (-1, -2) else QuarantineMode.PROBE,
                failure_strikes=max(failure_strikes, p.strike_threshold),
            )
            return
        failure_strikes = max(failure_strikes, STRIKES_AFTER_QUARANTINE)
        tokens = p.burst_units
        status = 0
    if height > last_refill:
        tokens += (height - last_refill) * p.refill_units_per_block
    if tokens >= p.burst_units and failure_strikes == 0:
        return  # upstream deletes the stored row and adds no entry (an existing one stays)
    st = HostState(
        tokens=tokens, last_refill=height, model_ids=scope, failure_strikes=failure_strikes
    )
    if status in (429, 503) and tokens < p.burst_units and p.refill_units_per_block > 0:
        to_full = -(-(p.burst_units - tokens) // p.refill_units_per_block)
        st.quarantine_until = height + min(to_full, p.http_quarantine_blocks)
        st.mode = QuarantineMode.PROBE
    state.hosts[host] = st


# --- reads ---


def get_status(state: LimiterState, host: str, model: str, height: int) -> HostStatus:
    """The host's standing for ``model`` at ``height`` without changing the state: what
    ``IsBlockedForModel`` (:1148-1176), ``NoWinnerStatusForModel`` (:1057-1091) and
    ``IsRecentlyQuarantinedForModel`` (:1019-1043) answer."""
    raw = state.hosts.get(host) if host else None
    if raw is None:
        return HostStatus(tracked=False, tokens=state.params.burst_units)
    st = replace(raw, model_ids=set(raw.model_ids))
    _clear_expired(state.params, st, height)
    if not is_scoped_to(st, model):
        return HostStatus(tracked=True, tokens=st.tokens, failure_strikes=st.failure_strikes)
    probe = is_in_probe_quarantine(st, height)
    shadow = is_in_shadow_quarantine(st, height)
    probation = is_probation_active(st)
    if not is_in_quarantine(st, height):
        _refill(state.params, st, height)
    return HostStatus(
        tracked=True,
        quarantined=probe or shadow,
        probe_quarantined=probe,
        shadow_quarantined=shadow,
        probationary=probation,
        blocked=probe or (not shadow and st.tokens < TOKEN_UNITS),
        no_winner=shadow or probation,
        failure_strikes=st.failure_strikes,
        tokens=st.tokens,
        quarantine_until=st.quarantine_until,
    )


def is_admitted(state: LimiterState, host: str, model: str, height: int) -> bool:
    """Whether ``process_admission`` would let a request through now (no token taken)."""
    return get_status(state, host, model, height).admitted


def is_blocked(state: LimiterState, host: str, model: str, height: int) -> bool:
    """``IsBlockedForModel``: the session picker's throttle check (gateway.go:299-307)."""
    return get_status(state, host, model, height).blocked


def is_no_winner(state: LimiterState, host: str, model: str, height: int) -> bool:
    """``IsShadowQuarantinedForModel``: shadow quarantine or probation (host-health.md)."""
    return get_status(state, host, model, height).no_winner


def is_recently_quarantined(state: LimiterState, host: str, model: str, height: int) -> bool:
    """``IsRecentlyQuarantinedForModel``: in quarantine or on probation."""
    status = get_status(state, host, model, height)
    return status.quarantined or status.probationary


def get_tracked_count(state: LimiterState) -> int:
    """``TrackedCount`` (:1009-1013)."""
    return len(state.hosts)


@dataclass(frozen=True)
class Snapshot:
    """``ParticipantThrottleSnapshot`` (:258-274), the admin endpoint's view."""

    tracked: bool
    quarantined: bool
    blocked: bool
    request_allowed: bool
    available_for_capacity: bool
    mode: QuarantineMode
    model_ids: tuple[str, ...]
    shadow_quarantined: bool
    probe_quarantined: bool
    probationary: bool
    tokens: int
    failure_strikes: int
    quarantine_until: int | None


def _untracked_snapshot(params: LimiterParams) -> Snapshot:
    return Snapshot(
        False, False, False, True, True, QuarantineMode.NONE, (), False, False, False,
        params.burst_units, 0, None,
    )  # fmt: skip


def process_snapshot(state: LimiterState, hosts: Iterable[str], height: int) -> dict[str, Snapshot]:
    """``Snapshot`` (:822-942): per host; like upstream it refills buckets outside quarantine
    and drops entries with a full bucket and no strikes. The ``probationary`` branch inside
    its full-bucket case needs strikes > 0 and so never runs; it is left out."""
    p = state.params
    out: dict[str, Snapshot] = {}
    for key in (h.strip() for h in hosts):
        if not key or key in out:
            continue
        st = _tracked(state, key, height)
        if st is None:
            out[key] = _untracked_snapshot(p)
            continue
        quarantined = is_in_quarantine(st, height)
        probe = is_in_probe_quarantine(st, height)
        shadow = is_in_shadow_quarantine(st, height)
        probation = is_probation_active(st)
        if not quarantined:
            _refill(p, st, height)
            if st.tokens >= p.burst_units and st.failure_strikes == 0:
                del state.hosts[key]
                out[key] = _untracked_snapshot(p)
                continue
        blocked = probe or (not shadow and st.tokens < TOKEN_UNITS)
        out[key] = Snapshot(
            tracked=True,
            quarantined=quarantined,
            blocked=blocked,
            request_allowed=not blocked,
            available_for_capacity=not probe
            and (shadow or st.tokens >= p.burst_units or st.failure_strikes > 0),
            mode=st.mode,
            model_ids=tuple(sorted(st.model_ids)),
            shadow_quarantined=shadow,
            probe_quarantined=probe,
            probationary=probation,
            tokens=st.tokens,
            failure_strikes=st.failure_strikes,
            quarantine_until=st.quarantine_until if quarantined else None,
        )
    return out


def process_blocked_participants(
    state: LimiterState, hosts: Iterable[str], height: int
) -> list[str]:
    """``BlockedParticipants`` (:779-820), whose non-empty answer is ``CanAcceptEscrow``'s
    error (:509-517): hosts in probe quarantine or below a token, sorted. Not model-scoped, as
    upstream."""
    p = state.params
    blocked: set[str] = set()
    for key in hosts:
        st = _tracked(state, key, height) if key else None
        if st is None or is_in_shadow_quarantine(st, height):
            continue
        if is_in_probe_quarantine(st, height):
            blocked.add(key)
            continue
        _refill(p, st, height)
        if st.tokens < TOKEN_UNITS:
            blocked.add(key)
    return sorted(blocked)


def process_exhausted_count(state: LimiterState, height: int) -> int:
    """``ExhaustedCount`` (:977-1006): entries in probe quarantine or below a token."""
    return len(process_blocked_participants(state, list(state.hosts), height))


def process_availability(state: LimiterState, host: str, model: str, height: int) -> bool:
    """``IsAvailableForModel`` (:1100-1139), the capacity view's live availability: not in
    probe quarantine and (shadow, a full bucket or strikes); drops a settled entry."""
    st = _tracked(state, host, height) if host else None
    if st is None or not is_scoped_to(st, model):
        return True
    if is_in_probe_quarantine(st, height):
        return False
    if is_in_shadow_quarantine(st, height):
        return True
    _refill(state.params, st, height)
    if st.tokens >= state.params.burst_units:
        if st.failure_strikes == 0 and not is_probation_active(st):
            del state.hosts[host]
        return True
    return False


def compute_new_limiter(params: LimiterParams) -> LimiterState:
    """An empty limiter (``NewParticipantRequestLimiter``): every host untracked."""
    return LimiterState(params=params)
