"""The trace's typed records (what :func:`keepersim.trace.reader.iterate_trace` yields), its line
error and the collector of skipped lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from keepersim.keeper.inferences import is_declined_state
from keepersim.trace.build import get_builder
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


class InferenceRecord:
    """An ``inference`` line: the values a replay reads (the blocks' messages are built from
    them, keepersim.trace.messages), each taken from the line once, and the line's chain
    ``Inference``, built the first time it is asked for (an as-recorded replay never asks)."""

    __slots__ = (
        "line",
        "inference_id",
        "start_height",
        "end_height",
        "status",
        "assigned_to",
        "executed_by",
        "requested_by",
        "model",
        "prompt_token_count",
        "completion_token_count",
        "max_tokens",
        "_inference",
        "_kwargs",
    )

    line: int
    inference_id: str
    start_height: int
    end_height: int
    status: InferenceStatus.ValueType
    assigned_to: str
    executed_by: str
    requested_by: str
    model: str
    prompt_token_count: int
    completion_token_count: int
    max_tokens: int
    _inference: Inference | None
    _kwargs: dict[str, Any] | None

    def __init__(self, line: int, inference: Inference) -> None:
        self.line = line
        self.inference_id = inference.inference_id
        self.start_height = inference.start_block_height
        self.end_height = inference.end_block_height
        self.status = inference.status
        self.assigned_to = inference.assigned_to
        self.executed_by = inference.executed_by
        self.requested_by = inference.requested_by
        self.model = inference.model
        self.prompt_token_count = inference.prompt_token_count
        self.completion_token_count = inference.completion_token_count
        self.max_tokens = inference.max_tokens
        self._inference = inference
        self._kwargs = None

    @classmethod
    def from_kwargs(cls, line: int, kwargs: dict[str, Any]) -> InferenceRecord:
        """The record of a line whose values are ``Inference(**kwargs)``'s, as the reader's
        direct build gives them (:meth:`keepersim.trace.build.MessageBuilder.compute_flat_kwargs`,
        valid for the constructor); the Inference is built when asked for."""
        self = cls.__new__(cls)
        get = kwargs.get
        self.line = line
        self.inference_id = kwargs["inference_id"]
        self.start_height = kwargs["start_block_height"]
        self.end_height = get("end_block_height", 0)
        self.status = get("status", 0)
        self.assigned_to = kwargs["assigned_to"]
        self.executed_by = get("executed_by", "")
        self.requested_by = get("requested_by", "")
        self.model = kwargs["model"]
        self.prompt_token_count = get("prompt_token_count", 0)
        self.completion_token_count = get("completion_token_count", 0)
        self.max_tokens = get("max_tokens", 0)
        self._inference = None
        self._kwargs = kwargs
        return self

    @property
    def inference(self) -> Inference:
        """The line's Inference (built once, then shared: do not change it)."""
        inference = self._inference
        if inference is None:
            assert self._kwargs is not None
            built = get_builder(Inference).construct(self._kwargs)
            assert isinstance(built, Inference)
            inference = self._inference = built
            self._kwargs = None
        return inference

    def is_finished(self) -> bool:
        return self.status in FINISHED_LIKE

    def is_declined(self) -> bool:
        return is_declined_state(self.status, self.end_height)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, InferenceRecord):
            return NotImplemented
        return self.line == other.line and self.inference == other.inference

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"InferenceRecord(line={self.line}, inference_id={self.inference_id!r})"


@dataclass(frozen=True, slots=True)
class EpochSummaryRecord:
    line: int
    epoch_index: int
    height: int
    summaries: tuple[EpochPerformanceSummary, ...]
    # keepersim's declines of the epoch per participant (None: the line has none recorded)
    declines: tuple[EpochDeclines, ...] | None = None


TraceRecord = Header | ParamsRecord | ParticipantsRecord | InferenceRecord | EpochSummaryRecord
