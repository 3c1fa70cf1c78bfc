"""keepersim's traces (``docs/trace-format.md``): the only place that reads or writes them.
``keepersim simulate`` and ``keepersim export`` write traces through it; ``keepersim replay`` and
``keepersim serve`` read them through it.

* :mod:`keepersim.trace.format`: the version, the record kinds and their order at one height, the
  header, the line codec (the chain's REST JSON: :mod:`keepersim.types.chain_json`) and the line
  builders;
* :mod:`keepersim.trace.schema`: the JSON Schema of a line, generated from the protos;
* :mod:`keepersim.trace.validate`: checks a line against it (jsonschema-rs), naming the field;
* :mod:`keepersim.trace.build`: builds the protobuf messages of a valid line;
* :mod:`keepersim.trace.records`: the typed records, :class:`TraceError`, :class:`BadLines`;
* :mod:`keepersim.trace.integrity`: the closing record (a cut trace is never taken for a whole
  one): :func:`check_trace_end`, :func:`append_closing_record`;
* :mod:`keepersim.trace.reader`: :func:`iterate_trace`, the streaming reader, and the ordering
  rules;
* :mod:`keepersim.trace.writer`: :class:`TraceWriter`, which streams a run's lines in order;
* :mod:`keepersim.trace.genesis`: records to the genesis a replay starts from;
* :mod:`keepersim.trace.messages`: records to block messages (as-recorded replay and serve).

Names are imported lazily, so ``import keepersim.trace.format`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keepersim.trace.genesis import Prologue, build_genesis, read_prologue
    from keepersim.trace.integrity import TraceEnd, append_closing_record, check_trace_end
    from keepersim.trace.messages import build_block
    from keepersim.trace.reader import TraceCursor, iterate_trace, read_header
    from keepersim.trace.records import (
        BadLines,
        EpochSummaryRecord,
        Header,
        InferenceRecord,
        ParamsRecord,
        ParticipantsRecord,
        TraceCut,
        TraceError,
        TraceRecord,
    )
    from keepersim.trace.writer import TraceWriter, get_epoch_declines

_EXPORTS = {
    "BadLines": "keepersim.trace.records",
    "EpochSummaryRecord": "keepersim.trace.records",
    "Header": "keepersim.trace.records",
    "InferenceRecord": "keepersim.trace.records",
    "ParamsRecord": "keepersim.trace.records",
    "ParticipantsRecord": "keepersim.trace.records",
    "TraceCut": "keepersim.trace.records",
    "TraceError": "keepersim.trace.records",
    "TraceEnd": "keepersim.trace.integrity",
    "append_closing_record": "keepersim.trace.integrity",
    "check_trace_end": "keepersim.trace.integrity",
    "TraceRecord": "keepersim.trace.records",
    "TraceCursor": "keepersim.trace.reader",
    "iterate_trace": "keepersim.trace.reader",
    "read_header": "keepersim.trace.reader",
    "TraceWriter": "keepersim.trace.writer",
    "get_epoch_declines": "keepersim.trace.writer",
    "Prologue": "keepersim.trace.genesis",
    "build_genesis": "keepersim.trace.genesis",
    "read_prologue": "keepersim.trace.genesis",
    "build_block": "keepersim.trace.messages",
}

__all__ = [
    "BadLines",
    "EpochSummaryRecord",
    "Header",
    "InferenceRecord",
    "ParamsRecord",
    "ParticipantsRecord",
    "Prologue",
    "TraceCursor",
    "TraceCut",
    "TraceEnd",
    "TraceError",
    "TraceRecord",
    "TraceWriter",
    "append_closing_record",
    "build_block",
    "build_genesis",
    "check_trace_end",
    "get_epoch_declines",
    "iterate_trace",
    "read_header",
    "read_prologue",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'keepersim.trace' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
