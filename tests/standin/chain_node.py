"""Stand-in gonka nodes: the chain's REST gateway, behind its proxy, over keepersim-made state.

Independent of keepersim's own server and exporter (it imports neither): the bodies are the
chain's messages (``keepersim.types.messages``, compiled from the vendored protos) printed by
``compute_chain_json``; the data come from a keepersim run (:func:`build_chain_history`).

What it mimics, gonka v0.2.14 = ee730031 (facts from docs/design/chain-rest-api.md sections 0,
1, 3, 4, docs/design/chain-types-v0.2.14.md section 6, and the upstream files named here):

* **the proxy** (``proxy/nginx.unified.conf.template:258-276``): ``/chain-api/...`` reaches the
  node's API server with the prefix stripped, after nginx's URI normalisation (``%XX`` decoded,
  slashes merged, dot segments resolved); a path outside the location is nginx's ``404`` page;
  the optional rate limit is ``limit_req ... burst=200 nodelay`` at 20 r/min
  (``proxy/entrypoint.sh:469-471,659``), rejecting with nginx's default ``503`` and no
  ``Retry-After``;
* **the gateway** (grpc-gateway v1.16 in the Cosmos SDK's API server): the GET routes in
  :data:`ROUTES`, paths from the ``google.api.http`` options of
  ``inference-chain/proto/inference/inference/query.proto`` and top-level keys from its response
  messages in declaration order (:data:`RESPONSE_KEYS`; query.proto is not vendored, so the
  tests compare both with upstream's text when a gonka git mirror is at hand); bodies are gogo
  jsonpb ``OrigName, EmitDefaults`` (every field present, int64 as strings, enum names, ``null``
  for unset nullable messages), written compactly. Matching is on the decoded path split at
  ``/`` (so ``%2F`` in an id does not match ``{index}``); a path that matches no route, or only
  for another method, is ``501`` ``{"code":12,"message":"Not Implemented","details":[]}``.
  Request fields come from the query string (``runtime/query.go``): proto or JSON names
  (``pagination.count_total`` / ``pagination.countTotal``), the first of repeated values, unknown
  names ignored (``?epoch_id=`` on the inference listing is silently unfiltered), ``+`` read as
  a space (Go's ``url.ParseQuery``); integers as Go's ``strconv.ParseUint(v, 0, 64)``
  (``0x``, ``0o``, ``0b``, leading-``0`` octal, ``_``), bytes as standard then URL base64
  (``runtime/convert.go``); a bad value is ``400`` code 3 with the bare conversion error, a bad
  path parameter ``type mismatch, parameter: <name>, error: ...``. A bare API server
  (``prefix=""``) sits behind gorilla/mux, which answers an unclean path with ``301`` to
  ``path.Clean`` of it;
* **the SDK's query interceptor** (cosmos-sdk ``baseapp/grpcserver.go``):
  ``x-cosmos-block-height`` with exactly one value pins the height (two values are ignored);
  every ``200`` carries ``Grpc-Metadata-X-Cosmos-Block-Height`` (the asked height, or the latest)
  and the v1 gateway's ``Grpc-Metadata-Content-Type: application/grpc``; error answers carry
  neither (a failing handler's gRPC response is trailers-only, and the gateway writes no
  trailers as headers). A malformed or negative height, or one above the latest, fails in the
  interceptor with the SDK's registered error (``cosmossdk.io/errors`` ``GRPCStatus``:
  ``codespace sdk code 18|26|38: ...``, gRPC Unknown, so ``500``);
* **pagination** (cosmos-sdk ``types/query/collections_pagination.go``, :func:`compute_page`):
  rows in the order of their collections key bytes (``x/inference/keeper/keeper.go``:
  ``Inferences`` by the id's bytes, ``Participants`` by the address's bytes,
  ``EpochGroupDataMap`` by ``(uint64 BE epoch, model_id)``, ``EpochPerformanceSummaries`` by
  ``(length-prefixed address, uint64 BE epoch)``); ``pagination.key`` is an inclusive start key;
  ``next_key`` the next row's key in base64, or ``null``; ``limit`` 0 means 100 with
  ``count_total`` forced; ``total`` only on a key-less page with ``count_total`` (else ``"0"``);
  ``offset`` with ``key`` an error (``Internal`` where the handler wraps it, ``Unknown`` for
  ``ParticipantAll``); an offset past the end prints ``"pagination": null``; ``reverse`` with a
  key iterates ``[nil, key)`` backwards, as the code reads (the row at ``next_key`` is skipped);
* **the handlers** (``x/inference/keeper/query_*.go``): a missing record is ``404``
  ``{"code":5,"message":"not found","details":[]}``; ``epoch_performance_summary/{epoch}``
  filters all summaries (an unknown epoch gives ``[]``); ``excluded_participants/0`` is the
  effective epoch's; ``epoch_info.block_height`` and ``participant.block_height`` are the query
  height; ``active_confirmation_poc_event`` is always ``null`` (no confirmation PoC in
  progress); ``confirmation_poc_events/{epoch}`` lists the epoch's events by the
  ``(epoch, event_sequence)`` prefix (none: ``[]``; ``query_confirmation_poc_events.go``).

State by height: the stand-in holds a :class:`ChainHistory` of :class:`ChainSnapshot` (at height
1, at every epoch's effective height, at the last block, and at any extra heights); a query at
height ``h`` reads the latest snapshot at or below ``h`` (an archive node whose state changed only
at those heights). ``earliest_height`` makes a pruning node instead (older heights fail as the
SDK's ``failed to load state``).

An **older node** (``version=OLDER_VERSION``, v0.2.5) serves the routes of query.proto before
v0.2.6 (``82c43a42``), which added ``epoch_performance_summary/{epoch_index}`` (and before v0.2.8,
``f038d984``, which added ``confirmation_poc_events/{epoch_index}``): there those paths match no
route and are the gateway's 501. Its bodies are still v0.2.14's messages.

A **mainnet node** (tests/standin/mainnet.py) holds the real epochs 247-252 of the shared data
(``../shared/data/gonka-mainnet``) as its state: their inferences pruned, the aggregates kept.
That node predated some v0.2.14 fields; :attr:`ChainSnapshot.omitted_fields` leaves them out.

Knobs on :class:`StandinNode`: ``prefix``; ``rate_limit`` (:class:`RateLimit`, nginx's leaky
bucket on an injectable clock); :meth:`StandinNode.fail_next` (the next N requests, or N to one
RPC, answered 429/503 with an optional ``Retry-After``); ``earliest_height``; the request log
(:attr:`StandinNode.requests`) and per-RPC counters (:attr:`StandinNode.counts`, unmatched paths
under ``"<unrouted>"``).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote

from keepersim.chain import Chain
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.scenario import ParticipantSpec, Scenario
from keepersim.types.bech32 import ACCOUNT_ADDRESS_PREFIX, compute_bech32, is_valid_bech32
from keepersim.types.chain_json import compute_chain_json
from keepersim.types.messages import (
    INACTIVE,
    RAMPING,
    ConfirmationPoCEvent,
    Epoch,
    EpochGroupData,
    EpochPerformanceSummary,
    ExcludedParticipant,
    Inference,
    Params,
    Participant,
)

__all__ = [
    "API_PREFIX",
    "CURRENT_VERSION",
    "ChainHistory",
    "ChainSnapshot",
    "DEFAULT_LIMIT",
    "GrpcError",
    "HEIGHT_REQUEST_HEADER",
    "HEIGHT_RESPONSE_HEADER",
    "OLDER_VERSION",
    "PROXY_PREFIX",
    "PageRequest",
    "RESPONSE_KEYS",
    "ROUTES",
    "RateLimit",
    "RequestRecord",
    "Route",
    "StandinNode",
    "build_chain_history",
    "compute_address_key",
    "compute_clean_path",
    "compute_go_uint64",
    "compute_page",
    "get_poc_window_inferences",
    "make_standin_scenario",
    "serve_node",
]

PROXY_PREFIX = "/chain-api"
API_PREFIX = "/productscience/inference/inference"
HEIGHT_REQUEST_HEADER = "x-cosmos-block-height"
HEIGHT_RESPONSE_HEADER = "Grpc-Metadata-X-Cosmos-Block-Height"
#: cosmos-sdk ``types/query/pagination.go`` DefaultLimit.
DEFAULT_LIMIT = 100
#: The version string of a current node; any other version lacks the v0.2.6 routes.
CURRENT_VERSION = "v0.2.14"
OLDER_VERSION = "v0.2.5"

# gRPC codes (google.golang.org/grpc/codes) and grpc-gateway v1 HTTPStatusFromCode.
_UNKNOWN, _INVALID_ARGUMENT, _NOT_FOUND, _UNIMPLEMENTED, _INTERNAL = 2, 3, 5, 12, 13
_HTTP_STATUS = {_UNKNOWN: 500, _INVALID_ARGUMENT: 400, _NOT_FOUND: 404, _UNIMPLEMENTED: 501}
_HTTP_STATUS[_INTERNAL] = 500


class GrpcError(Exception):
    """A gRPC status the gateway turns into ``{"code", "message", "details": []}``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return _HTTP_STATUS.get(self.code, 500)


def _sdk_error(sdk_code: int, desc: str, msg: str) -> GrpcError:
    """An SDK registered error as the gRPC server reports it (``cosmossdk.io/errors``
    ``GRPCStatus``: ``codespace sdk code N: <desc>: <wrap message>``, gRPC code Unknown)."""
    return GrpcError(_UNKNOWN, f"codespace sdk code {sdk_code}: {desc}: {msg}")


# --------------------------------------------------------------------------------------------
# Data: snapshots of the chain's state, keyed as the chain's collections key them
# --------------------------------------------------------------------------------------------

_BECH32_CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"


def compute_address_key(address: str) -> bytes:
    """The address's bytes (``sdk.AccAddress``), the collections key of participant maps; a
    string that is not bech32 keys by its UTF-8 bytes."""
    if not is_valid_bech32(address):
        return address.encode()
    data = address[address.rindex("1") + 1 : -6]
    acc, bits, out = 0, 0, bytearray()
    for char in data.lower():
        acc = (acc << 5) | _BECH32_CHARSET.index(char)
        bits += 5
        if bits >= 8:
            bits -= 8
            out.append((acc >> bits) & 0xFF)
    return bytes(out)


def _epoch_key(epoch: int) -> bytes:
    return epoch.to_bytes(8, "big")


Row = tuple[bytes, dict[str, Any]]


@dataclass(frozen=True)
class ChainSnapshot:
    """The module's state after block ``height``, as the chain holds it (chain messages)."""

    height: int
    params: Params
    effective_epoch: int
    epochs: tuple[Epoch, ...]
    participants: tuple[Participant, ...]
    epoch_groups: tuple[EpochGroupData, ...]
    inferences: tuple[Inference, ...]
    summaries: tuple[EpochPerformanceSummary, ...]
    excluded: tuple[ExcludedParticipant, ...]
    confirmation_poc_events: tuple[ConfirmationPoCEvent, ...] = ()
    #: Fields the answering node's version does not have (``"<message full name>.<field>"``):
    #: left out of every body, as a node built before upstream added them prints them (the
    #: mainnet node of tests/standin/mainnet.py predates some v0.2.14 fields).
    omitted_fields: frozenset[str] = frozenset()
    _rendered: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def render(self, message: Any) -> dict[str, Any]:
        """``message`` as the gateway prints it (:func:`compute_chain_json`), without the
        :attr:`omitted_fields`."""
        data = compute_chain_json(message)
        if self.omitted_fields:
            _omit_fields(message.DESCRIPTOR, data, self.omitted_fields)
        return data

    def get_latest_epoch(self) -> Epoch:
        return max(self.epochs, key=lambda e: e.index)

    def get_rows(self, name: str) -> list[Row]:
        """One collection's rows ``(key bytes, chain JSON)`` in key order (rendered once)."""
        rows: list[Row] | None = self._rendered.get(name)
        if rows is None:
            rows = sorted(self._compute_rows(name), key=lambda r: r[0])
            self._rendered[name] = rows
        return rows

    def _compute_rows(self, name: str) -> list[Row]:
        if name == "participants":
            return [(compute_address_key(p.address), self.render(p)) for p in self.participants]
        if name == "inferences":
            return [(i.index.encode(), self.render(i)) for i in self.inferences]
        if name == "epoch_groups":
            return [
                (_epoch_key(g.epoch_index) + g.model_id.encode(), self.render(g))
                for g in self.epoch_groups
            ]
        if name == "summaries":
            out = []
            for s in self.summaries:
                address = compute_address_key(s.participant_id)
                key = bytes([len(address)]) + address + _epoch_key(s.epoch_index)
                out.append((key, self.render(s)))
            return out
        if name == "excluded":
            return [
                (_epoch_key(e.epoch_index) + compute_address_key(e.address), self.render(e))
                for e in self.excluded
            ]
        if name == "confirmation_poc_events":
            # keeper.go: ConfirmationPoCEvents keyed by (uint64 epoch, uint64 event_sequence)
            return [
                (_epoch_key(e.epoch_index) + _epoch_key(e.event_sequence), self.render(e))
                for e in self.confirmation_poc_events
            ]
        raise KeyError(name)


def _omit_fields(descriptor: Any, data: dict[str, Any], omitted: frozenset[str]) -> None:
    """Remove the ``omitted`` fields from ``data`` (a message printed by compute_chain_json),
    in nested messages too."""
    for fd in descriptor.fields:
        if f"{descriptor.full_name}.{fd.name}" in omitted:
            data.pop(fd.name, None)
            continue
        value = data.get(fd.name)
        if fd.message_type is None or value is None or fd.message_type.GetOptions().map_entry:
            continue
        for item in value if isinstance(value, list) else [value]:
            _omit_fields(fd.message_type, item, omitted)


@dataclass(frozen=True)
class ChainHistory:
    """Snapshots by height; a query pinned at ``h`` reads the latest one at or below ``h``."""

    snapshots: tuple[ChainSnapshot, ...]
    chain_id: str = "keepersim-standin"

    def __post_init__(self) -> None:
        heights = [s.height for s in self.snapshots]
        if not heights or heights != sorted(set(heights)):
            raise ValueError(f"snapshot heights must be non-empty and increasing, got {heights}")

    @property
    def latest(self) -> ChainSnapshot:
        return self.snapshots[-1]

    @property
    def heights(self) -> list[int]:
        return [s.height for s in self.snapshots]

    def get_snapshot_at(self, height: int) -> ChainSnapshot | None:
        found = None
        for snapshot in self.snapshots:
            if snapshot.height > height:
                break
            found = snapshot
        return found


def make_standin_scenario(*, blocks: int = 95, epoch_length: int = 20) -> Scenario:
    """Eight participants over three models, one going dark at block 25 (the ``sprt`` policy
    excludes it, "downtime"). Addresses are bech32 of chosen bytes whose base64 holds ``+``
    and ``/``, so the participant listing's ``next_key`` needs quoting."""
    models = [
        ("m-alpha",),
        ("m-alpha", "m-beta"),
        ("m-beta",),
        ("m-alpha", "m-gamma"),
        ("m-beta", "m-gamma"),
        ("m-alpha",),
        ("m-beta",),
        ("m-gamma",),
    ]
    participants = []
    for i, model_list in enumerate(models):
        raw = bytes([0xFB, 0xFF, 0xBF, i]) + bytes([(i * 37 + 11) % 256] * 16)
        miss = ((0, 0.02), (25, 0.95)) if i == 3 else ((0, 0.02),)
        participants.append(
            ParticipantSpec(
                address=compute_bech32("gonka", raw),
                weight=1000 * (i + 1),
                latency_min=1,
                latency_max=4,
                miss=miss,
                models=model_list,
            )
        )
    return Scenario(
        name="standin",
        seed=7,
        blocks=blocks,
        epoch_length=epoch_length,
        expiration_blocks=6,
        arrivals_per_block=3.0,
        participants=tuple(participants),
    )


def _copy(message: Any) -> Any:
    out = type(message)()
    out.CopyFrom(message)
    return out


def _capture(chain: Chain, height: int) -> ChainSnapshot:
    with chain.read() as keeper:
        return ChainSnapshot(
            height=height,
            params=_copy(keeper.get_params()),
            effective_epoch=keeper.get_effective_epoch_index(),
            epochs=tuple(_copy(e) for e in keeper.iterate_epochs()),
            participants=tuple(_copy(p) for p in keeper.iterate_participants()),
            epoch_groups=tuple(_copy(g) for g in keeper.iterate_epoch_groups()),
            inferences=tuple(_copy(i) for i in keeper.iterate_inferences()),
            summaries=tuple(_copy(s) for s in keeper.iterate_summaries()),
            excluded=tuple(_copy(e) for e in keeper.iterate_excluded()),
        )


def _digest(*parts: str, size: int = 32) -> bytes:
    return hashlib.blake2b("/".join(parts).encode(), digest_size=size).digest()


def _process_inference_bulk(inference: Inference) -> None:
    """The fields a v0.2.14 record carries that keepersim leaves empty, made from the id: hex
    hashes and base64 signatures (the payload fields stay "", as since v0.2.6)."""
    inference.prompt_hash = _digest(inference.index, "prompt").hex()
    inference.original_prompt_hash = _digest(inference.index, "original").hex()
    inference.transfer_signature = base64.b64encode(
        _digest(inference.index, "transfer", size=64)
    ).decode()
    inference.transferred_by = inference.requested_by
    if inference.executed_by:
        inference.response_hash = _digest(inference.index, "response").hex()
        signature = _digest(inference.index, "execution", size=64)
        inference.execution_signature = base64.b64encode(signature).decode()


def _process_chain_like(
    snapshot: ChainSnapshot, poc_window: int, statuses: Mapping[str, tuple[int, int]]
) -> ChainSnapshot:
    """The chain-like edits of :func:`build_chain_history` on one captured snapshot."""
    poc_start = {e.index: e.poc_start_block_height for e in snapshot.epochs}
    for index in poc_start:
        if index >= 1:
            poc_start[index] = max(0, poc_start[index] + 1 - poc_window)
    epochs = []
    for epoch in snapshot.epochs:
        epoch.poc_start_block_height = poc_start[epoch.index]
        epochs.append(epoch)
    for group in snapshot.epoch_groups:
        group.poc_start_block_height = poc_start.get(group.epoch_index, 0)
        for member in group.validation_weights:
            member.confirmation_weight = member.weight
            for node in member.ml_nodes:
                node.node_id = f"{member.member_address[-8:]}-{node.node_id}"
                node.poc_weight = member.weight // len(member.ml_nodes)
    threshold = snapshot.params.epoch_params.inference_pruning_epoch_threshold
    cutoff = snapshot.effective_epoch - threshold
    inferences = []
    for inference in snapshot.inferences:
        # x/inference/keeper/pruning.go: epochs 1 .. current - threshold; epoch 0 is not indexed.
        if 0 < inference.epoch_id <= cutoff:
            continue
        inference.epoch_poc_start_block_height = poc_start.get(inference.epoch_id, 0)
        _process_inference_bulk(inference)
        inferences.append(inference)
    for participant in snapshot.participants:
        edit = statuses.get(participant.address)
        if edit is not None and snapshot.height >= edit[1]:
            participant.status = edit[0]  # type: ignore[assignment]
    return ChainSnapshot(
        height=snapshot.height,
        params=snapshot.params,
        effective_epoch=snapshot.effective_epoch,
        epochs=tuple(epochs),
        participants=snapshot.participants,
        epoch_groups=snapshot.epoch_groups,
        inferences=tuple(inferences),
        summaries=snapshot.summaries,
        excluded=snapshot.excluded,
    )


def build_chain_history(
    scenario: Scenario | None = None,
    *,
    policy: str = "sprt",
    poc_window: int = 4,
    extra_heights: Sequence[int] = (),
    statuses: Mapping[str, tuple[int, int]] | None = None,
) -> ChainHistory:
    """Run ``scenario`` (default :func:`make_standin_scenario`) and keep snapshots at height 1,
    at each epoch's effective height (boundary + 1), at ``extra_heights`` and at the last block.

    Made chain-like on the copies (keepersim collapses PoC into the boundary block):

    * PoC window: epoch ``N >= 1`` (formed at boundary ``b``, effective ``b + 1``) gets
      ``poc_start_block_height = b + 1 - poc_window`` (its ``Epoch`` and groups, and its
      inferences' ``epoch_poc_start_block_height``); epoch ``N - 1`` stays effective until
      ``b``, so its inferences started in ``[b + 1 - poc_window, b]`` start inside N's PoC
      window, as on the chain (docs/design/chain-rest-api.md section 3.3);
    * pruning: inferences of epochs ``1 .. effective - inference_pruning_epoch_threshold`` are
      gone (epoch 0's are never indexed for pruning; section 3.2); summaries, groups and
      exclusions stay;
    * inferences: hex hashes and base64 signatures made from the id (the payloads stay "");
    * ML nodes: each node's ``poc_weight`` is its share of the member's weight, its id is made
      unique, and ``confirmation_weight`` is the member's weight (keepersim leaves them 0);
    * statuses: ``statuses[address] = (status, from_height)``; by default the 6th participant is
      ``RAMPING`` (a record from before v0.2.5) and the 3rd ``INACTIVE`` from the second epoch.
    """
    scenario = scenario or make_standin_scenario()
    if not 0 < poc_window < scenario.epoch_length:
        raise ValueError(f"poc_window must be in 1..{scenario.epoch_length - 1}, got {poc_window}")
    wanted = {1, scenario.blocks, *extra_heights}
    wanted |= {b + 1 for b in range(scenario.epoch_length, scenario.blocks, scenario.epoch_length)}
    captured: list[ChainSnapshot] = []

    def on_block(chain: Chain, height: int) -> None:
        if height in wanted:
            captured.append(_capture(chain, height))

    run_scenario(scenario, policy, store="memory", on_block=on_block)
    if statuses is None:
        addresses = [p.address for p in scenario.participants]
        statuses = {
            addresses[5]: (RAMPING, 0),
            addresses[2]: (INACTIVE, scenario.epoch_length + 1),
        }
    snapshots = tuple(_process_chain_like(s, poc_window, statuses) for s in captured)
    return ChainHistory(snapshots=snapshots, chain_id=f"keepersim-{scenario.name}")


def get_poc_window_inferences(snapshot: ChainSnapshot) -> list[Inference]:
    """Inferences of epoch N started inside epoch N+1's PoC window:
    ``poc_start(N+1) <= start_block_height < effective_block_height(N+1)``."""
    parents = {g.epoch_index: g for g in snapshot.epoch_groups if g.model_id == ""}
    out = []
    for inference in snapshot.inferences:
        nxt = parents.get(inference.epoch_id + 1)
        if nxt is not None and (
            nxt.poc_start_block_height <= inference.start_block_height < nxt.effective_block_height
        ):
            out.append(inference)
    return out


# --------------------------------------------------------------------------------------------
# Requests: query parameters and pagination as the gateway and CollectionPaginate read them
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PageRequest:
    """cosmos.base.query.v1beta1.PageRequest."""

    key: bytes = b""
    offset: int = 0
    limit: int = 0
    count_total: bool = False
    reverse: bool = False


_GO_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True}
_GO_BOOLS.update({"0": False, "f": False, "F": False, "FALSE": False, "false": False})
_GO_BOOLS["False"] = False
_BASE_PREFIXES = {"0x": 16, "0X": 16, "0o": 8, "0O": 8, "0b": 2, "0B": 2}


def compute_go_uint64(value: str) -> int:
    """Go's ``strconv.ParseUint(value, 0, 64)`` (grpc-gateway v1 ``runtime.Uint64``): decimal,
    ``0x`` / ``0o`` / ``0b`` prefixes, a leading ``0`` for octal, ``_`` between digits; raises
    ValueError with Go's message."""
    base, digits = 10, value
    if value[:2] in _BASE_PREFIXES:
        base, digits = _BASE_PREFIXES[value[:2]], value[2:]
    elif len(value) > 1 and value[0] == "0":
        base, digits = 8, value[1:]
    syntax = f'strconv.ParseUint: parsing "{value}": invalid syntax'
    if base != 10:
        digits = digits.removeprefix("_")  # one "_" may follow the base prefix
    if re.fullmatch(r"[0-9a-zA-Z_]+", digits) is None:
        raise ValueError(syntax)
    try:
        number = int(digits, base)  # "_" only between digits, as Go's underscoreOK
    except ValueError:
        raise ValueError(syntax) from None
    if number >= 2**64:
        raise ValueError(f'strconv.ParseUint: parsing "{value}": value out of range')
    return number


def _parse_uint64(value: str, name: str, *, path: bool = False) -> int:
    """A uint64 request field: a path parameter's error names it (the generated gateway's
    ``type mismatch, parameter: ...``), a query parameter's is the bare conversion error."""
    try:
        return compute_go_uint64(value)
    except ValueError as err:
        message = f"type mismatch, parameter: {name}, error: {err}" if path else str(err)
        raise GrpcError(_INVALID_ARGUMENT, message) from None


def _parse_bool(value: str) -> bool:
    if value not in _GO_BOOLS:
        raise GrpcError(_INVALID_ARGUMENT, f'strconv.ParseBool: parsing "{value}": invalid syntax')
    return _GO_BOOLS[value]


_URL_ALPHABET = re.compile(r"[A-Za-z0-9_=-]")


def _parse_bytes(value: str) -> bytes:
    """grpc-gateway v1 ``runtime.Bytes``: standard base64, else the URL alphabet (the error is
    the second decoder's ``illegal base64 data at input byte N``; N is the first character
    outside the URL alphabet, or the length when the padding is wrong: an approximation)."""
    for altchars in (None, b"-_"):
        with contextlib.suppress(binascii.Error, ValueError):
            return base64.b64decode(value, altchars=altchars, validate=True)
    offset = next((i for i, c in enumerate(value) if not _URL_ALPHABET.fullmatch(c)), len(value))
    raise GrpcError(_INVALID_ARGUMENT, f"illegal base64 data at input byte {offset}")


def _get_param(query: Mapping[str, list[str]], *names: str) -> str | None:
    """The first value of the first given name (proto name, then JSON name): grpc-gateway v1
    ``populateFieldValueFromPath`` uses ``values[0]`` and only logs the others."""
    for name in names:
        if name in query:
            return query[name][0]
    return None


def _parse_page_request(query: Mapping[str, list[str]]) -> PageRequest:
    key = _get_param(query, "pagination.key")
    offset = _get_param(query, "pagination.offset")
    limit = _get_param(query, "pagination.limit")
    count_total = _get_param(query, "pagination.count_total", "pagination.countTotal")
    reverse = _get_param(query, "pagination.reverse")
    return PageRequest(
        key=b"" if key is None else _parse_bytes(key),
        offset=0 if offset is None else _parse_uint64(offset, "pagination.offset"),
        limit=0 if limit is None else _parse_uint64(limit, "pagination.limit"),
        count_total=False if count_total is None else _parse_bool(count_total),
        reverse=False if reverse is None else _parse_bool(reverse),
    )


def compute_page(
    rows: Sequence[Row], page: PageRequest
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """``query.CollectionPaginate`` over ``rows`` (in key order): the page and the printed
    ``PageResponse`` (``None`` prints ``null``: an offset past the end)."""
    if page.offset > 0 and page.key:
        raise ValueError("invalid request, either offset or key is expected, got both")
    limit, count_total = page.limit, page.count_total
    if limit == 0:
        limit, count_total = DEFAULT_LIMIT, True
    if page.key:
        if page.reverse:
            candidates = [r for r in reversed(rows) if r[0] < page.key]
        else:
            candidates = [r for r in rows if r[0] >= page.key]
        next_key = candidates[limit][0] if len(candidates) > limit else b""
        return [r[1] for r in candidates[:limit]], _page_response(next_key, 0)
    ordered = list(reversed(rows)) if page.reverse else list(rows)
    if page.offset > len(ordered):
        return [], None
    taken = ordered[page.offset : page.offset + limit]
    rest = ordered[page.offset + limit :]
    next_key = rest[0][0] if rest else b""
    return [r[1] for r in taken], _page_response(next_key, len(ordered) if count_total else 0)


def _page_response(next_key: bytes, total: int) -> dict[str, Any]:
    return {
        "next_key": base64.b64encode(next_key).decode() if next_key else None,
        "total": str(total),
    }


# --------------------------------------------------------------------------------------------
# Routes: query.proto's GET routes, their response keys, and the handlers' rules
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One routed query: the snapshot read, the pinned (or latest) height, parameters."""

    snapshot: ChainSnapshot
    height: int
    path: Mapping[str, str]
    query: Mapping[str, list[str]]


Handler = Callable[[Call], dict[str, Any]]


@dataclass(frozen=True)
class Route:
    """A ``google.api.http`` GET route: its RPC name, path template under :data:`API_PREFIX`,
    and the first version that serves it."""

    rpc: str
    template: str
    handler: Handler
    since: str = "v0.2.5"

    @property
    def segments(self) -> list[str]:
        return self.template.strip("/").split("/")

    def match(self, segments: Sequence[str]) -> dict[str, str] | None:
        own = self.segments
        if len(own) != len(segments):
            return None
        values: dict[str, str] = {}
        for mine, theirs in zip(own, segments, strict=True):
            if mine.startswith("{"):
                if theirs == "":
                    return None
                values[mine[1:-1]] = theirs
            elif mine != theirs:
                return None
        return values


def _paginated(call: Call, rows: Sequence[Row], wrap_internal: bool) -> tuple[list[Any], Any]:
    try:
        return compute_page(rows, _parse_page_request(call.query))
    except ValueError as err:
        # InferenceAll / EpochGroupDataAll / ...All wrap it in codes.Internal; ParticipantAll
        # returns it as is (gRPC Unknown).
        raise GrpcError(_INTERNAL if wrap_internal else _UNKNOWN, str(err)) from err


def _not_found() -> GrpcError:
    return GrpcError(_NOT_FOUND, "not found")


def _find(rows: Sequence[Row], key: bytes) -> dict[str, Any]:
    for row_key, value in rows:
        if row_key == key:
            return value
    raise _not_found()


def _handle_params(call: Call) -> dict[str, Any]:
    return {"params": call.snapshot.render(call.snapshot.params)}


def _handle_participant_all(call: Call) -> dict[str, Any]:
    items, page = _paginated(call, call.snapshot.get_rows("participants"), wrap_internal=False)
    return {"participant": items, "pagination": page, "block_height": str(call.height)}


def _handle_participant(call: Call) -> dict[str, Any]:
    index = call.path["index"]
    # GetParticipant: sdk.AccAddressFromBech32 (the chain's prefix) or "not found"
    if not (is_valid_bech32(index) and index.lower().startswith(ACCOUNT_ADDRESS_PREFIX + "1")):
        raise _not_found()
    rows = call.snapshot.get_rows("participants")
    return {"participant": _find(rows, compute_address_key(index))}


def _handle_count_participants(call: Call) -> dict[str, Any]:
    return {"total": str(len(call.snapshot.participants))}


def _handle_inference_all(call: Call) -> dict[str, Any]:
    items, page = _paginated(call, call.snapshot.get_rows("inferences"), wrap_internal=True)
    return {"inference": items, "pagination": page}


def _handle_inference(call: Call) -> dict[str, Any]:
    rows = call.snapshot.get_rows("inferences")
    return {"inference": _find(rows, call.path["index"].encode())}


def _handle_epoch_group_data_all(call: Call) -> dict[str, Any]:
    items, page = _paginated(call, call.snapshot.get_rows("epoch_groups"), wrap_internal=True)
    return {"epoch_group_data": items, "pagination": page}


def _handle_epoch_group_data(call: Call) -> dict[str, Any]:
    epoch = _parse_uint64(call.path["epoch_index"], "epoch_index", path=True)
    model = _get_param(call.query, "model_id", "modelId") or ""
    rows = call.snapshot.get_rows("epoch_groups")
    return {"epoch_group_data": _find(rows, _epoch_key(epoch) + model.encode())}


def _handle_current_epoch_group_data(call: Call) -> dict[str, Any]:
    rows = call.snapshot.get_rows("epoch_groups")
    key = _epoch_key(call.snapshot.effective_epoch)
    return {"epoch_group_data": _find(rows, key)}


def _handle_get_current_epoch(call: Call) -> dict[str, Any]:
    return {"epoch": str(call.snapshot.effective_epoch)}


def _handle_epoch_info(call: Call) -> dict[str, Any]:
    return {
        "block_height": str(call.height),
        "params": call.snapshot.render(call.snapshot.params),
        "latest_epoch": call.snapshot.render(call.snapshot.get_latest_epoch()),
        "is_confirmation_poc_active": False,
        "active_confirmation_poc_event": None,
    }


def _summaries_of(call: Call, epoch: int) -> list[dict[str, Any]]:
    return [v for _, v in call.snapshot.get_rows("summaries") if v["epoch_index"] == str(epoch)]


def _handle_summary_by_epoch(call: Call) -> dict[str, Any]:
    epoch = _parse_uint64(call.path["epoch_index"], "epoch_index", path=True)
    return {"epochPerformanceSummary": _summaries_of(call, epoch)}


def _handle_summary_by_participant(call: Call) -> dict[str, Any]:
    epoch = _parse_uint64(call.path["epoch_index"], "epoch_index", path=True)
    for value in _summaries_of(call, epoch):
        if value["participant_id"] == call.path["participantId"]:
            return {"epochPerformanceSummary": value}
    raise _not_found()


def _handle_summary_all(call: Call) -> dict[str, Any]:
    items, page = _paginated(call, call.snapshot.get_rows("summaries"), wrap_internal=True)
    return {"epochPerformanceSummary": items, "pagination": page}


def _handle_excluded(call: Call) -> dict[str, Any]:
    epoch = _parse_uint64(call.path["epoch_index"], "epoch_index", path=True)
    if epoch == 0:
        epoch = call.snapshot.effective_epoch
    rows = call.snapshot.get_rows("excluded")
    return {"items": [v for k, v in rows if k[:8] == _epoch_key(epoch)]}


def _handle_confirmation_poc_events(call: Call) -> dict[str, Any]:
    """``query_confirmation_poc_events.go``: the epoch's events by prefix range (none: ``[]``)."""
    epoch = _parse_uint64(call.path["epoch_index"], "epoch_index", path=True)
    rows = call.snapshot.get_rows("confirmation_poc_events")
    return {"events": [v for k, v in rows if k[:8] == _epoch_key(epoch)]}


#: The served routes (query.proto at ee730031, ``rpc`` lines 47-412; since: the upstream
#: version that added the route, where it matters for the older node).
ROUTES: tuple[Route, ...] = (
    Route("Params", "/params", _handle_params),
    Route("Inference", "/inference/{index}", _handle_inference),
    Route("InferenceAll", "/inference", _handle_inference_all),
    Route("Participant", "/participant/{index}", _handle_participant),
    Route("ParticipantAll", "/participant", _handle_participant_all),
    Route("EpochGroupData", "/epoch_group_data/{epoch_index}", _handle_epoch_group_data),
    Route("EpochGroupDataAll", "/epoch_group_data", _handle_epoch_group_data_all),
    Route("GetCurrentEpoch", "/get_current_epoch", _handle_get_current_epoch),
    Route("CurrentEpochGroupData", "/current_epoch_group_data", _handle_current_epoch_group_data),
    Route(
        "EpochPerformanceSummary",
        "/epoch_performance_summary/{epoch_index}",
        _handle_summary_by_epoch,
        since="v0.2.6",
    ),
    Route(
        "EpochPerformanceSummaryByParticipant",
        "/epoch_performance_summary/{epoch_index}/{participantId}",
        _handle_summary_by_participant,
    ),
    Route("EpochPerformanceSummaryAll", "/epoch_performance_summary", _handle_summary_all),
    Route("CountParticipants", "/participants/count", _handle_count_participants),
    Route("EpochInfo", "/epoch_info", _handle_epoch_info),
    Route("ExcludedParticipants", "/excluded_participants/{epoch_index}", _handle_excluded),
    Route(
        "ListConfirmationPoCEvents",
        "/confirmation_poc_events/{epoch_index}",
        _handle_confirmation_poc_events,
        since="v0.2.8",  # f038d984 "Upgrade v0.2.8" added the route
    ),
)

#: Each route's response message fields, in declaration order (query.proto at ee730031,
#: line of the message): the keys of every 200 answer, exactly.
RESPONSE_KEYS: dict[str, tuple[str, ...]] = {
    "Params": ("params",),  # QueryParamsResponse l.497
    "Inference": ("inference",),  # QueryGetInferenceResponse l.507
    "InferenceAll": ("inference", "pagination"),  # QueryAllInferenceResponse l.515
    "Participant": ("participant",),  # QueryGetParticipantResponse l.524
    "ParticipantAll": ("participant", "pagination", "block_height"),  # l.532
    "EpochGroupData": ("epoch_group_data",),  # QueryGetEpochGroupDataResponse l.561
    "EpochGroupDataAll": ("epoch_group_data", "pagination"),  # l.569
    "GetCurrentEpoch": ("epoch",),  # QueryGetCurrentEpochResponse l.721
    "CurrentEpochGroupData": ("epoch_group_data",),  # l.742
    "EpochPerformanceSummary": ("epochPerformanceSummary",),  # l.816
    "EpochPerformanceSummaryByParticipant": ("epochPerformanceSummary",),  # l.825
    "EpochPerformanceSummaryAll": ("epochPerformanceSummary", "pagination"),  # l.833
    "CountParticipants": ("total",),  # QueryCountAllParticipantsResponse l.939
    "EpochInfo": (
        "block_height",
        "params",
        "latest_epoch",
        "is_confirmation_poc_active",
        "active_confirmation_poc_event",
    ),  # QueryEpochInfoResponse l.1055
    "ExcludedParticipants": ("items",),  # QueryExcludedParticipantsResponse l.1166
    "ListConfirmationPoCEvents": ("events",),  # QueryConfirmationPoCEventsResponse l.1185
}


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.lstrip("v").split("."))


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


@dataclass
class RateLimit:
    """nginx ``limit_req rate=<per_minute>r/m burst=<burst> nodelay``: a leaky bucket whose
    excess drains at ``per_minute / 60`` per second; a request that would push the excess above
    ``burst`` is rejected (and not counted)."""

    per_minute: float = 20.0
    burst: int = 200
    clock: Callable[[], float] = time.monotonic
    _excess: float = 0.0
    _last: float | None = None

    def is_allowed(self) -> bool:
        """``ngx_http_limit_req_lookup``: the first request of a client starts at excess 0;
        later ones ``max(excess - drained + 1, 0)``, rejected (state unchanged) above burst."""
        now = self.clock()
        if self._last is None:
            self._excess, self._last = 0.0, now
            return True
        excess = max(self._excess - (now - self._last) * self.per_minute / 60.0 + 1, 0.0)
        if excess > self.burst:
            return False
        self._excess, self._last = excess, now
        return True


@dataclass(frozen=True)
class RequestRecord:
    """One request as the stand-in saw it (``height_header``: the first pin value, if any)."""

    path: str
    rpc: str | None
    query: dict[str, list[str]]
    height_header: str | None
    status: int


@dataclass
class _Failure:
    count: int
    status: int
    retry_after: int | None
    rpc: str | None


_NGINX_PAGES = {
    404: "404 Not Found",
    429: "429 Too Many Requests",
    503: "503 Service Temporarily Unavailable",
}


def _nginx_page(status: int) -> bytes:
    title = _NGINX_PAGES.get(status, f"{status} Error")
    return (
        f"<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n<center><h1>{title}</h1>"
        "</center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
    ).encode()


@dataclass(frozen=True)
class _Answer:
    status: int
    body: bytes
    content_type: str | None
    headers: tuple[tuple[str, str], ...] = ()


def _gateway_json(status: int, payload: Any, headers: tuple[tuple[str, str], ...]) -> _Answer:
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    return _Answer(status, body, "application/json", headers)


def _grpc_error_answer(err: GrpcError, headers: tuple[tuple[str, str], ...] = ()) -> _Answer:
    payload = {"code": err.code, "message": err.message, "details": []}
    return _gateway_json(err.http_status, payload, headers)


_HEIGHT = re.compile(r"[+-]?[0-9]+")


def compute_clean_path(path: str) -> str:
    """Go's ``path.Clean`` keeping a trailing slash (gorilla/mux ``cleanPath``; nginx's URI
    normalisation gives the same for the paths used here)."""
    if not path.startswith("/"):
        path = "/" + path
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    clean = "/" + "/".join(parts)
    if path.endswith("/") and clean != "/":
        clean += "/"
    return clean


class StandinNode:
    """A stand-in node over ``history``; start with :meth:`start` (or :func:`serve_node`)."""

    def __init__(
        self,
        history: ChainHistory,
        *,
        version: str = CURRENT_VERSION,
        prefix: str = PROXY_PREFIX,
        rate_limit: RateLimit | None = None,
        earliest_height: int | None = None,
    ) -> None:
        self.history = history
        self.version = version
        self.prefix = prefix.rstrip("/")
        self.rate_limit = rate_limit
        self.earliest_height = earliest_height
        self.routes = tuple(r for r in ROUTES if _version_key(r.since) <= _version_key(version))
        self.requests: list[RequestRecord] = []
        self.counts: Counter[str] = Counter()
        self._failures: list[_Failure] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- knobs -----------------------------------------------------------------------------

    def fail_next(
        self,
        count: int,
        status: int = 503,
        *,
        retry_after: int | None = None,
        rpc: str | None = None,
    ) -> None:
        """Answer the next ``count`` requests (to ``rpc`` only, if given) with ``status`` and an
        nginx page, with ``Retry-After: <retry_after>`` when given; queued after earlier ones."""
        with self._lock:
            self._failures.append(_Failure(count, status, retry_after, rpc))

    def reset_counts(self) -> None:
        with self._lock:
            self.requests.clear()
            self.counts.clear()

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The host root, as the audit's ``--node`` takes it (append :attr:`prefix` for the
        chain's API)."""
        if self._server is None:
            raise RuntimeError("stand-in node not started")
        return f"http://127.0.0.1:{self._server.server_port}"

    @property
    def api_url(self) -> str:
        """The chain API base: ``<url><prefix>`` (keepersim's ``--node`` convention)."""
        return self.url + self.prefix

    def start(self) -> StandinNode:
        node = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = "nginx"
            sys_version = ""

            def _serve(self) -> None:
                answer = node.process_request(self.command, self.path, self.headers)
                self.send_response(answer.status)
                if answer.content_type is not None:
                    self.send_header("Content-Type", answer.content_type)
                self.send_header("Content-Length", str(len(answer.body)))
                for name, value in answer.headers:
                    self.send_header(name, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(answer.body)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _serve

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    # -- one request -----------------------------------------------------------------------

    def process_request(self, method: str, raw_path: str, headers: Any) -> _Answer:
        """The answer to one request (also usable without a socket)."""
        path, _, raw_query = raw_path.partition("?")
        query = parse_qs(raw_query, keep_blank_values=True)
        height_values = headers.get_all(HEIGHT_REQUEST_HEADER) or []
        api_path, redirect = self._route_path(path)
        route, values = self._match(method, api_path)
        answer = self._answer(route, values, api_path, redirect, raw_query, query, height_values)
        with self._lock:
            rpc = route.rpc if route is not None else None
            self.counts[rpc or "<unrouted>"] += 1
            height = height_values[0] if height_values else None
            self.requests.append(RequestRecord(path, rpc, query, height, answer.status))
        return answer

    def _route_path(self, path: str) -> tuple[str | None, str | None]:
        """The path the gateway matches (``None``: outside the proxy's location), and where
        gorilla/mux redirects an unclean path (bare API server only).

        Behind the proxy, nginx normalises the URI (decodes ``%XX``, merges slashes, resolves
        dot segments) and ``proxy_pass http://chain_api_backend/`` sends it with the location
        prefix replaced, so the node sees a clean path. A bare API server's router (gorilla/mux,
        ``cleanPath``) answers an unclean decoded path with ``301`` to the clean one."""
        decoded = unquote(path)
        if self.prefix:
            normal = compute_clean_path(decoded)
            if not normal.startswith(self.prefix + "/"):
                return None, None
            return normal[len(self.prefix) :], None
        clean = compute_clean_path(decoded)
        return decoded, (clean if clean != decoded else None)

    def _match(self, method: str, api_path: str | None) -> tuple[Route | None, dict[str, str]]:
        if api_path is None or method != "GET" or not api_path.startswith(API_PREFIX + "/"):
            return None, {}
        segments = api_path[len(API_PREFIX) + 1 :].split("/")
        for route in self.routes:
            values = route.match(segments)
            if values is not None:
                return route, values
        return None, {}

    def _take_failure(self, rpc: str | None) -> _Failure | None:
        with self._lock:
            for failure in self._failures:
                if failure.rpc is None or failure.rpc == rpc:
                    failure.count -= 1
                    if failure.count <= 0:
                        self._failures.remove(failure)
                    return failure
        return None

    def _answer(
        self,
        route: Route | None,
        values: dict[str, str],
        api_path: str | None,
        redirect: str | None,
        raw_query: str,
        query: dict[str, list[str]],
        height_values: list[str],
    ) -> _Answer:
        failure = self._take_failure(route.rpc if route is not None else None)
        if failure is not None:
            extra = (
                () if failure.retry_after is None else (("Retry-After", str(failure.retry_after)),)
            )
            return _Answer(failure.status, _nginx_page(failure.status), "text/html", extra)
        if self.rate_limit is not None:
            with self._lock:
                allowed = self.rate_limit.is_allowed()
            if not allowed:
                return _Answer(503, _nginx_page(503), "text/html")
        if api_path is None:
            return _Answer(404, _nginx_page(404), "text/html")
        if redirect is not None:
            location = redirect + ("?" + raw_query if raw_query else "")
            return _Answer(301, b"", None, (("Location", location),))
        if route is None:
            return _grpc_error_answer(GrpcError(_UNIMPLEMENTED, "Not Implemented"))
        try:
            height, snapshot = self._resolve_height(height_values)
        except GrpcError as err:
            return _grpc_error_answer(err)
        headers = (
            ("Grpc-Metadata-Content-Type", "application/grpc"),
            (HEIGHT_RESPONSE_HEADER, str(height)),
        )
        try:
            payload = route.handler(Call(snapshot, height, values, query))
        except GrpcError as err:
            # A failing handler makes a trailers-only gRPC response: the metadata the interceptor
            # set arrives as trailers, which the v1 gateway does not write as headers.
            return _grpc_error_answer(err)
        return _gateway_json(200, payload, headers)

    def _resolve_height(self, height_values: list[str]) -> tuple[int, ChainSnapshot]:
        latest = self.history.latest.height
        height = 0
        if len(height_values) == 1:  # md.Get(...) with exactly one value, else ignored
            value = height_values[0]
            problem = None
            if _HEIGHT.fullmatch(value) is None:
                problem = "invalid syntax"
            elif not -(2**63) <= int(value) < 2**63:
                problem = "value out of range"
            if problem is not None:
                raise _sdk_error(
                    18,
                    "invalid request",
                    f'Baseapp.RegisterGRPCServer: invalid height header "{HEIGHT_REQUEST_HEADER}":'
                    f' strconv.ParseInt: parsing "{value}": {problem}',
                )
            height = int(value)
            if height < 0:
                raise _sdk_error(
                    18,
                    "invalid request",
                    "cannot query with height < 0; please provide a valid height",
                )
        if height > latest:
            raise _sdk_error(
                26,
                "invalid height",
                "cannot query with height in the future; please provide a valid height",
            )
        if height == 0:
            height = latest
        snapshot = self.history.get_snapshot_at(height)
        if snapshot is None or (self.earliest_height is not None and height < self.earliest_height):
            raise _sdk_error(
                38,
                "not found",
                f"failed to load state at height {height}; version does not exist "
                f"(latest height: {latest})",
            )
        return height, snapshot


@contextlib.contextmanager
def serve_node(history: ChainHistory, **kwargs: Any) -> Iterator[StandinNode]:
    """A started :class:`StandinNode` (keyword arguments as its constructor), stopped after."""
    node = StandinNode(history, **kwargs).start()
    try:
        yield node
    finally:
        node.stop()
