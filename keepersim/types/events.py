"""Typed events for every state change, handed to the caller after each block."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Outcome(enum.Enum):
    """What a result means to a health policy (see docs/architecture.md)."""

    SUCCESS = "success"  # a finished inference
    MISS = "miss"  # an expired inference
    NEUTRAL = "neutral"  # capacity pushback, or a result that cannot be attributed


# The per-inference events (one or two for every inference) are not frozen: a frozen
# dataclass's constructor sets each field through object.__setattr__, three times the cost of a
# plain one. They stay hashable and compare by value; nothing changes an event once emitted.
@dataclass(slots=True, unsafe_hash=True)
class InferenceStarted:
    height: int
    inference_id: str
    assigned_to: str


@dataclass(slots=True, unsafe_hash=True)
class InferenceFinished:
    height: int
    inference_id: str
    executed_by: str
    start_height: int


@dataclass(slots=True, unsafe_hash=True)
class InferenceExpired:
    height: int
    inference_id: str
    assigned_to: str
    start_height: int


@dataclass(frozen=True, slots=True)
class InferenceDeclined:
    height: int
    inference_id: str
    assigned_to: str
    reason: str


@dataclass(frozen=True, slots=True)
class HealthTransition:
    """A health policy moved a participant between states (a breaker transition)."""

    height: int
    policy: str
    address: str
    from_state: str
    to_state: str
    reason: str


@dataclass(frozen=True, slots=True)
class ParticipantDeactivated:
    """The participant is INACTIVE for the rest of the epoch: SPRT declared it (``reason``
    ``downtime``, with its LLR), or a recorded exclusion was replayed
    (``MsgExcludeParticipant``: the chain's reason, no LLR)."""

    height: int
    address: str
    llr: str
    reason: str = "downtime"


@dataclass(frozen=True, slots=True)
class EpochSettled:
    height: int
    settled_epoch: int
    new_epoch: int
    participants: int


@dataclass(frozen=True, slots=True)
class ParamsUpdated:
    height: int
    effective_height: int
    authority: str


@dataclass(frozen=True, slots=True)
class ParamsRejected:
    """Params accepted by governance could not be loaded when due: the old ones stay."""

    height: int
    reason: str


@dataclass(frozen=True, slots=True)
class ExecutorSelected:
    """A selection query's answer (queries write no state; the event goes to the caller)."""

    height: int
    model: str
    address: str
    fallback: bool
    panic: bool
    request_id: str


Event = (
    InferenceStarted
    | InferenceFinished
    | InferenceExpired
    | InferenceDeclined
    | HealthTransition
    | ParticipantDeactivated
    | EpochSettled
    | ParamsUpdated
    | ParamsRejected
)
