"""Export a node's data over its REST API into a trace (``docs/trace-format.md``).

``keepersim export --node URL --epochs A-B --out TRACE`` reads, from a Gonka node (or
``keepersim serve``):

* ``/cosmos/base/tendermint/v1beta1/node_info`` (chain id), ``.../params`` (the chain's params),
  keepersim's ``/keepersim/v1/params`` (its extension params; asked only of a node whose
  ``node_info`` says it is keepersim, other nodes get keepersim's defaults), ``.../epoch_info``
  (height and latest epoch), ``.../epoch_group_data/{e}`` (each epoch's first height) and epoch
  A's model groups ``.../epoch_group_data/{A}?model_id=m`` (who serves which model with which ML
  nodes) -- the *snapshot*, taken once and kept for a resumed run;
* ``.../participant`` and ``.../inference``, page by page following ``pagination.next_key``
  (a listing is sequential: each page's key comes from the previous page);
* ``.../epoch_performance_summary/{e}`` for every settled epoch in A..B (and, from ``keepersim
  serve``, its declines ``/keepersim/v1/declines/{e}``: the line's ``epoch_declines``, one per
  summary; a chain node counts none, and its lines have no ``epoch_declines``).

The trace: ``header`` (source ``export``, ``first_height`` = first height of epoch A + 1,
``last_height`` = the settlement height of B, or the node's height if B is the current epoch),
``params`` (the chain's params and ``extension_params``: the node's from ``keepersim serve``,
keepersim's defaults from a chain node) and ``participants`` (the node's current values: a node
serves no history of them; ``participant_nodes``, the models and ML nodes of each member of
epoch A's group, come from epoch A's groups: the model sub-groups a member belongs to, and the ML
nodes of its validation weights there) at the first height of A, the ``inference`` lines of
epochs A..B (``epoch_id``; started at or before the snapshot height) ordered by
(``start_block_height``, ``inference_id``), and one
``epoch_summary`` per settled epoch at its settlement height, in the TraceWriter's order
(by height; at one height: params, epoch_summary, participants, inferences). Every object is
re-encoded through the protobuf types, so lines are byte-identical to ``keepersim simulate
--trace-out``'s for the same records. Node JSON is read by
:func:`~keepersim.types.chain_json.parse_chain_json` with ``ignore_unknown``: fields keepersim's
protos do not know (a newer chain's) are left out of the trace and listed by path, per record
kind, in the result's ``unknown_fields`` (``validation_weights[].ml_nodes[].new_field``); a bad
value stops the export naming the URL and the field.

Fetching (the export back-off fix, :mod:`keepersim.export.fetch`): ``concurrency`` worker
threads (default 4: the two listings and the per-epoch summaries run in parallel), a 60 s
timeout, at most 3 attempts retried only on timeout / transport error / 429 / 5xx / a 2xx body
that is not JSON (a truncated answer); a 4xx (or another non-2xx status) stops the export at once
with an :class:`ExportError` naming the URL, and so do retries that run out; every retryable
failure pauses *all* workers (one :class:`~keepersim.export.backoff.BackoffGate`,
``base * 2**(n-1)`` s, base 5, cap 120).

Resuming: ``OUT.progress.json`` records the snapshot and every finished unit (each listing page
with its start and next key, each epoch's summaries); each unit's records are in a part file in
``OUT.parts/`` written atomically (a temporary file, then ``os.replace``) *before* the progress
file names it. A rerun with the same node and epochs skips finished units and continues each
listing from its last recorded ``next_key``: no record is fetched into the trace twice or lost.
The trace is assembled from the part files and written atomically; the progress file and the
parts are removed after success.

Limits: the snapshot fixes the height range, not the records: if the node's chain advances
during an export, inferences listed later show their later status (export from a halted node or
accept this); the assembly sorts the inference lines in memory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
from google.protobuf.message import Message

from keepersim.export.backoff import (
    DEFAULT_BACKOFF_BASE_SECONDS,
    DEFAULT_BACKOFF_CAP_SECONDS,
    BackoffGate,
)
from keepersim.export.fetch import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_TIMEOUT_SECONDS,
    ExportFetchError,
    Fetcher,
)
from keepersim.outputs import write_text_atomic
from keepersim.trace.format import (
    build_header_line,
    build_inference_line,
    build_params_line,
    build_participants_line,
    build_summary_line,
    encode_line,
    encode_message,
    get_line_rank,
)
from keepersim.types.chain_json import parse_chain_json
from keepersim.types.errors import ChainJsonError
from keepersim.types.messages import (
    EpochGroupData,
    EpochPerformanceSummary,
    Inference,
    MLNodeInfo,
    Params,
    Participant,
)
from keepersim.types.params import get_default_extension_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams
from keepersim.types.pb.keepersim.v1.state_pb2 import EpochDeclines, ParticipantNodes

__all__ = [
    "CHAIN_PREFIX",
    "DEFAULT_PAGE_LIMIT",
    "ExportError",
    "ExportOptions",
    "ExportResult",
    "export_trace",
    "parse_epoch_range",
]

CHAIN_PREFIX = "/productscience/inference/inference"
NODE_INFO_PATH = "/cosmos/base/tendermint/v1beta1/node_info"
#: keepersim's extension params and declines (``keepersim serve``; a chain node has neither).
EXTENSION_PARAMS_PATH = "/keepersim/v1/params"
DECLINES_PATH = "/keepersim/v1/declines"
#: ``node_info.application_version.app_name`` of ``keepersim serve``.
KEEPERSIM_APP_NAME = "keepersim"
DEFAULT_PAGE_LIMIT = 100
PROGRESS_VERSION = 2  # 2: the snapshot holds extension params and participant nodes

M = TypeVar("M", bound=Message)
_LIST_INDEX = re.compile(r"\[\d+\]")
UnitHook = Callable[[str, str], None]


class ExportError(Exception):
    """The export stopped; the message names the URL when a fetch failed. ``result`` holds the
    counters so far (the progress file keeps what was done, for a rerun)."""

    def __init__(self, message: str, result: ExportResult | None = None) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True, slots=True)
class ExportOptions:
    concurrency: int = DEFAULT_CONCURRENCY
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff_base: float = DEFAULT_BACKOFF_BASE_SECONDS
    backoff_cap: float = DEFAULT_BACKOFF_CAP_SECONDS
    page_limit: int = DEFAULT_PAGE_LIMIT
    progress: bool = False
    restart: bool = False

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if not 1 <= self.page_limit <= 1000:
            raise ValueError(f"page limit must be in [1, 1000], got {self.page_limit}")


@dataclass
class ExportResult:
    node: str
    out: str
    epochs: tuple[int, int]
    chain_id: str = ""
    first_height: int = 0
    last_height: int = 0
    fetch_requests: int = 0
    fetch_retries: int = 0
    fetch_errors: int = 0
    fetch_bad_bodies: int = 0
    fatal_errors: int = 0
    gave_up: int = 0
    fetch_backoff_pauses: int = 0
    pages_fetched: int = 0
    units_resumed: int = 0
    records: dict[str, int] = field(default_factory=dict)
    records_written: int = 0
    skipped_inferences: int = 0
    unknown_fields: dict[str, list[str]] = field(default_factory=dict)
    duration_seconds: float = 0.0
    ok: bool = False
    error: str | None = None

    @property
    def records_per_second(self) -> float:
        return self.records_written / self.duration_seconds if self.duration_seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "out": self.out,
            "epochs": list(self.epochs),
            "chain_id": self.chain_id,
            "first_height": self.first_height,
            "last_height": self.last_height,
            "fetches": self.fetch_requests,
            "fetch_retries": self.fetch_retries,
            "fetch_errors": self.fetch_errors,
            "fetch_bad_bodies": self.fetch_bad_bodies,
            "fatal_errors": self.fatal_errors,
            "gave_up": self.gave_up,
            "fetch_backoff_pauses": self.fetch_backoff_pauses,
            "pages_fetched": self.pages_fetched,
            "units_resumed": self.units_resumed,
            "records": dict(self.records),
            "records_written": self.records_written,
            "skipped_inferences": self.skipped_inferences,
            "unknown_fields": {k: sorted(v) for k, v in self.unknown_fields.items()},
            "duration_seconds": round(self.duration_seconds, 6),
            "records_per_second": round(self.records_per_second, 3),
            "ok": self.ok,
            "error": self.error,
        }


def parse_epoch_range(text: str) -> tuple[int, int]:
    """``"A-B"`` or ``"A"`` -> (A, B); raises ValueError naming the problem."""
    first, sep, last = text.strip().partition("-")
    try:
        a = int(first)
        b = int(last) if sep else a
    except ValueError:
        raise ValueError(f"--epochs: expected A-B (e.g. 3-5) or A, got {text!r}") from None
    if a < 0 or b < a:
        raise ValueError(f"--epochs: need 0 <= A <= B, got {text!r}")
    return a, b


def _write_atomic(path: Path, text: str) -> None:
    write_text_atomic(path, text)


# --------------------------------------------------------------------------------------------
# Progress state
# --------------------------------------------------------------------------------------------


class _Progress:
    """``OUT.progress.json``: the snapshot and the finished units (thread-safe)."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data
        self.lock = threading.Lock()

    @classmethod
    def load_or_create(
        cls, path: Path, node: str, epochs: tuple[int, int], restart: bool
    ) -> tuple[_Progress, bool]:
        if path.exists() and not restart:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise ExportError(
                    f"cannot read progress file {path}: {exc}; rerun with --restart"
                ) from exc
            if data.get("version") != PROGRESS_VERSION:
                raise ExportError(f"{path}: unknown progress version; rerun with --restart")
            if data.get("node") != node or tuple(data.get("epochs", ())) != epochs:
                raise ExportError(
                    f"{path} belongs to another export (node {data.get('node')!r}, epochs "
                    f"{data.get('epochs')}); rerun with --restart to start over"
                )
            return cls(path, data), True
        data = {
            "version": PROGRESS_VERSION,
            "node": node,
            "epochs": list(epochs),
            "snapshot": None,
            "listings": {
                "participants": {"pages": [], "complete": False},
                "inferences": {"pages": [], "complete": False},
            },
            "summaries": {},
            "unknown_fields": {},
            "skipped_inferences": 0,
        }
        progress = cls(path, data)
        progress.save()
        return progress, False

    def save(self) -> None:
        _write_atomic(self.path, json.dumps(self.data, indent=1) + "\n")

    def count_done(self) -> int:
        with self.lock:
            listings = self.data["listings"]
            pages = sum(len(v["pages"]) for v in listings.values())
            return pages + len(self.data["summaries"]) + (1 if self.data["snapshot"] else 0)


# --------------------------------------------------------------------------------------------
# The exporter
# --------------------------------------------------------------------------------------------


class _Exporter:
    def __init__(
        self,
        node: str,
        epochs: tuple[int, int],
        out: Path,
        options: ExportOptions,
        fetcher: Fetcher,
        on_unit: UnitHook | None,
    ) -> None:
        self.node = node.rstrip("/")
        self.epochs = epochs
        self.out = out
        self.options = options
        self.fetcher = fetcher
        self.on_unit = on_unit
        self.parts = out.with_name(out.name + ".parts")
        self.progress_path = out.with_name(out.name + ".progress.json")
        self.stop = threading.Event()
        self.pages_fetched = 0
        self._count_lock = threading.Lock()
        self.bar: Any = None
        self.snapshot: dict[str, Any] = {}

    # fetching ------------------------------------------------------------------------------

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.fetcher.get_json(self.node + path, params)

    def url(self, path: str) -> str:
        return self.node + path

    def parse(self, data: Any, cls: type[M], url: str, kind: str) -> M:
        if not isinstance(data, dict):
            raise ExportError(
                f"GET {url}: expected a {cls.__name__} object, got {type(data).__name__}"
            )
        ignored: list[str] = []
        try:
            message = parse_chain_json(
                data, cls, where=f"GET {url}", ignore_unknown=True, ignored=ignored
            )
        except ChainJsonError as exc:
            raise ExportError(f"{exc} (as {cls.__name__})") from exc
        if ignored:  # a newer chain's fields: recorded by path (list indices as []), never lost
            with self.progress.lock:
                seen = self.progress.data["unknown_fields"].setdefault(kind, [])
                for path in sorted({_LIST_INDEX.sub("[]", p) for p in ignored} - set(seen)):
                    seen.append(path)
        return message

    def field(self, body: Any, name: str, url: str) -> Any:
        if not isinstance(body, dict) or name not in body:
            raise ExportError(f"GET {url}: the answer has no {name!r} field")
        return body[name]

    # snapshot ------------------------------------------------------------------------------

    def get_extension_params(self, info: Any) -> tuple[ExtensionParams, bool]:
        """keepersim's extension params: the node's if it is ``keepersim serve`` (its
        ``node_info`` says so), else keepersim's defaults; and whether they are the node's."""
        app = info.get("application_version") if isinstance(info, dict) else None
        if not isinstance(app, dict) or app.get("app_name") != KEEPERSIM_APP_NAME:
            return get_default_extension_params(), False
        url = self.url(EXTENSION_PARAMS_PATH)
        body = self.field(self.get(EXTENSION_PARAMS_PATH), "extension_params", url)
        return self.parse(body, ExtensionParams, url, "ExtensionParams"), True

    def get_participant_nodes(self, epoch: int, group: Any) -> list[ParticipantNodes]:
        """Each member's models and ML nodes in epoch ``epoch``, from its groups (``group`` is
        the parent's JSON): the model sub-groups it is a member of (``sub_group_models``), and
        the ML nodes of its validation weights in them (by node id, first seen first; the
        parent group's for a member of no sub-group). Address order."""
        path = f"{CHAIN_PREFIX}/epoch_group_data/{epoch}"
        url = self.url(path)
        parent = self.parse(group, EpochGroupData, url, "EpochGroupData")
        models: dict[str, list[str]] = {}
        ml_nodes: dict[str, dict[str, MLNodeInfo]] = {}
        for model in parent.sub_group_models:
            body = self.get(path, {"model_id": model})
            sub = self.parse(
                self.field(body, "epoch_group_data", url), EpochGroupData, url, "EpochGroupData"
            )
            for weight in sub.validation_weights:
                models.setdefault(weight.member_address, []).append(model)
                nodes = ml_nodes.setdefault(weight.member_address, {})
                for node in weight.ml_nodes:
                    nodes.setdefault(node.node_id, node)
        for weight in parent.validation_weights:
            nodes = ml_nodes.setdefault(weight.member_address, {})
            if weight.member_address not in models:
                for node in weight.ml_nodes:
                    nodes.setdefault(node.node_id, node)
        return [
            ParticipantNodes(
                address=address,
                models=models.get(address, []),
                ml_nodes=list(ml_nodes[address].values()),
            )
            for address in sorted(ml_nodes)
        ]

    def take_snapshot(self, pool: ThreadPoolExecutor) -> dict[str, Any]:
        a, b = self.epochs
        info = self.get(NODE_INFO_PATH)
        node_info = self.field(info, "default_node_info", self.url(NODE_INFO_PATH))
        chain_id = node_info.get("network", "") if isinstance(node_info, dict) else ""
        url = self.url(CHAIN_PREFIX + "/params")
        params = self.parse(
            self.field(self.get(CHAIN_PREFIX + "/params"), "params", url), Params, url, "Params"
        )
        extension_params, from_node = self.get_extension_params(info)
        url = self.url(CHAIN_PREFIX + "/epoch_info")
        body = self.get(CHAIN_PREFIX + "/epoch_info")
        try:
            height = int(self.field(body, "block_height", url))
            latest = int(self.field(body, "latest_epoch", url).get("index", 0))
        except (TypeError, ValueError, AttributeError) as exc:
            raise ExportError(f"GET {url}: malformed epoch info: {exc}") from exc
        if b > latest:
            raise ExportError(
                f"epochs {a}-{b}: epoch {b} is beyond the node's latest epoch {latest} "
                f"(height {height})"
            )
        wanted = list(range(a, min(b + 1, latest) + 1))

        def get_group(epoch: int) -> tuple[int, Any]:
            path = f"{CHAIN_PREFIX}/epoch_group_data/{epoch}"
            return epoch, self.field(self.get(path), "epoch_group_data", self.url(path))

        groups = dict(pool.map(get_group, wanted))
        starts: dict[int, int] = {}
        for epoch, group in groups.items():
            try:
                starts[epoch] = int(group.get("poc_start_block_height", 0))
            except (TypeError, ValueError, AttributeError) as exc:
                url = self.url(f"{CHAIN_PREFIX}/epoch_group_data/{epoch}")
                raise ExportError(f"GET {url}: malformed epoch group: {exc}") from exc
        last_height = starts[b + 1] if b < latest else height
        if starts[a] + 1 > last_height:
            raise ExportError(
                f"epochs {a}-{b}: no block committed in them yet (epoch {a} starts after height "
                f"{starts[a]}, the node is at height {height})"
            )
        nodes = self.get_participant_nodes(a, groups[a])
        return {
            "chain_id": chain_id,
            "params": encode_message(params),
            "extension_params": encode_message(extension_params),
            "participant_nodes": [encode_message(n) for n in nodes],
            "height": height,
            "latest_epoch": latest,
            "epoch_starts": {str(e): s for e, s in sorted(starts.items())},
            "first_height": starts[a] + 1,
            "last_height": last_height,
            "policy": extension_params.health_params.policy if from_node else "",
            "keepersim_node": from_node,
        }

    # units ---------------------------------------------------------------------------------

    def record_unit(self, kind: str, detail: str, update: Callable[[dict[str, Any]], None]) -> None:
        with self.progress.lock:
            update(self.progress.data)
            self.progress.save()
        if self.on_unit is not None:
            self.on_unit(kind, detail)

    def advance_bar(self, records: int) -> None:
        with self._count_lock:
            self.pages_fetched += 1
            if self.bar is not None:
                self.bar.update(records)

    def run_listing(self, name: str) -> None:
        """Fetch a listing page by page from where the progress left it."""
        path = f"{CHAIN_PREFIX}/{'participant' if name == 'participants' else 'inference'}"
        field_name = "participant" if name == "participants" else "inference"
        with self.progress.lock:
            listing = self.progress.data["listings"][name]
            if listing["complete"]:
                return
            pages = listing["pages"]
            key = pages[-1]["next_key"] if pages else None
            index = len(pages)
        snap = self.snapshot
        a, b = self.epochs
        while not self.stop.is_set():
            params: dict[str, Any] = {"pagination.limit": self.options.page_limit}
            if key is not None:
                params["pagination.key"] = key
            elif index == 0:
                params["pagination.count_total"] = "true"
            body = self.get(path, params)
            url = self.url(path)
            items = self.field(body, field_name, url)
            pagination = self.field(body, "pagination", url)
            if not isinstance(items, list) or not isinstance(pagination, dict):
                raise ExportError(f"GET {url}: malformed page ({field_name!r} or 'pagination')")
            next_key = pagination.get("next_key") or None
            if next_key is not None and next_key == key:
                raise ExportError(f"GET {url}: pagination.next_key repeats the page key {key!r}")
            if index == 0 and self.bar is not None:
                try:
                    total = int(pagination.get("total") or 0)
                except ValueError:
                    total = 0
                with self._count_lock:
                    self.bar.total = (self.bar.total or 0) + total
                    self.bar.refresh()
            lines: list[str] = []
            skipped = 0
            for item in items:
                if name == "participants":
                    lines.append(
                        encode_line(
                            encode_message(self.parse(item, Participant, url, "Participant"))
                        )
                    )
                    continue
                inference = self.parse(item, Inference, url, "Inference")
                start = inference.start_block_height
                if (
                    not a <= inference.epoch_id <= b
                    or not snap["first_height"] <= start <= snap["last_height"]
                ):
                    skipped += 1
                    continue
                lines.append(encode_line(build_inference_line(encode_message(inference))))
            file_name = f"{name}-{index:06d}.jsonl"
            _write_atomic(self.parts / file_name, "".join(line + "\n" for line in lines))
            page = {"key": key, "next_key": next_key, "records": len(lines), "file": file_name}

            def update(
                data: dict[str, Any], page: dict[str, Any] = page, skipped: int = skipped
            ) -> None:
                listing = data["listings"][name]
                listing["pages"].append(page)
                listing["complete"] = page["next_key"] is None
                data["skipped_inferences"] += skipped

            self.record_unit(name, f"page {index}", update)
            self.advance_bar(len(items))
            if next_key is None:
                return
            key = next_key
            index += 1

    def run_summary(self, epoch: int) -> None:
        if self.stop.is_set():
            return
        path = f"{CHAIN_PREFIX}/epoch_performance_summary/{epoch}"
        url = self.url(path)
        items = self.field(self.get(path), "epochPerformanceSummary", url)
        if not isinstance(items, list):
            raise ExportError(f"GET {url}: 'epochPerformanceSummary' is not a list")
        parsed = [
            self.parse(s, EpochPerformanceSummary, url, "EpochPerformanceSummary") for s in items
        ]
        summaries = [encode_message(s) for s in parsed]
        height = self.snapshot["epoch_starts"][str(epoch + 1)]
        declines = (
            [encode_message(d) for d in self.get_declines(epoch, parsed)]
            if self.snapshot.get("keepersim_node")
            else None
        )
        line = encode_line(build_summary_line(epoch, height, summaries, declines))
        file_name = f"summary-{epoch:06d}.jsonl"
        _write_atomic(self.parts / file_name, line + "\n")

        def update(data: dict[str, Any]) -> None:
            data["summaries"][str(epoch)] = {"file": file_name, "records": len(summaries)}

        self.record_unit("summary", f"epoch {epoch}", update)
        self.advance_bar(len(summaries))

    def get_declines(
        self, epoch: int, summaries: list[EpochPerformanceSummary]
    ) -> list[EpochDeclines]:
        """keepersim's declines of ``epoch`` (``keepersim serve``), one per summary (0 too)."""
        path = f"{DECLINES_PATH}/{epoch}"
        url = self.url(path)
        counts = self.field(self.get(path), "declines", url)
        if not isinstance(counts, dict) or not all(
            type(n) is int and 0 <= n < 2**64 for n in counts.values()
        ):
            raise ExportError(f"GET {url}: 'declines' is not an object of uint64 counts")
        return [
            EpochDeclines(
                epoch_index=epoch,
                address=s.participant_id,
                declined_requests=counts.get(s.participant_id, 0),
            )
            for s in summaries
        ]

    # assembly ------------------------------------------------------------------------------

    def read_part(self, file_name: str) -> Iterator[str]:
        path = self.parts / file_name
        try:
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    if line.strip():
                        yield line.rstrip("\n")
        except FileNotFoundError:
            raise ExportError(
                f"part file {path} named by {self.progress_path} is missing; rerun with --restart"
            ) from None

    def assemble(self, result: ExportResult) -> None:
        snap = self.snapshot
        data = self.progress.data
        a, _ = self.epochs
        start_a = snap["epoch_starts"][str(a)]
        participants: list[Any] = []
        for page in data["listings"]["participants"]["pages"]:
            participants.extend(json.loads(line) for line in self.read_part(page["file"]))
        listed = {p.get("address") for p in participants}
        nodes = [n for n in snap["participant_nodes"] if n.get("address") in listed]
        entries: list[tuple[int, int, str, str]] = [
            (
                start_a,
                get_line_rank("params"),
                "",
                encode_line(build_params_line(start_a, snap["params"], snap["extension_params"])),
            ),
            (
                start_a,
                get_line_rank("participants"),
                "",
                encode_line(build_participants_line(a, start_a, participants, nodes)),
            ),
        ]
        summaries = 0
        for epoch_text, unit in sorted(data["summaries"].items(), key=lambda kv: int(kv[0])):
            height = snap["epoch_starts"][str(int(epoch_text) + 1)]
            for line in self.read_part(unit["file"]):
                entries.append(
                    (height, get_line_rank("epoch_summary"), f"{int(epoch_text):020d}", line)
                )
                summaries += 1
        inferences = 0
        for page in data["listings"]["inferences"]["pages"]:
            for line in self.read_part(page["file"]):
                obj = json.loads(line)
                entries.append(
                    (
                        int(obj["start_block_height"]),
                        get_line_rank("inference"),
                        obj["inference_id"],
                        line,
                    )
                )
                inferences += 1
        entries.sort(key=lambda e: (e[0], e[1], e[2]))
        header = build_header_line(
            chain_id=snap["chain_id"],
            source="export",
            first_height=snap["first_height"],
            last_height=snap["last_height"],
            policy=snap.get("policy") or None,
        )
        text = "".join(line + "\n" for line in [encode_line(header), *(e[3] for e in entries)])
        _write_atomic(self.out, text)
        result.records = {
            "params": 1,
            "participants": len(participants),
            "inferences": inferences,
            "epoch_summaries": summaries,
        }
        result.records_written = 1 + len(entries)

    # main ------------------------------------------------------------------------------------

    def run(self, result: ExportResult) -> None:
        self.progress, resumed = _Progress.load_or_create(
            self.progress_path, self.node, self.epochs, self.options.restart
        )
        if self.options.restart or not resumed:
            shutil.rmtree(self.parts, ignore_errors=True)
        self.parts.mkdir(parents=True, exist_ok=True)
        result.units_resumed = self.progress.count_done()
        from keepersim.progress import make_progress

        self.bar = make_progress(
            None,
            enabled=self.options.progress,
            unit="records",
            desc=f"export {self.epochs[0]}-{self.epochs[1]}",
            mininterval=0.5,
            leave=False,
        )
        try:
            with ThreadPoolExecutor(
                max_workers=self.options.concurrency, thread_name_prefix="keepersim-export"
            ) as pool:
                snapshot = self.progress.data["snapshot"]
                if snapshot is None:
                    snapshot = self.take_snapshot(pool)

                    def set_snapshot(data: dict[str, Any], s: dict[str, Any] = snapshot) -> None:
                        data["snapshot"] = s

                    self.snapshot = snapshot
                    self.record_unit("snapshot", "snapshot", set_snapshot)
                self.snapshot = snapshot
                result.chain_id = snapshot["chain_id"]
                result.first_height = snapshot["first_height"]
                result.last_height = snapshot["last_height"]
                a, b = self.epochs
                settled = [e for e in range(a, b + 1) if e < snapshot["latest_epoch"]]
                with self.progress.lock:
                    pending = [e for e in settled if str(e) not in self.progress.data["summaries"]]
                futures: list[Future[None]] = [
                    pool.submit(self.run_listing, "participants"),
                    pool.submit(self.run_listing, "inferences"),
                    *(pool.submit(self.run_summary, e) for e in pending),
                ]
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                failed = [f for f in done if f.exception() is not None]
                if failed:
                    self.stop.set()
                    wait(futures)
                    exc = failed[0].exception()
                    assert exc is not None
                    raise exc
            self.assemble(result)
        finally:
            self.bar.close()
        self.progress_path.unlink(missing_ok=True)
        shutil.rmtree(self.parts, ignore_errors=True)


def export_trace(
    node: str,
    epochs: tuple[int, int],
    out: str | os.PathLike[str],
    *,
    options: ExportOptions | None = None,
    client: httpx.Client | None = None,
    gate: BackoffGate | None = None,
    on_unit: UnitHook | None = None,
) -> ExportResult:
    """Export epochs ``epochs[0]..epochs[1]`` of the node at ``node`` into the trace ``out``.

    ``client`` (an httpx client; default: one with a pool for ``concurrency`` connections) and
    ``gate`` (default: ``BackoffGate(base, cap)``) can be injected; ``on_unit(kind, detail)`` is
    called after each finished unit is recorded in the progress file (tests stop an export
    there). Raises :class:`ExportError` (with ``.result``) when the export stops.
    """
    options = options or ExportOptions()
    a, b = epochs
    if a < 0 or b < a:
        raise ExportError(f"epochs: need 0 <= A <= B, got {a}-{b}")
    out_path = Path(out)
    result = ExportResult(node=node, out=os.fspath(out_path), epochs=(a, b))
    gate = gate if gate is not None else BackoffGate(options.backoff_base, options.backoff_cap)
    own_client = client is None
    if client is None:
        limits = httpx.Limits(
            max_connections=options.concurrency * 2, max_keepalive_connections=options.concurrency
        )
        client = httpx.Client(limits=limits)
    fetcher = Fetcher(client, gate=gate, timeout=options.timeout, max_attempts=options.max_attempts)
    exporter = _Exporter(node, (a, b), out_path, options, fetcher, on_unit)
    started = time.perf_counter()
    try:
        exporter.run(result)
        result.ok = True
    except ExportFetchError as exc:
        result.error = str(exc)
        raise ExportError(f"export stopped: {exc}", result) from exc
    except ExportError as exc:
        result.error = str(exc)
        exc.result = result
        raise
    finally:
        result.duration_seconds = time.perf_counter() - started
        stats = fetcher.stats()
        result.fetch_requests = stats.requests
        result.fetch_retries = stats.retries
        result.fetch_errors = stats.errors
        result.fetch_bad_bodies = stats.bad_bodies
        result.fatal_errors = stats.fatal_errors
        result.gave_up = stats.gave_up
        result.fetch_backoff_pauses = stats.backoff_pauses
        result.pages_fetched = exporter.pages_fetched
        progress = getattr(exporter, "progress", None)
        if progress is not None:
            result.skipped_inferences = int(progress.data.get("skipped_inferences", 0))
            result.unknown_fields = {
                k: list(v) for k, v in progress.data.get("unknown_fields", {}).items()
            }
        if own_client:
            client.close()
    return result
