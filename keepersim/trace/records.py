"""The trace's typed records (what :func:`keepersim.trace.reader.iterate_trace` yields), its line
error and the collector of skipped lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from keepersim.keeper.inferences import is_declined
from keepersim.trace.format import FINISHED_LIKE
from keepersim.types.messages import (
    EpochPerformanceSummary,
    Inference,
    InferenceStatus,
    Participant,
    ValidationWeight,
)
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.state_pb2 import EpochDeclines, ParticipantNodes

__all__ = [
    "BadLine",
    "BadLines",
    "EpochSummaryRecord",
    "Header",
    "InferenceRecord",
    "ParamsRecord",
    "ParticipantsRecord",
    "TraceCut",
    "TraceError",
    "TraceRecord",
]

DEFAULT_MAX_LISTED: Final = 20


class TraceError(ValueError):
    """A malformed or misplaced trace line: ``path:line: field: reason``."""

    def __init__(self, path: str, line: int, field: str, reason: str) -> None:
        super().__init__(f"{path}:{line}: {field}: {reason}")
        self.path = path
        self.line = line
        self.field = field
        self.reason = reason


@dataclass(frozen=True, slots=True)
class BadLine:
    line: int
    field: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "field": self.field, "reason": self.reason}


@dataclass(slots=True)
class BadLines:
    """Lines skipped with ``skip_bad``: how many, and the first ``max_listed`` with reasons."""

    max_listed: int = DEFAULT_MAX_LISTED
    count: int = 0
    lines: list[BadLine] = field(default_factory=list)

    def add(self, error: TraceError) -> None:
        self.count += 1
        if len(self.lines) < self.max_listed:
            self.lines.append(BadLine(error.line, error.field, error.reason))

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "listed": [b.to_dict() for b in self.lines]}


@dataclass(frozen=True, slots=True)
class TraceCut:
    """Where a trace read with ``allow_partial`` ends: it has no closing record."""

    line: int  # the last whole line
    height: int  # its height (the replay's last block)
    recorded_last_height: int  # the header's last_height

    def to_dict(self) -> dict[str, int]:
        return {
            "line": self.line,
            "height": self.height,
            "recorded_last_height": self.recorded_last_height,
        }


@dataclass(frozen=True, slots=True)
class Header:
    line: int
    version: int
    chain_id: str
    source: str
    first_height: int
    # the last height to replay: the header's, or a partial trace's last (``cut``)
    last_height: int
    scenario: str | dict[str, Any] | None = None
    seed: int | None = None
    policy: str | None = None
    # A partial trace (read with allow_partial, no closing record): where it ends
    cut: TraceCut | None = None

    def get_scenario_name(self) -> str | None:
        if isinstance(self.scenario, dict):
            name = self.scenario.get("name")
            return name if isinstance(name, str) else None
        return self.scenario


@dataclass(frozen=True, slots=True)
class ParamsRecord:
    line: int
    height: int
    params: ModuleParams


@dataclass(frozen=True, slots=True)
class ParticipantsRecord:
    line: int
    epoch_index: int
    height: int
    participants: tuple[Participant, ...]
    # keepersim's registration of their models and ML nodes (by address; absent: none)
    nodes: tuple[ParticipantNodes, ...] = ()
    # The epoch group's members as recorded (weight, reputation, ML nodes); empty: not recorded
    weights: tuple[ValidationWeight, ...] = ()


@dataclass(frozen=True, slots=True)
class InferenceRecord:
    line: int
    inference: Inference

    @property
    def inference_id(self) -> str:
        return self.inference.inference_id

    @property
    def start_height(self) -> int:
        return self.inference.start_block_height

    @property
    def end_height(self) -> int:
        return self.inference.end_block_height

    @property
    def status(self) -> InferenceStatus.ValueType:
        return self.inference.status

    def is_finished(self) -> bool:
        return self.inference.status in FINISHED_LIKE

    def is_declined(self) -> bool:
        return is_declined(self.inference)


@dataclass(frozen=True, slots=True)
class EpochSummaryRecord:
    line: int
    epoch_index: int
    height: int
    summaries: tuple[EpochPerformanceSummary, ...]
    # keepersim's declines of the epoch per participant (None: the line has none recorded)
    declines: tuple[EpochDeclines, ...] | None = None


TraceRecord = Header | ParamsRecord | ParticipantsRecord | InferenceRecord | EpochSummaryRecord
