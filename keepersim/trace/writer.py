"""Write a run as a trace (``docs/trace-format.md``) while it runs.

Lines come out in height order with memory bounded by the inferences in flight:

* ``header`` first;
* ``params`` at the genesis height (0), then at every height where new params took effect (the
  chain's Params and keepersim's ExtensionParams in force together);
* ``participants`` at each epoch's first height (0 for epoch 0; the settlement height ``H`` for
  the epoch formed at ``H``), read from the chain right after that block, with keepersim's
  registration of their models and ML nodes (``participant_nodes``);
* ``inference`` lines ordered by (``start_block_height``, ``inference_id``), written once the
  inference resolved (finished, expired, declined) and every inference that started earlier
  was written; the ones still in flight after the last block are written at :meth:`close` as
  the chain holds them (status ``STARTED``);
* ``epoch_summary`` at the settlement height ``H``, after every inference line that started
  before ``H``, with keepersim's declines of the epoch (``epoch_declines``, one per summary);
* ``end``, the closing record (the number of lines before it and their SHA-256), written by
  :meth:`TraceWriter.close` only: a run that fails (:meth:`TraceWriter.abort`) or is killed
  leaves a trace without one, which readers refuse as cut (:mod:`keepersim.trace.integrity`).
  A resumed run (:meth:`TraceWriter.reopen`) hashes the lines already written first, so the
  digest covers the whole file.

At one height the order is :data:`keepersim.trace.format.LINE_ORDER`: params, epoch_summary,
participants, then the inferences that started at that height. JSON shapes are the node REST's
(:func:`keepersim.trace.format.encode_message`): original field names in declaration order,
every field present (defaults included, ``null`` for an unset message), 64-bit integers as
strings, enums as names.
"""

from __future__ import annotations

import hashlib
import heapq
import os
from collections.abc import Iterable
from typing import IO, Any

from keepersim.keeper.keeper import Keeper
from keepersim.trace.format import (
    build_end_line,
    build_header_line,
    build_inference_line,
    build_params_line,
    build_participants_line,
    build_summary_line,
    encode_line,
    encode_message,
    get_line_rank,
)
from keepersim.trace.integrity import read_line_digest
from keepersim.types.messages import (
    EpochPerformanceSummary,
    Inference,
    Participant,
    ValidationWeight,
)
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.state_pb2 import EpochDeclines, ParticipantNodes

__all__ = ["TraceWriter", "get_epoch_declines"]

_RANK_PARAMS = get_line_rank("params")
_RANK_SUMMARY = get_line_rank("epoch_summary")
_RANK_PARTICIPANTS = get_line_rank("participants")
_RANK_INFERENCE = get_line_rank("inference")


def get_epoch_declines(
    keeper: Keeper, epoch_index: int, summaries: Iterable[EpochPerformanceSummary]
) -> list[EpochDeclines]:
    """keepersim's declines of ``epoch_index``, one entry per summary's participant (0 too)."""
    return [
        EpochDeclines(
            epoch_index=epoch_index,
            address=s.participant_id,
            declined_requests=keeper.get_declines(epoch_index, s.participant_id),
        )
        for s in summaries
    ]


class TraceWriter:
    """Streams one run's trace to ``path`` (see the module docstring for the order)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        chain_id: str,
        first_height: int,
        last_height: int,
        scenario: str | None = None,
        seed: int | None = None,
        policy: str | None = None,
        source: str = "simulate",
    ) -> None:
        self._file: IO[bytes] = open(path, "wb")  # noqa: SIM115
        self._digest = hashlib.sha256()  # of every line written (the closing record's)
        self._heap: list[tuple[int, int, str, str]] = []
        self._seq = 0
        # start height -> inferences started then and not yet resolved
        self._unresolved: dict[int, int] = {}
        self._starts_heap: list[int] = []
        self._closed = False
        # Pending lines added (the line) / written (None) since the last get_state; None: off.
        self._journal: dict[tuple[int, int, str], str | None] | None = None
        self._last_params: tuple[int, ModuleParams] | None = None
        self.lines = 0
        header = build_header_line(
            chain_id=chain_id,
            source=source,
            first_height=first_height,
            last_height=last_height,
            scenario=scenario,
            seed=seed,
            policy=policy,
        )
        self._write(encode_line(header))

    # producers ---------------------------------------------------------------------------

    def add_params(self, height: int, params: ModuleParams) -> None:
        """Params in force from ``height``; the same params again at the same height (a block
        that updated the chain's part and keepersim's, one event each) are written once."""
        if self._last_params == (height, params):
            return
        self._last_params = (height, params)
        line = build_params_line(
            height, encode_message(params.params), encode_message(params.extension_params)
        )
        self._push(height, _RANK_PARAMS, line)

    def add_participants(
        self,
        epoch_index: int,
        height: int,
        participants: Iterable[Participant],
        nodes: Iterable[ParticipantNodes] = (),
        weights: Iterable[ValidationWeight] | None = None,
    ) -> None:
        """``nodes``: keepersim's registration of the participants' models and ML nodes;
        ``weights``: the epoch's group members (weight, reputation, ML nodes), if known."""
        line = build_participants_line(
            epoch_index,
            height,
            [encode_message(p) for p in participants],
            [encode_message(n) for n in nodes],
            None if weights is None else [encode_message(w) for w in weights],
        )
        self._push(height, _RANK_PARTICIPANTS, line)

    def add_epoch_summary(
        self,
        epoch_index: int,
        height: int,
        summaries: Iterable[EpochPerformanceSummary],
        declines: Iterable[EpochDeclines] | None = None,
    ) -> None:
        """``declines``: keepersim's declines of the epoch (:func:`get_epoch_declines`); None
        leaves ``epoch_declines`` out (not recorded)."""
        line = build_summary_line(
            epoch_index,
            height,
            [encode_message(s) for s in summaries],
            None if declines is None else [encode_message(d) for d in declines],
        )
        self._push(height, _RANK_SUMMARY, line)

    def add_started(self, start_height: int) -> None:
        """An inference started at ``start_height``; its line comes with :meth:`add_resolved`."""
        n = self._unresolved.get(start_height, 0)
        if n == 0:
            heapq.heappush(self._starts_heap, start_height)
        self._unresolved[start_height] = n + 1

    def add_resolved(self, inference: Inference) -> None:
        """A started inference resolved; ``inference`` is its record after the block."""
        start = inference.start_block_height
        n = self._unresolved.get(start, 0)
        if n <= 0:
            raise ValueError(f"inference {inference.inference_id!r} was not started at {start}")
        self._unresolved[start] = n - 1
        self._push_inference(inference)

    def _push_inference(self, inference: Inference) -> None:
        line = build_inference_line(encode_message(inference))
        entry = (
            inference.start_block_height,
            _RANK_INFERENCE,
            inference.inference_id,
            encode_line(line),
        )
        heapq.heappush(self._heap, entry)
        if self._journal is not None:
            self._journal[entry[:3]] = entry[3]

    def _push(self, height: int, rank: int, line: dict[str, Any]) -> None:
        self._seq += 1
        entry = (height, rank, f"{self._seq:012d}", encode_line(line))
        heapq.heappush(self._heap, entry)
        if self._journal is not None:
            self._journal[entry[:3]] = entry[3]

    # writing -----------------------------------------------------------------------------

    def flush(self, committed_height: int) -> None:
        """Write every line that nothing still unknown can precede (call after each block)."""
        starts = self._starts_heap
        while starts and self._unresolved.get(starts[0], 0) == 0:
            self._unresolved.pop(heapq.heappop(starts), None)
        watermark = starts[0] if starts else committed_height + 1
        limit = (watermark, _RANK_INFERENCE)
        heap, journal = self._heap, self._journal
        while heap and (heap[0][0], heap[0][1]) < limit:
            entry = heapq.heappop(heap)
            self._write(entry[3])
            if journal is not None and journal.pop(entry[:3], None) is None:
                journal[entry[:3]] = None  # stored by an earlier checkpoint: delete it

    def close(self, in_flight: Iterable[Inference] = ()) -> None:
        """Write the inferences still in flight (as given), everything pending and the closing
        record (the trace is whole); close."""
        if self._closed:
            return
        for inference in in_flight:
            self._push_inference(inference)
        heap = self._heap
        while heap:
            self._write(heapq.heappop(heap)[3])
        self._write(encode_line(build_end_line(self.lines, self._digest.hexdigest())))
        self._unresolved.clear()
        self._starts_heap.clear()
        self._file.close()
        self._closed = True

    def abort(self) -> None:
        """Close the file without writing what is pending or the closing record (a failed run:
        readers refuse the trace as cut)."""
        if not self._closed:
            self._file.close()
            self._closed = True

    # resuming -----------------------------------------------------------------------------

    def track_pending(self) -> None:
        """Record from now on which pending lines come and go (:meth:`get_state`)."""
        self._journal = {}

    def get_state(self) -> tuple[dict[str, Any], dict[tuple[int, int, str], str | None]]:
        """What :meth:`reopen` needs to continue this trace: the scalars, and the pending lines
        added (a line) or written out (None) since the last call (see :meth:`track_pending`).
        Flushes the file to the OS first, so the recorded ``offset`` bytes exist even if the
        process is killed right after."""
        self._file.flush()
        scalars = {
            "offset": os.lseek(self._file.fileno(), 0, os.SEEK_CUR),
            "seq": self._seq,
            "unresolved": self._unresolved,
            "starts_heap": self._starts_heap,
            "lines": self.lines,
        }
        delta, self._journal = self._journal or {}, {}
        return scalars, delta

    @classmethod
    def reopen(
        cls,
        path: str | os.PathLike[str],
        scalars: dict[str, Any],
        pending: Iterable[tuple[tuple[int, int, str], str]],
    ) -> TraceWriter:
        """Continue a trace from :meth:`get_state` (the scalars and every pending line): the
        file is cut back to the recorded offset (lines written after it belong to blocks that
        were never committed) and the lines before it are hashed again for the closing record;
        pending lines stay tracked."""
        offset = int(scalars["offset"])
        size = os.path.getsize(path)
        if size < offset:
            raise ValueError(
                f"it has {size} bytes, fewer than the {offset} written before the last "
                "committed block: it was changed since"
            )
        self = cls.__new__(cls)
        self._file = open(path, "r+b")  # noqa: SIM115
        try:
            self._file.truncate(offset)
            self._digest, lines = read_line_digest(self._file, offset)
            if lines != scalars["lines"]:
                raise ValueError(
                    f"its first {offset} bytes hold {lines} lines, not the {scalars['lines']} "
                    "written before the last committed block: it was changed since"
                )
        except BaseException:
            self._file.close()
            raise
        self._file.seek(offset)
        self._heap = [(*key, line) for key, line in pending]
        heapq.heapify(self._heap)
        self._seq = scalars["seq"]
        self._unresolved = scalars["unresolved"]
        self._starts_heap = scalars["starts_heap"]
        self._closed = False
        self._journal = {}
        self._last_params = None  # a duplicate comes in the same block, never across a resume
        self.lines = scalars["lines"]
        return self

    def _write(self, line: str) -> None:
        data = (line + "\n").encode()
        self._file.write(data)
        self._digest.update(data)
        self.lines += 1
