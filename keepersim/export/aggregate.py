"""``keepersim export --aggregate``: the chain's own answers for epochs A..B, one folder per
epoch in the layout of the shared mainnet data (:mod:`keepersim.types.epoch_layout`).

A chain node prunes an epoch's inferences ``inference_pruning_epoch_threshold`` epochs later
(mainnet: 2), but keeps its params, epoch groups, performance summaries, exclusions and
confirmation PoC events: for an older epoch they are all it still serves, and this export works
for them as for recent ones. Every answer is read at one **pinned height** (``epoch_info``'s
answer height, or ``--height``; ``x-cosmos-block-height`` on every request), checked (the
chain's messages, each record of epoch N, a group of its model) and written as its JSON body,
printed as the shared files are.

Fetching is the exporter's (:class:`~keepersim.export.fetch.Fetcher`: bounded retries, one
:class:`~keepersim.export.backoff.BackoffGate` for every worker; epochs in parallel on
``concurrency`` threads). A 404 (the node keeps no such record: an epoch it no longer serves)
stops the export naming the route and the epoch; a 501 with gRPC code 12 on the summary or
events route (a node older than the route) is recorded in ``metadata.json`` as
``unimplemented`` and the file left out.

Resuming: every file is written atomically and ``metadata.json`` last, so an epoch folder with
its metadata is complete and skipped by a rerun; ``OUT/.aggregate-progress.json`` keeps the pin
(height, API base, block time) so a rerun reads the missing files at the same height, and the
files already in an unfinished folder are kept (checked again, not fetched again). It is removed
when every epoch is complete. ``--restart`` fetches everything again.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx

from keepersim.export.backoff import BackoffGate
from keepersim.export.chain_api import find_api_base, get_response_height
from keepersim.export.export_run import (
    GRPC_UNIMPLEMENTED,
    ExportError,
    ExportOptions,
    FetchOutcome,
    run_fetcher,
)
from keepersim.export.fetch import ExportFetchError, Fetcher, JsonResponse
from keepersim.outputs import remove_stale_temporaries, write_text_atomic
from keepersim.types.epoch_layout import (
    METADATA_FILE,
    AggregateFile,
    check_answer,
    compute_aggregate_text,
    compute_epoch_files,
    compute_epoch_folder,
    compute_file_entry,
    compute_metadata,
    compute_model_files,
)
from keepersim.types.rest_routes import (
    BLOCK_BY_HEIGHT,
    EPOCH_INFO,
    HEIGHT_REQUEST_HEADER,
    compute_route_path,
)

__all__ = ["PROGRESS_FILE", "AggregateResult", "export_aggregates"]

PROGRESS_FILE = ".aggregate-progress.json"
PROGRESS_VERSION = 1
#: The routes whose absence (501, gRPC code 12: a node older than the route) leaves a file out.
OPTIONAL_KINDS = frozenset({"epoch_performance_summary", "confirmation_poc_events"})
FileHook = Callable[[int, str], None]


@dataclass
class AggregateResult(FetchOutcome):
    node: str
    out: str
    epochs: tuple[int, int]
    api_base: str = ""
    pinned_height: int = 0
    block_time: str | None = None
    latest_epoch: int = 0
    fetched_at_utc: str = ""
    epochs_written: list[int] = field(default_factory=list)
    epochs_resumed: list[int] = field(default_factory=list)
    files_written: int = 0
    files_resumed: int = 0
    unimplemented: dict[str, list[str]] = field(default_factory=dict)
    unknown_fields: dict[str, list[str]] = field(default_factory=dict)
    requests_by_route: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "out": self.out,
            "epochs": list(self.epochs),
            "aggregate": True,
            "api_base": self.api_base,
            "pinned_height": self.pinned_height,
            "block_time": self.block_time,
            "latest_epoch": self.latest_epoch,
            "fetched_at_utc": self.fetched_at_utc,
            "epochs_written": sorted(self.epochs_written),
            "epochs_resumed": sorted(self.epochs_resumed),
            "files_written": self.files_written,
            "files_resumed": self.files_resumed,
            "unimplemented": dict(sorted(self.unimplemented.items(), key=lambda kv: int(kv[0]))),
            "unknown_fields": {k: sorted(set(v)) for k, v in sorted(self.unknown_fields.items())},
            "requests_by_route": dict(sorted(self.requests_by_route.items())),
            **self.get_fetch_counts(),
            "duration_seconds": round(self.duration_seconds, 6),
            "ok": self.ok,
            "error": self.error,
        }


def get_block_time(body: Any) -> str | None:
    """``block.header.time`` of the SDK's ``blocks/{height}`` answer (``sdk_block`` on newer
    SDKs), or None."""
    for key in ("block", "sdk_block"):
        block = body.get(key) if isinstance(body, dict) else None
        header = block.get("header") if isinstance(block, dict) else None
        value = header.get("time") if isinstance(header, dict) else None
        if isinstance(value, str) and value:
            return value
    return None


class _Aggregator:
    def __init__(
        self,
        node: str,
        epochs: tuple[int, int],
        out: Path,
        options: ExportOptions,
        fetcher: Fetcher,
        result: AggregateResult,
        on_file: FileHook | None,
    ) -> None:
        self.node = node.rstrip("/")
        self.epochs = epochs
        self.out = out
        self.options = options
        self.fetcher = fetcher
        self.result = result
        self.on_file = on_file
        self.progress_path = out / PROGRESS_FILE
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.requests: Counter[str] = Counter()
        self.state: dict[str, Any] = {}
        self.trust_files = False
        self._params_body: Any = None
        self._params_lock = threading.Lock()

    # fetching ------------------------------------------------------------------------------

    def get(
        self,
        template: str,
        path: str,
        params: dict[str, str] | None = None,
        *,
        base: str | None = None,
        pinned: bool = True,
    ) -> JsonResponse:
        with self.lock:
            self.requests[template] += 1
        headers = {HEIGHT_REQUEST_HEADER: str(self.state["pin_height"])} if pinned else None
        url = (base if base is not None else self.state["base"]) + path
        return self.fetcher.get_response(url, params, headers)

    def url(self, file: AggregateFile) -> str:
        query = "?" + urlencode(file.params) if file.params else ""
        return str(self.state["base"]) + file.path + query

    # the pin ---------------------------------------------------------------------------------

    def take_snapshot(self) -> dict[str, Any]:
        """``epoch_info`` unpinned: its answer height (or ``--height``) is the pin, its
        ``latest_epoch`` the node's latest epoch there; the block time at the pin, if served."""
        a, b = self.epochs
        base, answer = find_api_base(
            self.node, lambda base: self.get(EPOCH_INFO, EPOCH_INFO, base=base, pinned=False)
        )
        where = f"GET {base}{EPOCH_INFO}"
        try:
            height = get_response_height(answer.headers) or int(answer.body["block_height"])
            latest = int(answer.body["latest_epoch"]["index"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ExportError(f"{where}: malformed epoch info: {exc!r}") from exc
        self.state = {"base": base, "pin_height": height}
        if self.options.height is not None:
            if self.options.height > height:
                raise ExportError(f"--height {self.options.height}: the node is at height {height}")
            self.state["pin_height"] = height = self.options.height
            try:
                latest = int(self.get(EPOCH_INFO, EPOCH_INFO).body["latest_epoch"]["index"])
            except (KeyError, TypeError, ValueError) as exc:
                raise ExportError(f"{where}: malformed epoch info: {exc!r}") from exc
        if b > latest:
            raise ExportError(
                f"epochs {a}-{b}: epoch {b} is beyond the node's latest epoch {latest} "
                f"(height {height})"
            )
        block_time = None
        block_path = compute_route_path(BLOCK_BY_HEIGHT, height=height)
        try:
            block_time = get_block_time(self.get(BLOCK_BY_HEIGHT, block_path, pinned=False).body)
        except ExportFetchError as exc:
            if exc.status_code not in (400, 404, 501):
                raise
        return {
            "version": PROGRESS_VERSION,
            "node": self.node,
            "base": base,
            "pin_height": height,
            "block_time": block_time,
            "latest_epoch": latest,
            "fetched_at_utc": datetime.now(UTC).replace(microsecond=0).isoformat(),
        }

    def load_state(self) -> None:
        """The previous run's pin (same node, not ``--restart``), else a new snapshot."""
        if self.progress_path.exists() and not self.options.restart:
            try:
                state = json.loads(self.progress_path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise ExportError(
                    f"cannot read {self.progress_path}: {exc}; rerun with --restart"
                ) from exc
            if not isinstance(state, dict) or state.get("version") != PROGRESS_VERSION:
                raise ExportError(f"{self.progress_path}: unknown version; rerun with --restart")
            if state.get("node") != self.node:
                raise ExportError(
                    f"{self.progress_path} belongs to an export of node {state.get('node')!r}; "
                    "rerun with --restart to start over"
                )
            if self.options.height is not None and state.get("pin_height") != self.options.height:
                raise ExportError(
                    f"--height {self.options.height}: the unfinished export in {self.out} is "
                    f"pinned at height {state.get('pin_height')}; rerun with --restart"
                )
            self.state = state
            self.trust_files = True
            return
        self.state = self.take_snapshot()
        write_text_atomic(self.progress_path, json.dumps(self.state, indent=1) + "\n")

    # one epoch -------------------------------------------------------------------------------

    def is_complete(self, epoch: int) -> bool:
        """Whether ``epoch_N/metadata.json`` exists (written last: the folder is complete); one
        of another node's is refused."""
        meta = self.out / compute_epoch_folder(epoch) / METADATA_FILE
        if self.options.restart or not meta.exists():
            return False
        try:
            data = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ExportError(f"{meta}: unreadable ({exc}); rerun with --restart") from exc
        if not isinstance(data, dict) or data.get("node_url") != self.node:
            node = data.get("node_url") if isinstance(data, dict) else None
            raise ExportError(
                f"{meta} holds the answers of node {node!r}, not {self.node!r}; use another "
                "--out or --restart"
            )
        return True

    def run_epoch(self, epoch: int) -> None:
        if self.stop.is_set():
            return
        if self.is_complete(epoch):
            with self.lock:
                self.result.epochs_resumed.append(epoch)
            return
        folder = self.out / compute_epoch_folder(epoch)
        folder.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(folder)  # a killed run's half-written file
        endpoints: list[dict[str, Any]] = []
        files: dict[str, dict[str, Any]] = {}
        before, after = compute_epoch_files(epoch)
        parent: list[Any] = []
        for file in before:
            records = self.process_file(folder, file, endpoints, files)
            if file.kind == "epoch_group_data":
                parent = records or []
        models = list(parent[0].sub_group_models) if parent else []
        try:
            model_files = compute_model_files(epoch, models)
        except ValueError as exc:
            raise ExportError(str(exc)) from exc
        for file in model_files + after:
            self.process_file(folder, file, endpoints, files)
        metadata = compute_metadata(
            epoch=epoch,
            node_url=self.node,
            endpoints=endpoints,
            files=files,
            fetched_at_utc=self.state["fetched_at_utc"],
            pinned_height=self.state["pin_height"],
            block_time=self.state["block_time"],
            latest_epoch=self.state["latest_epoch"],
            api_base=self.state["base"],
        )
        write_text_atomic(folder / METADATA_FILE, compute_aggregate_text(metadata))
        with self.lock:
            self.result.epochs_written.append(epoch)

    def process_file(
        self,
        folder: Path,
        file: AggregateFile,
        endpoints: list[dict[str, Any]],
        files: dict[str, dict[str, Any]],
    ) -> list[Any] | None:
        """Fetch (or keep, on a resume) one file; note it in ``endpoints`` and ``files``."""
        entry: dict[str, Any] = {"file": file.name, "route": file.route, "url": self.url(file)}
        endpoints.append(entry)
        if file.kind == "excluded_participants" and file.epoch == 0:
            entry["status"] = "skipped"
            entry["reason"] = "excluded_participants/0 answers the effective epoch"
            return None
        path = folder / file.name
        ignored: list[str] = []
        records = self.read_kept(path, file, ignored) if self.trust_files else None
        if records is not None:
            with self.lock:
                self.result.files_resumed += 1
        else:
            body = self.fetch(file)
            if body is None:
                entry["status"] = "unimplemented"
                with self.lock:
                    self.result.unimplemented.setdefault(str(file.epoch), []).append(file.name)
                return None
            try:
                records = check_answer(file, body, f"GET {self.url(file)}", ignored)
            except ValueError as exc:
                raise ExportError(str(exc)) from exc
            write_text_atomic(path, compute_aggregate_text(body))
            with self.lock:
                self.result.files_written += 1
            if self.on_file is not None:
                self.on_file(file.epoch, file.name)
        if ignored:
            with self.lock:
                self.result.unknown_fields.setdefault(file.kind, []).extend(ignored)
        entry["status"] = "ok"
        files[file.name] = compute_file_entry(file.epoch, file.name, path.read_bytes())
        return records

    def read_kept(self, path: Path, file: AggregateFile, ignored: list[str]) -> list[Any] | None:
        """A file a killed run wrote (atomically, at the same pin), if it reads back valid."""
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
            return check_answer(file, body, str(path), ignored)
        except (OSError, ValueError):
            return None

    def fetch(self, file: AggregateFile) -> Any:
        """The answer's body; None for an optional route the node lacks (501, gRPC 12)."""
        if file.kind == "params":  # one answer for every epoch's params.json
            with self._params_lock:
                if self._params_body is None:
                    self._params_body = self.fetch_answer(file)
                return self._params_body
        return self.fetch_answer(file)

    def fetch_answer(self, file: AggregateFile) -> Any:
        try:
            body = self.get(file.route, file.path, file.params).body
        except ExportFetchError as exc:
            if exc.status_code == 404:
                model = f" (model {file.model!r})" if file.model else ""
                raise ExportError(
                    f"epoch {file.epoch}: the node does not serve {file.path}{model} at height "
                    f"{self.state['pin_height']} (HTTP 404, gRPC code {exc.grpc_code}): it keeps "
                    "no such record of that epoch"
                ) from exc
            if (
                file.kind in OPTIONAL_KINDS
                and exc.status_code == 501
                and exc.grpc_code == GRPC_UNIMPLEMENTED
            ):
                return None
            raise
        return body

    # main ------------------------------------------------------------------------------------

    def run(self) -> None:
        a, b = self.epochs
        self.out.mkdir(parents=True, exist_ok=True)
        self.load_state()
        result = self.result
        result.api_base = self.state["base"]
        result.pinned_height = self.state["pin_height"]
        result.block_time = self.state["block_time"]
        result.latest_epoch = self.state["latest_epoch"]
        result.fetched_at_utc = self.state["fetched_at_utc"]
        from keepersim.progress import make_progress

        bar = make_progress(
            b - a + 1,
            enabled=self.options.progress,
            unit="epochs",
            desc=f"export --aggregate {a}-{b}",
            leave=False,
        )
        try:
            with ThreadPoolExecutor(
                max_workers=self.options.concurrency, thread_name_prefix="keepersim-aggregate"
            ) as pool:

                def one(epoch: int) -> None:
                    try:
                        self.run_epoch(epoch)
                    except BaseException:
                        self.stop.set()  # before this worker takes another epoch
                        raise
                    with self.lock:
                        bar.update(1)

                futures: list[Future[None]] = [pool.submit(one, e) for e in range(a, b + 1)]
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                failed = [f for f in done if f.exception() is not None]
                if failed:
                    self.stop.set()
                    wait(futures)
                    exc = failed[0].exception()
                    assert exc is not None
                    raise exc
        finally:
            bar.close()
        self.progress_path.unlink(missing_ok=True)


def export_aggregates(
    node: str,
    epochs: tuple[int, int],
    out: str | os.PathLike[str],
    *,
    options: ExportOptions | None = None,
    client: httpx.Client | None = None,
    gate: BackoffGate | None = None,
    on_file: FileHook | None = None,
) -> AggregateResult:
    """Write epochs ``epochs[0]..epochs[1]`` of the node at ``node`` into the folder ``out``
    (one ``epoch_N/`` each). ``on_file(epoch, name)`` is called after each file is written
    (tests stop an export there). Raises :class:`ExportError` (with ``.result``) when the
    export stops; a rerun continues it."""
    options = options or ExportOptions()
    a, b = epochs
    if a < 0 or b < a:
        raise ExportError(f"epochs: need 0 <= A <= B, got {a}-{b}")
    out_path = Path(out)
    result = AggregateResult(node=node, out=os.fspath(out_path), epochs=(a, b))
    with run_fetcher(result, options, client, gate) as fetcher:
        aggregator = _Aggregator(node, (a, b), out_path, options, fetcher, result, on_file)
        try:
            aggregator.run()
        finally:
            result.requests_by_route = dict(aggregator.requests)
            result.epochs_written.sort()
            result.epochs_resumed.sort()
    return result
