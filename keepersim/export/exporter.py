"""Export a node's data over its REST API into a trace (``docs/trace-format.md``,
``docs/export.md``).

``keepersim export --node URL --epochs A-B --out TRACE`` reads, from a gonka node (a host root,
where the proxy's ``/chain-api`` is detected, or a URL ending in ``/chain-api``; or
``keepersim serve``), with the routes of :mod:`keepersim.types.rest_routes`:

* the *snapshot*, taken once and kept for a resumed run: ``epoch_info`` (unpinned: the height it
  answers at, ``Grpc-Metadata-X-Cosmos-Block-Height``, becomes the pin of every later query;
  the chain's full Params; the latest epoch E), ``node_info`` (the chain id; a node without it
  gets ``--chain-id`` or :data:`DEFAULT_CHAIN_ID`), keepersim's ``/keepersim/v1/params`` (only
  from ``keepersim serve``; others get keepersim's defaults), each epoch's parent group
  ``epoch_group_data/{e}`` for A..min(B+1, E) (``effective_block_height``: epoch e is in effect
  from it to the block before e+1's) and each epoch's model groups ``?model_id=`` per
  ``sub_group_models`` (the members' models and ML nodes; weights and reputation come from the
  parent), and each epoch's ``excluded_participants/{e}`` (into the result). Epochs 1..E-T (T = ``inference_pruning_epoch_threshold``) are refused naming the
  earliest exportable epoch E-T+1 and pointing to ``--aggregate`` (:mod:`.aggregate`: what a
  node keeps of them) (a chain node prunes their inferences; keepersim never does);
* ``participant`` and ``inference``, page by page following ``pagination.next_key``, pinned. The
  inference listing has no epoch filter and is keyed by id, so it is paged whole once for the
  range (no page can be skipped) and filtered on ``epoch_id``: an inference belongs to its
  epoch, also when it started in the next epoch's PoC window. The deprecated payload fields are
  cleared (empty anyway on v0.2.14 nodes; the gateway has no field mask to avoid downloading
  them);
* ``epoch_performance_summary/{e}`` for every settled epoch but a mid-chain A (whose counts hold
  epoch A-1's late outcomes, which the trace lacks), with keepersim's declines from ``keepersim
  serve``. An older node without the route (501, gRPC code 12) gives a trace without summaries,
  and the result says so (``summaries_available``, ``notes``).

The trace is written through the trace writer (:mod:`keepersim.export.trace_io`): header
(``first_height`` = effective height of A, ``last_height`` = the block before B+1 takes effect,
or the pinned height when B is current), params at A's formation height (effective - 1), one
participants line per epoch at its formation height (the group's members with the group's
weights, statuses as listed, RAMPING included, and their ``participant_nodes``), the summaries
at the next epoch's formation height, and the inferences. Node JSON is read by
:func:`~keepersim.types.chain_json.parse_chain_json` with ``ignore_unknown``: fields keepersim's
protos do not know (a newer chain's) are left out and listed by path, per record kind, in the
result's ``unknown_fields``; a bad value stops the export naming the URL and the field. The
chain's Params go through :func:`~keepersim.types.chain_params_json.parse_chain_params`: fields
an older node lacks are filled as the chain's upgrades filled them (a warning on stderr names
them).

Fetching (:mod:`keepersim.export.fetch`): ``concurrency`` worker threads, a 60 s timeout, at
most 3 attempts retried only on timeout / transport error / 429 / 5xx but 501 / a 2xx body that
is not JSON; a 4xx or 501 stops at once naming the URL; every retryable failure pauses all
workers (one :class:`~keepersim.export.backoff.BackoffGate`, ``base * 2**(n-1)`` s with jitter,
at least ``Retry-After``).

Resuming: ``OUT.progress.json`` records the snapshot (with its pinned height) and every finished
unit (each listing page with its start and next key, each epoch's summaries); each unit's
records are in a part file in ``OUT.parts/`` written atomically *before* the progress file names
it. A rerun with the same node and epochs skips finished units and continues each listing from
its last recorded ``next_key``, pinned to the same height. The trace is assembled from the part
files and written atomically; the progress file and the parts are removed after success.

Limits: a pinned height needs a node that keeps state there (the latest height always works);
participants are the node's at the pinned height (a node serves no history of them but by
pinning); the group's weights and reputations are the participants line's
``validation_weights`` (and in the result); the
assembly holds the range's inferences in memory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, TypeVar

import httpx
from google.protobuf.message import Message

from keepersim.export.backoff import BackoffGate
from keepersim.export.chain_api import (
    compute_earliest_exportable_epoch,
    compute_epoch_members,
    compute_pruned_epochs,
    find_api_base,
    get_response_height,
)
from keepersim.export.export_run import (
    GRPC_UNIMPLEMENTED,
    ExportError,
    ExportOptions,
    ExportResult,
    run_fetcher,
)
from keepersim.export.fetch import ExportFetchError, Fetcher, JsonResponse
from keepersim.export.progress_file import ExportProgress, format_epoch_ranges, get_summary_epochs
from keepersim.export.result_figures import fill_export_result
from keepersim.export.trace_assembly import assemble_trace
from keepersim.export.trace_io import message_to_json
from keepersim.outputs import write_text_atomic
from keepersim.types.chain_json import parse_chain_json
from keepersim.types.chain_params_json import parse_chain_params
from keepersim.types.errors import ChainJsonError
from keepersim.types.messages import (
    EpochGroupData,
    EpochPerformanceSummary,
    ExcludedParticipant,
    Inference,
    Params,
    Participant,
)
from keepersim.types.params import get_default_extension_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams
from keepersim.types.pb.keepersim.v1.state_pb2 import EpochDeclines
from keepersim.types.rest_routes import (
    DECLINES,
    EPOCH_GROUP_DATA,
    EPOCH_INFO,
    EPOCH_PERFORMANCE_SUMMARY,
    EXCLUDED_PARTICIPANTS,
    EXTENSION_PARAMS,
    HEIGHT_REQUEST_HEADER,
    INFERENCE_ALL,
    NODE_INFO,
    PARTICIPANT_ALL,
    compute_route_path,
)

__all__ = [
    "DEFAULT_CHAIN_ID",
    "KEEPERSIM_APP_NAME",
    "export_trace",
]

#: ``node_info.application_version.app_name`` of ``keepersim serve``.
KEEPERSIM_APP_NAME = "keepersim"
#: The trace's chain id when the node serves no node_info and ``--chain-id`` is not given.
DEFAULT_CHAIN_ID = "unknown-chain"
#: The deprecated payload fields (inference.proto 4, 6, 31), empty since v0.2.6.
PAYLOAD_FIELDS = ("prompt_payload", "response_payload", "original_prompt")

M = TypeVar("M", bound=Message)
_LIST_INDEX = re.compile(r"\[\d+\]")
UnitHook = Callable[[str, str], None]


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _drop_payloads(inference: Inference) -> int:
    """Clear the deprecated payload fields keepersim never reads; how many were non-empty."""
    dropped = 0
    for name in PAYLOAD_FIELDS:
        if getattr(inference, name):
            setattr(inference, name, "")
            dropped += 1
    return dropped


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
        self.base = self.node
        self.epochs = epochs
        self.out = out
        self.options = options
        self.fetcher = fetcher
        self.on_unit = on_unit
        self.parts = out.with_name(out.name + ".parts")
        self.progress_path = out.with_name(out.name + ".progress.json")
        self.stop = threading.Event()
        self.pages_fetched = 0
        self.requests_by_route: Counter[str] = Counter()
        self._count_lock = threading.Lock()
        self.bar: Any = None
        self.snapshot: dict[str, Any] = {}

    # fetching ------------------------------------------------------------------------------

    @property
    def pin(self) -> dict[str, str] | None:
        height = self.snapshot.get("pin_height")
        return None if height is None else {HEIGHT_REQUEST_HEADER: str(height)}

    def get(self, template: str, params: dict[str, Any] | None = None, **values: Any) -> Any:
        """GET a route (``template`` filled with ``values``) pinned to the snapshot's height."""
        return self.get_response(template, params, **values).body

    def get_response(
        self, template: str, params: dict[str, Any] | None = None, **values: Any
    ) -> JsonResponse:
        with self._count_lock:
            self.requests_by_route[template] += 1
        path = compute_route_path(template, **values)
        return self.fetcher.get_response(self.base + path, params, self.pin)

    def url(self, template: str, **values: Any) -> str:
        return self.base + compute_route_path(template, **values)

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
        self.record_ignored(kind, ignored)
        return message

    def parse_params(self, data: Any, url: str) -> Params:
        """The node's Params through the one chain-params reader: an older node's absent fields
        are filled as the chain's upgrades filled them (a warning names them)."""
        ignored: list[str] = []
        try:
            params = parse_chain_params(
                data, where=f"GET {url}: params", ignore_unknown=True, ignored=ignored
            )
        except ChainJsonError as exc:
            raise ExportError(f"{exc} (as Params)") from exc
        self.record_ignored("Params", ignored)
        return params

    def record_ignored(self, kind: str, ignored: list[str]) -> None:
        if ignored:  # a newer chain's fields: recorded by path (list indices as []), never lost
            with self.progress.lock:
                seen = self.progress.data["unknown_fields"].setdefault(kind, [])
                for path in sorted({_LIST_INDEX.sub("[]", p) for p in ignored} - set(seen)):
                    seen.append(path)

    def field(self, body: Any, name: str, url: str) -> Any:
        if not isinstance(body, dict) or name not in body:
            raise ExportError(f"GET {url}: the answer has no {name!r} field")
        return body[name]

    # snapshot ------------------------------------------------------------------------------

    def find_api(self) -> JsonResponse:
        """``epoch_info`` (unpinned: its height becomes the pin) at the first base that serves
        it: ``--node`` as given, or with the proxy's ``/chain-api`` (never doubled)."""

        def get(base: str) -> JsonResponse:
            self.base = base
            return self.get_response(EPOCH_INFO)

        self.base, answer = find_api_base(self.node, get)
        return answer

    def get_chain_id(self) -> tuple[str, str, Any]:
        """The chain id, where it came from, and node_info (None when the node has none)."""
        try:
            info = self.get(NODE_INFO)
        except ExportFetchError as exc:
            if exc.status_code not in (404, 501):
                raise
            info = None
        node_info = info.get("default_node_info") if isinstance(info, dict) else None
        network = node_info.get("network") if isinstance(node_info, dict) else None
        if isinstance(network, str) and network:
            return network, "node_info", info
        if self.options.chain_id:
            return self.options.chain_id, "--chain-id", info
        return DEFAULT_CHAIN_ID, "default", info

    def get_extension_params(self, info: Any) -> tuple[ExtensionParams, bool]:
        """keepersim's extension params: the node's if it is ``keepersim serve`` (its
        ``node_info`` says so), else keepersim's defaults; and whether they are the node's."""
        app = info.get("application_version") if isinstance(info, dict) else None
        if not isinstance(app, dict) or app.get("app_name") != KEEPERSIM_APP_NAME:
            return get_default_extension_params(), False
        url = self.url(EXTENSION_PARAMS)
        body = self.field(self.get(EXTENSION_PARAMS), "extension_params", url)
        return self.parse(body, ExtensionParams, url, "ExtensionParams"), True

    def get_group(self, epoch: int, model: str = "") -> EpochGroupData:
        params = {"model_id": model} if model else None
        url = self.url(EPOCH_GROUP_DATA, epoch_index=epoch)
        body = self.get(EPOCH_GROUP_DATA, params, epoch_index=epoch)
        data = self.field(body, "epoch_group_data", url)
        return self.parse(data, EpochGroupData, url, "EpochGroupData")

    def get_members(self, pool: ThreadPoolExecutor, epoch: int, parent: EpochGroupData) -> Any:
        """Epoch ``epoch``'s members from its parent group and its model sub-groups."""
        subgroups = list(pool.map(lambda m: self.get_group(epoch, m), parent.sub_group_models))
        members = compute_epoch_members(parent, subgroups)
        return {
            "weights": members.weights,
            "reputations": members.reputations,
            "nodes": [message_to_json(n) for n in members.nodes],
            "group_requests": 1 + len(subgroups),
            "excluded": [message_to_json(x) for x in self.get_excluded(epoch)],
        }

    def get_excluded(self, epoch: int) -> list[ExcludedParticipant]:
        """The epoch's exclusions (``items``; with ``exclusion_block_height``). Epoch 0 cannot
        be asked: ``excluded_participants/0`` is the effective epoch's."""
        if epoch == 0:
            return []
        url = self.url(EXCLUDED_PARTICIPANTS, epoch_index=epoch)
        items = self.field(self.get(EXCLUDED_PARTICIPANTS, epoch_index=epoch), "items", url)
        if not isinstance(items, list):
            raise ExportError(f"GET {url}: 'items' is not a list")
        return [self.parse(x, ExcludedParticipant, url, "ExcludedParticipant") for x in items]

    def take_snapshot(self, pool: ThreadPoolExecutor) -> dict[str, Any]:
        a, b = self.epochs
        answer = self.find_api()
        url = self.url(EPOCH_INFO)
        body = answer.body
        try:
            body_height = int(self.field(body, "block_height", url))
            latest = int(self.field(body, "latest_epoch", url).get("index", 0))
        except (TypeError, ValueError, AttributeError) as exc:
            raise ExportError(f"GET {url}: malformed epoch info: {exc}") from exc
        height = get_response_height(answer.headers) or body_height
        if self.options.height is not None:
            if self.options.height > height:
                raise ExportError(f"--height {self.options.height}: the node is at height {height}")
            height = self.options.height
        self.snapshot = {"pin_height": height}
        if self.options.height is not None:  # the latest epoch at the asked height
            body = self.get(EPOCH_INFO)
            latest = int(self.field(body, "latest_epoch", url).get("index", 0))
        params = self.parse_params(self.field(body, "params", url), url)
        chain_id, chain_id_source, info = self.get_chain_id()
        extension_params, from_node = self.get_extension_params(info)
        if b > latest:
            raise ExportError(
                f"epochs {a}-{b}: epoch {b} is beyond the node's latest epoch {latest} "
                f"(height {height})"
            )
        threshold = params.epoch_params.inference_pruning_epoch_threshold
        if not from_node:  # keepersim serve never prunes
            pruned = compute_pruned_epochs((a, b), latest, threshold)
            if pruned:
                earliest = compute_earliest_exportable_epoch(latest, threshold)
                raise ExportError(
                    f"epochs {a}-{b}: the node has pruned the inferences of epoch"
                    f"{'s' if len(pruned) > 1 else ''} {format_epoch_ranges(pruned)} "
                    f"(epoch_params.inference_pruning_epoch_threshold {threshold}, latest epoch "
                    f"{latest}); the earliest exportable epoch is {earliest}; "
                    f"`keepersim export --aggregate --epochs {a}-{b}` writes what the node "
                    "still serves for them (params, epoch groups, summaries, exclusions, "
                    "confirmation PoC events)"
                )
        wanted = list(range(a, min(b + 1, latest) + 1))
        parents = dict(zip(wanted, pool.map(self.get_group, wanted), strict=True))
        epochs: dict[str, dict[str, Any]] = {}
        for epoch, group in parents.items():
            effective = group.effective_block_height
            epochs[str(epoch)] = {
                "effective_block_height": effective,
                "last_block_height": group.last_block_height,
                "poc_start_block_height": group.poc_start_block_height,
                # keepersim forms an epoch in the end block before it takes effect
                "formed_at": max(effective - 1, 0),
            }
        first_height = max(epochs[str(a)]["effective_block_height"], 1)
        # epoch N is in effect up to the block before N+1 takes effect (its last_block_height)
        last_height = epochs[str(b + 1)]["effective_block_height"] - 1 if b < latest else height
        if first_height > last_height:
            raise ExportError(
                f"epochs {a}-{b}: no block committed in them yet (epoch {a} takes effect at "
                f"height {first_height}, the node is at height {height})"
            )
        members = {str(e): self.get_members(pool, e, parents[e]) for e in range(a, b + 1)}
        return {
            "base": self.base,
            "pin_height": height,
            "chain_id": chain_id,
            "chain_id_source": chain_id_source,
            "params": message_to_json(params),
            "extension_params": message_to_json(extension_params),
            "latest_epoch": latest,
            "pruning_threshold": threshold,
            "epochs": epochs,
            "members": members,
            "first_height": first_height,
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

    def advance_bar(self, records: int, page: bool = True) -> None:
        with self._count_lock:
            if page:
                self.pages_fetched += 1
            if self.bar is not None:
                self.bar.update(records)

    def run_listing(self, name: str) -> None:
        """Fetch a listing page by page from where the progress left it. The inference listing
        has no epoch filter and is keyed by id (not by epoch or height), so it is paged whole,
        once for the range, and no page can be skipped; each page's records are filtered on
        ``epoch_id`` and the page notes how many it held per epoch."""
        template = PARTICIPANT_ALL if name == "participants" else INFERENCE_ALL
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
            body = self.get(template, params)
            url = self.url(template)
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
            skipped = dropped = 0
            per_epoch: Counter[str] = Counter()
            for item in items:
                if name == "participants":
                    lines.append(
                        _dumps(message_to_json(self.parse(item, Participant, url, "Participant")))
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
                dropped += _drop_payloads(inference)
                per_epoch[str(inference.epoch_id)] += 1
                lines.append(_dumps(message_to_json(inference)))
            file_name = f"{name}-{index:06d}.jsonl"
            write_text_atomic(self.parts / file_name, "".join(line + "\n" for line in lines))
            page = {
                "key": key,
                "next_key": next_key,
                "records": len(lines),
                "file": file_name,
                "epochs": dict(sorted(per_epoch.items())),
            }

            def update(
                data: dict[str, Any],
                page: dict[str, Any] = page,
                skipped: int = skipped,
                dropped: int = dropped,
            ) -> None:
                listing = data["listings"][name]
                listing["pages"].append(page)
                listing["complete"] = page["next_key"] is None
                data["skipped_inferences"] += skipped
                data["payloads_dropped"] += dropped

            self.record_unit(name, f"page {index}", update)
            self.advance_bar(len(items))
            if next_key is None:
                return
            key = next_key
            index += 1

    def run_summaries(self) -> None:
        """Each settled epoch's summaries, in epoch order; an older node without the route
        (501, gRPC code 12) stops them: the trace is written without summaries."""
        for epoch in get_summary_epochs(self.epochs, self.snapshot["latest_epoch"]):
            with self.progress.lock:
                if str(epoch) in self.progress.data["summaries"]:
                    continue
                if self.progress.data["summaries_unavailable"]:
                    return
            if self.stop.is_set():
                return
            self.run_summary(epoch)

    def run_summary(self, epoch: int) -> None:
        url = self.url(EPOCH_PERFORMANCE_SUMMARY, epoch_index=epoch)
        try:
            body = self.get(EPOCH_PERFORMANCE_SUMMARY, epoch_index=epoch)
        except ExportFetchError as exc:
            if exc.status_code == 501 and exc.grpc_code == GRPC_UNIMPLEMENTED:

                def unavailable(data: dict[str, Any]) -> None:
                    data["summaries_unavailable"] = True

                self.record_unit("summary", f"epoch {epoch} (no route)", unavailable)
                return
            raise
        items = self.field(body, "epochPerformanceSummary", url)
        if not isinstance(items, list):
            raise ExportError(f"GET {url}: 'epochPerformanceSummary' is not a list")
        parsed = [
            self.parse(s, EpochPerformanceSummary, url, "EpochPerformanceSummary") for s in items
        ]
        record: dict[str, Any] = {"summaries": [message_to_json(s) for s in parsed]}
        if self.snapshot.get("keepersim_node"):
            record["epoch_declines"] = [
                message_to_json(d) for d in self.get_declines(epoch, parsed)
            ]
        file_name = f"summary-{epoch:06d}.json"
        write_text_atomic(self.parts / file_name, _dumps(record) + "\n")

        def update(data: dict[str, Any]) -> None:
            data["summaries"][str(epoch)] = {"file": file_name, "records": len(parsed)}

        self.record_unit("summary", f"epoch {epoch}", update)
        self.advance_bar(len(parsed))

    def get_declines(
        self, epoch: int, summaries: list[EpochPerformanceSummary]
    ) -> list[EpochDeclines]:
        """keepersim's declines of ``epoch`` (``keepersim serve``), one per summary (0 too)."""
        url = self.url(DECLINES, epoch_index=epoch)
        counts = self.field(self.get(DECLINES, epoch_index=epoch), "declines", url)
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

    # main ------------------------------------------------------------------------------------

    def run(self, result: ExportResult) -> None:
        self.progress, resumed = ExportProgress.load_or_create(
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
                    try:
                        snapshot = self.take_snapshot(pool)
                    except BaseException:  # nothing done yet: leave nothing to resume
                        self.progress_path.unlink(missing_ok=True)
                        shutil.rmtree(self.parts, ignore_errors=True)
                        raise

                    def set_snapshot(data: dict[str, Any], s: dict[str, Any] = snapshot) -> None:
                        data["snapshot"] = s

                    self.snapshot = snapshot
                    self.record_unit("snapshot", "snapshot", set_snapshot)
                self.snapshot = snapshot
                self.base = snapshot["base"]
                result.chain_id = snapshot["chain_id"]
                result.first_height = snapshot["first_height"]
                result.last_height = snapshot["last_height"]
                result.pinned_height = snapshot["pin_height"]
                futures: list[Future[None]] = [
                    pool.submit(self.run_listing, "participants"),
                    pool.submit(self.run_listing, "inferences"),
                    pool.submit(self.run_summaries),
                ]
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                failed = [f for f in done if f.exception() is not None]
                if failed:
                    self.stop.set()
                    wait(futures)
                    exc = failed[0].exception()
                    assert exc is not None
                    raise exc
            assemble_trace(
                self.out,
                self.parts,
                self.progress_path,
                self.snapshot,
                self.progress.data,
                self.epochs,
                result,
            )
        finally:
            self.bar.close()
        self.progress_path.unlink(missing_ok=True)
        shutil.rmtree(self.parts, ignore_errors=True)

    def fill_result(self, result: ExportResult) -> None:
        """The figures of the progress so far (none before it was opened)."""
        progress = getattr(self, "progress", None)
        if progress is not None:
            fill_export_result(result, progress.data, self.epochs)


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
    with run_fetcher(result, options, client, gate) as fetcher:
        exporter = _Exporter(node, (a, b), out_path, options, fetcher, on_unit)
        try:
            exporter.run(result)
        finally:
            result.pages_fetched = exporter.pages_fetched
            result.requests_by_route = dict(exporter.requests_by_route)
            exporter.fill_result(result)
    return result
