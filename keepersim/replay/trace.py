"""Streaming trace reader: typed records, each line checked against the JSON Schema, parsed into
the protobuf types, and checked against the ordering rules of the format (docs/trace-format.md).

Usage::

    bad = BadLines()
    for record in iterate_trace("trace.jsonl", skip_bad=True, bad_lines=bad):
        ...
    print(bad.count, bad.lines)

A malformed line raises :class:`TraceError` naming the file, the line number and the field, e.g.
``trace.jsonl:1234: inference.start_block_height: expected a uint64 string, got -5``. With
``skip_bad`` the line is skipped instead and recorded in the :class:`BadLines` collector (a count
and the first ``max_listed`` lines with their reasons). The header line cannot be skipped: without
it nothing else can be read.

Checks per line, in order: UTF-8 and JSON; the schema of the line's ``type`` (generated from the
``.proto`` files, so every chain object has exactly the proto's fields; an unknown field is an
error naming it); the protobuf parse (ranges of 64-bit integers); the rules the schema cannot say:

* the first line is the (only) header; ``first_height >= 1``, ``last_height >= first_height``;
* the header's ``version`` is :data:`TRACE_VERSION` (a version-1 trace, from before the chain's
  own shapes, gets an error saying how to re-create it);
* a ``params`` and a ``participants`` line come before the first ``inference`` / ``epoch_summary``;
  ``params`` (the chain's Params and keepersim's ExtensionParams) pass
  :func:`keepersim.types.params.validate_params`; a participants line's ``participant_nodes``
  name its participants, each at most once;
* inference lines are strictly ordered by (``start_block_height``, ``inference_id``), and start
  inside [first_height, last_height];
* an ``epoch_summary`` at height H comes after every inference that started before H: an inference
  line with ``start_block_height`` < H after it is an error (naming the summary's line too);
  epoch indexes of summaries strictly increase, heights of params / participants lines do not
  decrease;
* outcome fields fit the status: FINISHED (and VALIDATED / INVALIDATED / VOTING, which follow a
  finish) need ``executed_by`` and ``end_block_height`` (below the start: the finish came before
  the start); a declined inference (STARTED with ``end_block_height`` set, as the chain has no
  DECLINED status) needs ``end_block_height`` >= start.

Chain objects are read as the chain's REST gateway prints them (``null`` for an unset message);
the fallback parser, which names the field of a bad value, is
:func:`keepersim.types.chain_json.parse_chain_json`.

Memory is constant: the reader keeps only the ordering state.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Final, TypeVar

import jsonschema
from google.protobuf.message import Message

from keepersim.keeper.inferences import is_declined
from keepersim.replay.fastpath import Check, FastParseError, MessageBuilder, SchemaCompiler
from keepersim.replay.schema_gen import TRACE_VERSION
from keepersim.types.chain_json import parse_chain_json
from keepersim.types.errors import ChainJsonError, InvalidParamsError
from keepersim.types.messages import (
    FINISHED,
    INVALIDATED,
    VALIDATED,
    VOTING,
    EpochPerformanceSummary,
    Inference,
    InferenceStatus,
    Params,
    Participant,
)
from keepersim.types.params import validate_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams, ModuleParams
from keepersim.types.pb.keepersim.v1.state_pb2 import EpochDeclines, ParticipantNodes

__all__ = [
    "FINISHED_LIKE",
    "TRACE_VERSION",
    "BadLine",
    "BadLines",
    "EpochSummaryRecord",
    "Header",
    "InferenceRecord",
    "ParamsRecord",
    "ParticipantsRecord",
    "TraceCursor",
    "TraceError",
    "TraceRecord",
    "get_schema",
    "get_status_name",
    "iterate_trace",
    "read_header",
]

# Statuses that imply the executor finished the inference (validation comes after a finish).
FINISHED_LIKE: Final = frozenset({FINISHED, VALIDATED, INVALIDATED, VOTING})
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
class Header:
    line: int
    version: int
    chain_id: str
    source: str
    first_height: int
    last_height: int
    scenario: str | dict[str, Any] | None = None
    seed: int | None = None
    policy: str | None = None

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


def get_status_name(status: int) -> str:
    value = Inference.DESCRIPTOR.fields_by_name["status"].enum_type
    assert value is not None
    found = value.values_by_number.get(status)
    return found.name if found is not None else str(status)


# --------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------


@cache
def get_schema() -> dict[str, Any]:
    """The trace line JSON Schema shipped as ``keepersim/replay/schema/trace.schema.json``."""
    text = (
        resources.files("keepersim.replay")
        .joinpath("schema/trace.schema.json")
        .read_text(encoding="utf-8")
    )
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _get_validator(record_type: str) -> Any:
    """The reference validator (jsonschema) of one record type: used for error messages."""
    schema = get_schema()
    sub = {"$ref": f"#/$defs/{record_type}", "$defs": schema["$defs"]}
    return jsonschema.Draft202012Validator(sub)


@cache
def _get_fast_check(record_type: str) -> Check:
    """The compiled check of one record type (same verdicts as the reference validator)."""
    return SchemaCompiler(get_schema()).compile_ref(f"#/$defs/{record_type}")


_BUILDERS: dict[type[Message], MessageBuilder] = {}


def _get_builder(message_class: type[Message]) -> MessageBuilder:
    builder = _BUILDERS.get(message_class)
    if builder is None:
        builder = MessageBuilder(message_class.DESCRIPTOR, message_class)
        _BUILDERS[message_class] = builder
    return builder


def _format_path(record_type: str, path: Iterable[str | int]) -> str:
    out = record_type
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _describe(instance: Any) -> str:
    try:
        text = json.dumps(instance)
    except (TypeError, ValueError):
        text = repr(instance)
    return text if len(text) <= 80 else text[:77] + "..."


def _schema_error(record_type: str, error: jsonschema.ValidationError) -> tuple[str, str]:
    """(field, reason) of a schema violation, in the format's words."""
    path = list(error.absolute_path)
    keyword = error.validator
    if keyword == "required":
        missing = re.match(r"'([^']*)' is a required property", error.message)
        name = missing.group(1) if missing else "?"
        return _format_path(record_type, [*path, name]), "missing (required)"
    if keyword == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        if extra:
            known = sorted(error.schema.get("properties", {}))
            return (
                _format_path(record_type, [*path, extra[0]]),
                f"unknown field (known: {', '.join(known)})",
            )
    title = error.schema.get("title") if isinstance(error.schema, dict) else None
    if keyword == "const" and isinstance(error.schema, dict) and "const" in error.schema:
        title = title or _describe(error.schema["const"])
    if title:
        return _format_path(record_type, path), f"expected {title}, got {_describe(error.instance)}"
    return _format_path(record_type, path), error.message


# --------------------------------------------------------------------------------------------
# Line parsing
# --------------------------------------------------------------------------------------------

M = TypeVar("M", bound=Message)

_VERSION_1: Final = (
    "trace format version 1 is no longer read: version 2 has the chain's own message shapes "
    "(docs/trace-format.md); re-create the trace with `keepersim simulate ... --trace-out` or "
    "`keepersim export`"
)


def _parse_message(data: Any, message_class: type[M], where: str, path: str, line: int) -> M:
    """Build the protobuf from a schema-valid dict; parse_chain_json is the reference and gives
    the errors."""
    try:
        built = _get_builder(message_class).build(data)
    except FastParseError:
        pass
    else:
        assert isinstance(built, message_class)
        return built
    try:
        return parse_chain_json(data, message_class, where=f"{path}:{line}")
    except ChainJsonError as exc:
        field_path = f"{where}.{exc.path}" if exc.path else where
        raise TraceError(path, line, field_path, exc.problem) from exc


class _Reader:
    """Parses lines and keeps the ordering state (constant memory)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.header: Header | None = None
        self.have_params = False
        self.have_participants = False
        self.last_inference: tuple[int, str] | None = None
        self.last_inference_line = 0
        self.max_summary_height = -1
        self.max_summary_line = 0
        self.last_summary_epoch = -1
        self.last_params_height = -1
        self.last_participants: tuple[int, int] = (-1, -1)

    def error(self, line: int, field: str, reason: str) -> TraceError:
        return TraceError(self.path, line, field, reason)

    def parse(self, raw: bytes, line: int) -> TraceRecord:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(
                line, "<line>", f"not UTF-8: {exc.reason} at byte {exc.start}"
            ) from exc
        if not text.strip():
            raise self.error(line, "<line>", "empty line")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise self.error(
                line, "<line>", f"not valid JSON: {exc.msg} (column {exc.colno})"
            ) from exc
        if not isinstance(data, dict):
            raise self.error(line, "<line>", f"expected a JSON object, got {_describe(data)}")
        record_type = data.get("type")
        if record_type not in ("header", "params", "participants", "inference", "epoch_summary"):
            raise self.error(
                line,
                "type",
                "expected one of ['header', 'params', 'participants', 'inference', "
                f"'epoch_summary'], got {_describe(record_type)}",
            )
        version = data.get("version")
        if record_type == "header" and type(version) is int and version == 1:
            raise self.error(line, "header.version", _VERSION_1)
        errors = (
            []
            if _get_fast_check(record_type)(data)
            else list(_get_validator(record_type).iter_errors(data))
        )
        if errors:
            best = jsonschema.exceptions.best_match(errors)
            assert best is not None
            field_path, reason = _schema_error(record_type, best)
            raise self.error(line, field_path, reason)
        if self.header is None and record_type != "header":
            raise self.error(
                line, "type", f"the first line must be the header, got {record_type!r}"
            )
        if record_type == "header":
            return self.parse_header(data, line)
        if record_type == "params":
            return self.parse_params(data, line)
        if record_type == "participants":
            return self.parse_participants(data, line)
        if record_type == "inference":
            return self.parse_inference(data, line)
        return self.parse_summary(data, line)

    def parse_header(self, data: dict[str, Any], line: int) -> Header:
        if self.header is not None:
            raise self.error(
                line, "type", f"a second header (the header is line {self.header.line})"
            )
        first = int(data["first_height"])
        last = int(data["last_height"])
        if first < 1:
            raise self.error(line, "header.first_height", f"must be >= 1, got {first}")
        if last < first:
            raise self.error(
                line, "header.last_height", f"must be >= first_height {first}, got {last}"
            )
        seed = data.get("seed")
        header = Header(
            line=line,
            version=int(data["version"]),
            chain_id=data["chain_id"],
            source=data["source"],
            first_height=first,
            last_height=last,
            scenario=data.get("scenario"),
            seed=None if seed is None else int(seed),
            policy=data.get("policy"),
        )
        self.header = header
        return header

    def parse_params(self, data: dict[str, Any], line: int) -> ParamsRecord:
        height = int(data["height"])
        params = ModuleParams(
            params=_parse_message(data["params"], Params, "params.params", self.path, line),
            extension_params=_parse_message(
                data["extension_params"],
                ExtensionParams,
                "params.extension_params",
                self.path,
                line,
            ),
        )
        try:
            validate_params(params)
        except InvalidParamsError as exc:
            raise self.error(
                line, f"params.{exc.field}", f"{exc.value!r} breaks rule: {exc.rule}"
            ) from exc
        if height < self.last_params_height:
            raise self.error(
                line,
                "params.height",
                f"{height} is below the previous params line's height {self.last_params_height}",
            )
        self.last_params_height = height
        self.have_params = True
        return ParamsRecord(line, height, params)

    def parse_participants(self, data: dict[str, Any], line: int) -> ParticipantsRecord:
        epoch_index = int(data["epoch_index"])
        height = int(data["height"])
        participants = []
        seen: set[str] = set()
        for i, item in enumerate(data["participants"]):
            p = _parse_message(
                item, Participant, f"participants.participants[{i}]", self.path, line
            )
            if p.address in seen:
                raise self.error(
                    line,
                    f"participants.participants[{i}].address",
                    f"duplicate address {p.address!r}",
                )
            seen.add(p.address)
            participants.append(p)
        nodes = []
        registered: set[str] = set()
        for i, item in enumerate(data["participant_nodes"]):
            where = f"participants.participant_nodes[{i}]"
            n = _parse_message(item, ParticipantNodes, where, self.path, line)
            if n.address not in seen:
                raise self.error(
                    line, f"{where}.address", f"{n.address!r} is not one of the line's participants"
                )
            if n.address in registered:
                raise self.error(line, f"{where}.address", f"duplicate address {n.address!r}")
            registered.add(n.address)
            nodes.append(n)
        if (epoch_index, height) < self.last_participants:
            raise self.error(
                line,
                "participants.epoch_index",
                f"epoch {epoch_index} at height {height} comes after epoch "
                f"{self.last_participants[0]} at height {self.last_participants[1]}",
            )
        assert self.header is not None
        if height > self.header.last_height:
            raise self.error(
                line,
                "participants.height",
                f"{height} is after the trace's last height {self.header.last_height}",
            )
        self.last_participants = (epoch_index, height)
        self.have_participants = True
        return ParticipantsRecord(line, epoch_index, height, tuple(participants), tuple(nodes))

    def require_prologue(self, line: int, record_type: str) -> None:
        if not (self.have_params and self.have_participants):
            missing = "params" if not self.have_params else "participants"
            raise self.error(line, "type", f"{record_type} line before the first {missing} line")

    def parse_inference(self, data: dict[str, Any], line: int) -> InferenceRecord:
        self.require_prologue(line, "inference")
        body = {k: v for k, v in data.items() if k != "type"}
        inference = _parse_message(body, Inference, "inference", self.path, line)
        header = self.header
        assert header is not None
        start = inference.start_block_height
        end = inference.end_block_height
        if not header.first_height <= start <= header.last_height:
            raise self.error(
                line,
                "inference.start_block_height",
                f"{start} is outside the trace's heights "
                f"[{header.first_height}, {header.last_height}]",
            )
        status = inference.status
        if status in FINISHED_LIKE:
            if not inference.executed_by:
                raise self.error(
                    line,
                    "inference.executed_by",
                    f"missing: required for status {get_status_name(status)}",
                )
            if end <= 0:
                raise self.error(
                    line,
                    "inference.end_block_height",
                    f"missing: required for status {get_status_name(status)}",
                )
        elif is_declined(inference) and end < start:
            raise self.error(
                line,
                "inference.end_block_height",
                f"{end} is before start {start} for a declined inference (STARTED with "
                "end_block_height set)",
            )
        key = (start, inference.inference_id)
        if self.last_inference is not None and key <= self.last_inference:
            what = "a duplicate of" if key == self.last_inference else "out of order after"
            raise self.error(
                line,
                "inference.start_block_height",
                f"(start {start}, id {inference.inference_id!r}) is {what} line "
                f"{self.last_inference_line} (start {self.last_inference[0]}, "
                f"id {self.last_inference[1]!r}): inference lines must be ordered by "
                "(start_block_height, inference_id)",
            )
        if start < self.max_summary_height:
            raise self.error(
                line,
                "inference.start_block_height",
                f"{start} is before the epoch_summary of line {self.max_summary_line} "
                f"(height {self.max_summary_height}): every inference that started before a "
                "summary's height must come before it",
            )
        self.last_inference = key
        self.last_inference_line = line
        return InferenceRecord(line, inference)

    def parse_summary(self, data: dict[str, Any], line: int) -> EpochSummaryRecord:
        self.require_prologue(line, "epoch_summary")
        epoch_index = int(data["epoch_index"])
        height = int(data["height"])
        header = self.header
        assert header is not None
        if not header.first_height <= height <= header.last_height:
            raise self.error(
                line,
                "epoch_summary.height",
                f"{height} is outside the trace's heights "
                f"[{header.first_height}, {header.last_height}]",
            )
        if epoch_index <= self.last_summary_epoch:
            raise self.error(
                line,
                "epoch_summary.epoch_index",
                f"{epoch_index} does not follow the previous summary's epoch "
                f"{self.last_summary_epoch}",
            )
        if height < self.max_summary_height:
            raise self.error(
                line,
                "epoch_summary.height",
                f"{height} is below the previous summary's height {self.max_summary_height}",
            )
        summaries = []
        seen: set[str] = set()
        for i, item in enumerate(data["summaries"]):
            s = _parse_message(
                item, EpochPerformanceSummary, f"epoch_summary.summaries[{i}]", self.path, line
            )
            if "epoch_index" in item and s.epoch_index != epoch_index:
                raise self.error(
                    line,
                    f"epoch_summary.summaries[{i}].epoch_index",
                    f"{s.epoch_index} differs from the line's epoch_index {epoch_index}",
                )
            s.epoch_index = epoch_index
            if s.participant_id in seen:
                raise self.error(
                    line,
                    f"epoch_summary.summaries[{i}].participant_id",
                    f"duplicate participant {s.participant_id!r}",
                )
            seen.add(s.participant_id)
            summaries.append(s)
        declines = []
        declined: set[str] = set()
        for i, item in enumerate(data.get("epoch_declines", ())):
            where = f"epoch_summary.epoch_declines[{i}]"
            d = _parse_message(item, EpochDeclines, where, self.path, line)
            if "epoch_index" in item and d.epoch_index != epoch_index:
                raise self.error(
                    line,
                    f"{where}.epoch_index",
                    f"{d.epoch_index} differs from the line's epoch_index {epoch_index}",
                )
            d.epoch_index = epoch_index
            if d.address in declined:
                raise self.error(line, f"{where}.address", f"duplicate address {d.address!r}")
            declined.add(d.address)
            declines.append(d)
        self.last_summary_epoch = epoch_index
        self.max_summary_height = height
        self.max_summary_line = line
        return EpochSummaryRecord(
            line,
            epoch_index,
            height,
            tuple(summaries),
            tuple(declines) if "epoch_declines" in data else None,
        )


@dataclass(slots=True)
class TraceCursor:
    """Where :func:`iterate_trace` is: the reader's ordering state, and the byte offset and
    number of the last line read. A copy taken between records resumes the stream there."""

    reader: _Reader | None = None
    offset: int = 0
    line: int = 0


def iterate_trace(
    path: str | os.PathLike[str],
    *,
    skip_bad: bool = False,
    bad_lines: BadLines | None = None,
    cursor: TraceCursor | None = None,
) -> Iterator[TraceRecord]:
    """Stream a trace's records; the first one is always the :class:`Header`.

    Raises :class:`TraceError` on the first bad line, unless ``skip_bad``: then bad lines (other
    than the header) are skipped and recorded in ``bad_lines``. ``cursor`` is kept up to date
    as lines are read; one holding a reader (a resumed replay's) continues after its line.
    """
    name = os.fspath(path)
    if cursor is None:
        cursor = TraceCursor()
    if cursor.reader is None:
        cursor.reader = _Reader(name)
    reader = cursor.reader
    with open(name, "rb") as handle:
        handle.seek(cursor.offset)
        number = cursor.line
        for number, raw in enumerate(handle, start=cursor.line + 1):  # noqa: B007
            cursor.offset += len(raw)
            cursor.line = number
            try:
                record = reader.parse(raw, number)
            except TraceError as exc:
                if not skip_bad or reader.header is None:
                    raise
                if bad_lines is not None:
                    bad_lines.add(exc)
                continue
            yield record
        if reader.header is None:
            raise TraceError(name, max(number, 1), "type", "the trace has no header line")


def read_header(path: str | os.PathLike[str]) -> Header:
    """The header of a trace (reads only the first line)."""
    for record in iterate_trace(path):
        assert isinstance(record, Header)
        return record
    raise AssertionError("unreachable")
