"""Write a run as a trace (``docs/trace-format.md``) while it runs.

Lines come out in height order with memory bounded by the inferences in flight:

* ``header`` first;
* ``params`` at the genesis height (0), then at every height where new params took effect;
* ``participants`` at each epoch's first height (0 for epoch 0; the settlement height ``H`` for
  the epoch formed at ``H``), read from the chain right after that block;
* ``inference`` lines ordered by (``start_block_height``, ``inference_id``), written once the
  inference resolved (finished, expired, declined) and every inference that started earlier
  was written; the ones still in flight after the last block are written at :meth:`close` as
  the chain holds them (status ``STARTED``);
* ``epoch_summary`` at the settlement height ``H``, after every inference line that started
  before ``H``.

At one height the order is: params, epoch_summary, participants, then the inferences that
started at that height. JSON shapes are the node REST's: protobuf JSON with the original field
names, every field present (defaults included), 64-bit integers as strings, enums as names.
"""

from __future__ import annotations

import heapq
import json
import os
from collections.abc import Iterable
from typing import IO, Any

from google.protobuf import json_format
from google.protobuf.message import Message

from keepersim.types.pb.params_pb2 import Params
from keepersim.types.pb.types_pb2 import EpochPerformanceSummary, Inference, Participant

__all__ = ["TRACE_VERSION", "TraceWriter", "message_to_json"]

TRACE_VERSION = 1

_RANK_PARAMS = 0
_RANK_SUMMARY = 1
_RANK_PARTICIPANTS = 2
_RANK_INFERENCE = 3


def message_to_json(msg: Message) -> dict[str, Any]:
    """A message as the node's REST API shows it (original names, defaults, u64 as strings)."""
    return json_format.MessageToDict(
        msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def _dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


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
        self._file: IO[str] = open(path, "w", encoding="utf-8")  # noqa: SIM115
        self._heap: list[tuple[int, int, str, str]] = []
        self._seq = 0
        # start height -> inferences started then and not yet resolved
        self._unresolved: dict[int, int] = {}
        self._starts_heap: list[int] = []
        self._closed = False
        self.lines = 0
        header: dict[str, Any] = {
            "type": "header",
            "version": TRACE_VERSION,
            "chain_id": chain_id,
            "source": source,
            "first_height": str(first_height),
            "last_height": str(last_height),
        }
        if scenario is not None:
            header["scenario"] = scenario
        if seed is not None:
            header["seed"] = seed
        if policy is not None:
            header["policy"] = policy
        self._write(_dumps(header))

    # producers ---------------------------------------------------------------------------

    def add_params(self, height: int, params: Params) -> None:
        line = {"type": "params", "height": str(height), "params": message_to_json(params)}
        self._push(height, _RANK_PARAMS, line)

    def add_participants(
        self, epoch_index: int, height: int, participants: Iterable[Participant]
    ) -> None:
        line = {
            "type": "participants",
            "epoch_index": str(epoch_index),
            "height": str(height),
            "participants": [message_to_json(p) for p in participants],
        }
        self._push(height, _RANK_PARTICIPANTS, line)

    def add_epoch_summary(
        self, epoch_index: int, height: int, summaries: Iterable[EpochPerformanceSummary]
    ) -> None:
        line = {
            "type": "epoch_summary",
            "epoch_index": str(epoch_index),
            "height": str(height),
            "summaries": [message_to_json(s) for s in summaries],
        }
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
        line = {"type": "inference", **message_to_json(inference)}
        heapq.heappush(
            self._heap,
            (inference.start_block_height, _RANK_INFERENCE, inference.inference_id, _dumps(line)),
        )

    def _push(self, height: int, rank: int, line: dict[str, Any]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (height, rank, f"{self._seq:012d}", _dumps(line)))

    # writing -----------------------------------------------------------------------------

    def flush(self, committed_height: int) -> None:
        """Write every line that nothing still unknown can precede (call after each block)."""
        starts = self._starts_heap
        while starts and self._unresolved.get(starts[0], 0) == 0:
            self._unresolved.pop(heapq.heappop(starts), None)
        watermark = starts[0] if starts else committed_height + 1
        limit = (watermark, _RANK_INFERENCE)
        heap = self._heap
        while heap and (heap[0][0], heap[0][1]) < limit:
            self._write(heapq.heappop(heap)[3])

    def close(self, in_flight: Iterable[Inference] = ()) -> None:
        """Write the inferences still in flight (as given) and everything pending; close."""
        if self._closed:
            return
        for inference in in_flight:
            self._push_inference(inference)
        heap = self._heap
        while heap:
            self._write(heapq.heappop(heap)[3])
        self._unresolved.clear()
        self._starts_heap.clear()
        self._file.close()
        self._closed = True

    def abort(self) -> None:
        """Close the file without writing what is pending (a failed run)."""
        if not self._closed:
            self._file.close()
            self._closed = True

    def _write(self, line: str) -> None:
        self._file.write(line)
        self._file.write("\n")
        self.lines += 1
