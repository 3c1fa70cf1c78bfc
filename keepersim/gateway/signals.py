"""What the limiter is told, and keepersim's outcomes in those terms.

Upstream feeds the limiter from several call sites (gonka ee730031
``devshard/cmd/devshardctl``): HTTP results and transport failures from the transport layer
(``participant_limiter.go:531-611``, through ``modelScopedParticipantAdmission``, lines
155-186), empty streams, stalled winners and successes from ``Redundancy``
(``redundancy.go:3420, 4030-4060``). Each becomes one ``Signal`` here; ``process_signal``
(``limiter.py``) applies it.
"""

from __future__ import annotations

import enum
from typing import Literal


class Signal(enum.Enum):
    SUCCESS = "success"  # ObserveSuccessfulInferenceForModel: one strike off
    HTTP_THROTTLE = "http_throttle"  # HTTP 429 / 503, any path: probe quarantine, 60 min
    HTTP_ROUTE_FAILURE = "http_route_failure"  # inference 404 / 403 / timestamp-drift 401: 30 min
    TRANSPORT_FAILURE = "transport_failure"  # inference, no response, not EOF: probe, 30 min
    EOF_TRANSPORT = "eof_transport"  # inference, EOF-style failure: a strike; probe at 3
    EMPTY_STREAM = "empty_stream"  # a receipt but no content: a strike; shadow at 3
    STALLED_WINNER = "stalled_winner"  # won, streamed, went silent: shadow, 30 min, at once
    MODEL_BURN_EMPTY = "model_burn_empty"  # telemetry only (ObserveModelBurnEmpty)


OutcomeClass = Literal["finish", "miss", "decline"]

# keepersim's outcome classes: a finish is a success; a decline (MsgDeclineInference, the
# capacity pushback) is the host's 429 / 503; a miss (expiry: the host never answered in time)
# is by default a non-EOF transport failure (a dial timeout, refused connection: 30 min of
# probe quarantine at once). Upstream signals with no keepersim outcome: EOF transport
# failures, empty streams, model-burn empties, stalled winners, 404 / 403 / timestamp drift,
# failures on non-inference paths, the admin's unquarantine and the manual suspicious list.
MISS_SIGNALS = (
    Signal.TRANSPORT_FAILURE,
    Signal.EOF_TRANSPORT,
    Signal.EMPTY_STREAM,
    Signal.STALLED_WINNER,
)


def get_outcome_signal(
    outcome: OutcomeClass, miss_signal: Signal = Signal.TRANSPORT_FAILURE
) -> Signal:
    """The signal a keepersim outcome stands for; ``miss_signal`` picks how a miss reads."""
    if miss_signal not in MISS_SIGNALS:
        raise ValueError(f"a miss cannot be {miss_signal.value}")
    if outcome == "finish":
        return Signal.SUCCESS
    if outcome == "decline":
        return Signal.HTTP_THROTTLE
    if outcome == "miss":
        return miss_signal
    raise ValueError(f"unknown outcome class {outcome!r}: expected finish, miss or decline")


def get_path_kind(path: str) -> str:
    """``participantPathKind`` (participant_limiter.go:1296-1311)."""
    if "/chat/completions" in path:
        return "inference"
    if "/verify-timeout" in path:
        return "verify_timeout"
    if "/challenge-receipt" in path:
        return "challenge_receipt"
    if "/gossip/" in path:
        return "gossip"
    if any(part in path for part in ("/diffs", "/signatures", "/mempool")):
        return "query"
    return "other"


def get_http_signal(path: str, status: int, body: str = "") -> Signal | None:
    """``participantHTTPQuarantine`` (participant_limiter.go:1267-1278, 531-541): which HTTP
    results quarantine; any other status (and a status <= 0) is ignored."""
    if status <= 0:
        return None
    if status in (429, 503):
        return Signal.HTTP_THROTTLE
    inference = get_path_kind(path) == "inference"
    if status == 401 and inference and "timestamp drift" in body.lower():
        return Signal.HTTP_ROUTE_FAILURE
    if status in (404, 403) and inference:
        return Signal.HTTP_ROUTE_FAILURE
    return None


def get_transport_signal(path: str, error: str) -> Signal | None:
    """``ObserveTransportFailureForModel`` (participant_limiter.go:563-611): only inference
    paths count; EOF-style errors (``isEOFTransportFailure``, lines 613-621: the text holds
    "eof") are soft strikes, the rest quarantine at once."""
    if get_path_kind(path) != "inference":
        return None
    if "eof" in error.lower():
        return Signal.EOF_TRANSPORT
    return Signal.TRANSPORT_FAILURE
