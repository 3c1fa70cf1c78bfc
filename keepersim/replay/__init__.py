"""Trace replay: read a trace (``docs/trace-format.md``), replay it through the chain.

* :func:`iterate_trace` (:mod:`keepersim.trace.reader`): the streaming, validating reader;
* :func:`replay_as_recorded` (:mod:`keepersim.replay.as_recorded`): the recorded traffic, checked
  against the recorded summaries and statuses, with policies watching in shadow mode;
* :func:`replay_what_if` (:mod:`keepersim.replay.what_if`): the recorded requests with a policy
  choosing executors and outcomes drawn from :mod:`keepersim.replay.estimator`.

The ``keepersim replay`` command is :mod:`keepersim.cli.replay`. Names are imported lazily, so
``import keepersim.replay`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keepersim.replay.as_recorded import ReplayReport, replay_as_recorded
    from keepersim.replay.common import ReplayError
    from keepersim.replay.estimator import BehaviourEstimator, BetaPrior, estimate_trace
    from keepersim.replay.what_if import replay_what_if
    from keepersim.trace.reader import iterate_trace
    from keepersim.trace.records import BadLines, TraceError

_EXPORTS = {
    "BadLines": "keepersim.trace.records",
    "TraceError": "keepersim.trace.records",
    "iterate_trace": "keepersim.trace.reader",
    "ReplayError": "keepersim.replay.common",
    "ReplayReport": "keepersim.replay.as_recorded",
    "replay_as_recorded": "keepersim.replay.as_recorded",
    "BehaviourEstimator": "keepersim.replay.estimator",
    "BetaPrior": "keepersim.replay.estimator",
    "estimate_trace": "keepersim.replay.estimator",
    "replay_what_if": "keepersim.replay.what_if",
}

__all__ = [
    "BadLines",
    "BehaviourEstimator",
    "BetaPrior",
    "ReplayError",
    "ReplayReport",
    "TraceError",
    "estimate_trace",
    "iterate_trace",
    "replay_as_recorded",
    "replay_what_if",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'keepersim.replay' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
