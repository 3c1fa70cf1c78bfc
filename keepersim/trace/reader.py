"""Streaming trace reader: typed records, each line checked against the JSON Schema, parsed into
the protobuf types, and checked against the ordering rules of the format (docs/trace-format.md).

Before the first record, the file's end is checked (:func:`keepersim.trace.integrity.check_trace_end`):
a version-3 trace without its closing record (cut, or its run did not finish) or whose closing
record does not match is refused; with ``allow_partial`` a cut one is read up to its last whole
line, and its :class:`Header` says where it ends (``cut``, ``last_height`` that line's height).
The closing record itself is not yielded.

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

Checks per line, in order: UTF-8 and JSON (orjson); the schema of the line's ``type``
(:mod:`keepersim.trace.validate`, jsonschema-rs over the schema generated from the ``.proto``
files, so every chain object has exactly the proto's fields; an unknown field is an error naming
it); the protobuf parse (:mod:`keepersim.trace.build`; ranges of 64-bit integers); the rules the
schema cannot say:

* the first line is the (only) header; ``first_height >= 1``, ``last_height >= first_height``;
* the header's ``version`` is :data:`keepersim.trace.format.TRACE_VERSION` (a version-1 trace, from before the chain's
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
:func:`keepersim.types.chain_json.parse_chain_json`. A params line's chain ``Params`` go
through :func:`keepersim.types.chain_params_json.parse_chain_params`: fields an older node's
params lack (absent keys) are filled as the chain's upgrades filled them, with a warning.

Memory is constant: the reader keeps only the ordering state.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from google.protobuf.message import Message

from keepersim.keeper.inferences import is_declined_state
from keepersim.limits import MAX_TRACE_LINE_BYTES
from keepersim.trace.build import FastParseError, get_builder
from keepersim.trace.format import (
    FINISHED_LIKE,
    RECORD_KINDS,
    TRACE_VERSION,
    VERSION_1_ERROR,
    decode_line,
    get_status_name,
)
from keepersim.trace.integrity import TraceEnd, check_trace_end
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
from keepersim.trace.validate import check_line, describe, get_validator
from keepersim.types.chain_json import parse_chain_json
from keepersim.types.chain_params_json import parse_chain_params
from keepersim.types.errors import ChainJsonError, InvalidParamsError
from keepersim.types.messages import (
    EpochPerformanceSummary,
    Inference,
    Participant,
    ValidationWeight,
)
from keepersim.types.params import validate_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams, ModuleParams
from keepersim.types.pb.keepersim.v1.state_pb2 import EpochDeclines, ParticipantNodes

__all__ = ["TraceCursor", "compute_trace_sha256", "iterate_trace", "read_header"]

# --------------------------------------------------------------------------------------------

M = TypeVar("M", bound=Message)


def _parse_message(data: Any, message_class: type[M], where: str, path: str, line: int) -> M:
    """Build the protobuf from a schema-valid dict; parse_chain_json is the reference and gives
    the errors."""
    try:
        built = get_builder(message_class).build(data)
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


_INFERENCE_BUILDER = get_builder(Inference)


def _join(root: str, path: str) -> str:
    return f"{root}.{path}" if path else root


class _Reader:
    """Parses lines and keeps the ordering state (constant memory)."""

    def __init__(self, path: str, end: TraceEnd | None = None) -> None:
        self.path = path
        self.end = end
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

    def decode(self, raw: bytes, line: int) -> Any:
        """The line's JSON value; a line that does not parse is looked at again for the
        error."""
        try:
            return decode_line(raw)
        except ValueError as exc:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as bad:
                raise self.error(
                    line, "<line>", f"not UTF-8: {bad.reason} at byte {bad.start}"
                ) from bad
            if not text.strip():
                raise self.error(line, "<line>", "empty line") from exc
            msg = getattr(exc, "msg", str(exc))
            colno = getattr(exc, "colno", 0)
            raise self.error(line, "<line>", f"not valid JSON: {msg} (column {colno})") from exc

    def parse(self, raw: bytes, line: int) -> TraceRecord:
        try:
            data = decode_line(raw)
        except ValueError:
            data = self.decode(raw, line)  # raises, naming what is wrong
        if (  # nearly every line: a valid inference line after the header
            data.__class__ is dict
            and data.get("type") == "inference"
            and self.header is not None
            and get_validator("inference").is_valid(data)
        ):
            return self.parse_inference(data, line)
        if not isinstance(data, dict):
            raise self.error(line, "<line>", f"expected a JSON object, got {describe(data)}")
        record_type = data.get("type")
        if record_type not in RECORD_KINDS:
            raise self.error(
                line, "type", f"expected one of {list(RECORD_KINDS)}, got {describe(record_type)}"
            )
        version = data.get("version")
        if record_type == "header" and type(version) is int and version == 1:
            raise self.error(line, "header.version", VERSION_1_ERROR)
        problem = check_line(record_type, data)
        if problem is not None:
            raise self.error(line, *problem)
        if self.header is None and record_type != "header":
            raise self.error(
                line, "type", f"the first line must be the header, got {record_type!r}"
            )
        if record_type == "inference":  # nearly every line
            return self.parse_inference(data, line)
        if record_type == "end":
            assert self.header is not None
            where = (
                "before the last line"
                if self.header.version == TRACE_VERSION
                else f"in a version {self.header.version} trace"
            )
            raise self.error(
                line,
                "type",
                f"a closing record (end) {where}: it can only be the last line of a version "
                f"{TRACE_VERSION} trace",
            )
        if record_type == "header":
            return self.parse_header(data, line)
        if record_type == "params":
            return self.parse_params(data, line)
        if record_type == "participants":
            return self.parse_participants(data, line)
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
        cut = None
        end = self.end
        if end is not None and end.state == "cut" and end.last_height is not None:
            cut = TraceCut(end.lines, end.last_height, last)
            last = min(last, end.last_height)
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
            cut=cut,
        )
        self.header = header
        return header

    def parse_params(self, data: dict[str, Any], line: int) -> ParamsRecord:
        height = int(data["height"])
        try:  # the one chain-params reader: an older node's absent fields are filled
            chain = parse_chain_params(data["params"], where=f"{self.path}:{line}")
        except ChainJsonError as exc:
            raise self.error(line, _join("params.params", exc.path), exc.problem) from exc
        params = ModuleParams(
            params=chain,
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
        weights = []
        members: set[str] = set()
        for i, item in enumerate(data.get("validation_weights", ())):
            where = f"participants.validation_weights[{i}]"
            w = _parse_message(item, ValidationWeight, where, self.path, line)
            if w.member_address in members:
                raise self.error(
                    line, f"{where}.member_address", f"duplicate address {w.member_address!r}"
                )
            members.add(w.member_address)
            weights.append(w)
        self.last_participants = (epoch_index, height)
        self.have_participants = True
        return ParticipantsRecord(
            line, epoch_index, height, tuple(participants), tuple(nodes), tuple(weights)
        )

    def require_prologue(self, line: int, record_type: str) -> None:
        if not (self.have_params and self.have_participants):
            missing = "params" if not self.have_params else "participants"
            raise self.error(line, "type", f"{record_type} line before the first {missing} line")

    def parse_inference(self, data: dict[str, Any], line: int) -> InferenceRecord:
        if not (self.have_params and self.have_participants):
            self.require_prologue(line, "inference")  # raises, saying which is missing
        del data["type"]  # the line's own dict: what is left is the Inference
        # Its values directly when they are all strings (nearly every line: the Inference is
        # built only if asked for), else from the Inference built now.
        try:
            kwargs = _INFERENCE_BUILDER.compute_flat_kwargs(data)
        except FastParseError:
            kwargs = None  # _parse_message words the error
        if kwargs is not None:
            record = InferenceRecord.from_kwargs(line, kwargs)
        else:
            record = InferenceRecord(
                line, _parse_message(data, Inference, "inference", self.path, line)
            )
        header = self.header
        assert header is not None
        start = record.start_height
        end = record.end_height
        if not header.first_height <= start <= header.last_height:
            raise self.error(
                line,
                "inference.start_block_height",
                f"{start} is outside the trace's heights "
                f"[{header.first_height}, {header.last_height}]",
            )
        status = record.status
        if status in FINISHED_LIKE:
            if not record.executed_by:
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
        elif is_declined_state(status, end) and end < start:
            raise self.error(
                line,
                "inference.end_block_height",
                f"{end} is before start {start} for a declined inference (STARTED with "
                "end_block_height set)",
            )
        inference_id = record.inference_id
        key = (start, inference_id)
        if self.last_inference is not None and key <= self.last_inference:
            what = "a duplicate of" if key == self.last_inference else "out of order after"
            raise self.error(
                line,
                "inference.start_block_height",
                f"(start {start}, id {inference_id!r}) is {what} line "
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
        return record

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
    allow_partial: bool = False,
) -> Iterator[TraceRecord]:
    """Stream a trace's records; the first one is always the :class:`Header`.

    Raises :class:`TraceError` for a trace without its closing record (unless ``allow_partial``:
    then its whole lines are read, and the header says where it ends) or whose closing record
    does not match, and on the first bad line, unless ``skip_bad``: then bad lines (other than
    the header) are skipped and recorded in ``bad_lines``. ``cursor`` is kept up to date as lines
    are read; one holding a reader (a resumed replay's) continues after its line.
    """
    name = os.fspath(path)
    end = check_trace_end(name, allow_partial=allow_partial)
    stop = end.records_end
    if cursor is None:
        cursor = TraceCursor()
    if cursor.reader is None:
        cursor.reader = _Reader(name, end)
    reader = cursor.reader
    with open(name, "rb") as handle:
        handle.seek(cursor.offset)
        number = cursor.line
        limit = MAX_TRACE_LINE_BYTES + 1
        lines = iter(partial(handle.readline, limit), b"")
        for number, raw in enumerate(lines, start=cursor.line + 1):  # noqa: B007
            if stop is not None and cursor.offset >= stop:
                break
            size = len(raw)
            if size == limit and not raw.endswith(b"\n"):
                raise TraceError(
                    name,
                    number,
                    "line",
                    f"longer than the limit of {MAX_TRACE_LINE_BYTES:,} bytes for a trace line "
                    "(keepersim/limits.py): not a trace, or a line without its end",
                )
            cursor.offset += size
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


def compute_trace_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a trace's bytes (hex), e.g. to fingerprint a resumable replay."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
