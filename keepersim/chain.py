"""The library's front door: a chain over a store, driven block by block, queried between blocks.

Thread-safe: one block at a time (a lock), any number of queries meanwhile. Queries read the last
committed block only (the block being built lives in its buffer), and a commit excludes readers
for the instant of its atomic write, so no query sees half a block.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from google.protobuf.message import Message

from keepersim.keeper.acceleration.verdict_memo import ModelTable, SelectionIndex
from keepersim.keeper.context import BlockContext
from keepersim.keeper.keeper import Keeper
from keepersim.keeper.policies import PolicyFactory, get_override, get_policy
from keepersim.keeper.policies.base import HealthPolicy, ParamsView, PolicyReader
from keepersim.keeper.readonly import ReadOnlyStore
from keepersim.keeper.selection import (
    PipelineRules,
    SelectionTable,
    compute_draw,
    compute_draws,
    compute_selection_seed,
    get_candidates,
    get_pipeline_rules,
    get_poc_heights,
)
from keepersim.module.abci import begin_block, end_block
from keepersim.module.genesis import export_genesis, init_genesis
from keepersim.module.msg_server import get_message_route
from keepersim.rwlock import RWLock
from keepersim.store.committed import CommitStore
from keepersim.store.kv import KVBackend, prefix_end
from keepersim.store.leveldb import LevelDBBackend
from keepersim.store.memory import MemoryBackend
from keepersim.types import keys
from keepersim.types.errors import BlockError, GenesisError, KeepersimError
from keepersim.types.events import (
    EpochSettled,
    Event,
    ParticipantDeactivated,
)
from keepersim.types.messages import Inference, Params, Participant
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams, ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis

DEFAULT_HOME = Path(os.environ.get("KEEPERSIM_HOME", ".keepersim"))

#: Where :func:`open_chain` keeps a chain.
StoreKind = Literal["leveldb", "memory"]
STORE_KINDS: tuple[StoreKind, ...] = ("leveldb", "memory")

# Events after which the selection index starts afresh (their exact types: events are final).
_RESET_EVENTS: frozenset[type] = frozenset({EpochSettled, ParticipantDeactivated})
# Message kinds (get_message_route) of a participant registration.
_REGISTRATION_KINDS = frozenset({"MsgRegisterParticipant", "register_participant"})


@dataclass(slots=True)
class TxResult:
    """``gas_used``: the message's gas (the SDK's KV schedule, keepersim/store/gas.py), a
    rejected one's too, as the SDK charges a failed tx. Not changed once made; not frozen: one
    is made per message, and a frozen dataclass's constructor costs three times as much."""

    index: int
    kind: str
    ok: bool
    error: str = ""
    gas_used: int = 0


@dataclass(slots=True)
class BlockResult:
    """``gas_used``: the block's gas, begin block, messages and end block; ``gas_by_step``: it
    by ``begin_block``, message kind (its messages summed) and end-block step name. Not changed
    once made; not frozen, as TxResult: one is made per block."""

    height: int
    app_hash: bytes
    events: tuple[Event, ...]
    tx_results: tuple[TxResult, ...]
    gas_used: int = 0
    gas_by_step: Mapping[str, int] = field(default_factory=dict)

    def get_failed(self) -> list[TxResult]:
        results = self.tx_results
        return [r for r in results if not r.ok] if results else []


MetaHook = Callable[[BlockResult], Mapping[bytes, bytes | None]]
"""Called with a block's result (``app_hash`` still empty) just before its commit; returns
unhashed entries (keys under ``RUN_META_PREFIX``; None deletes one) written in the block's own
batch."""


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a stored collection, read at one committed ``height`` (:meth:`Chain.get_page`).

    ``values`` are the stored bytes in key order; ``next_key`` is the key (after the collection's
    prefix) the next page starts at, None on the last page; ``total`` counts the whole collection
    when asked, else 0 (as Cosmos ``query.Paginate``)."""

    height: int
    values: tuple[bytes, ...]
    next_key: bytes | None
    total: int


@dataclass(frozen=True, slots=True)
class Selection:
    address: str
    height: int
    model: str
    request_id: str
    fallback: bool
    panic: bool


class _CommittedRead:
    """Chain.read(): ``with`` it, a read-only keeper over the last committed block, the chain's
    read lock held (a class, not a generator: the chain reads at every block)."""

    __slots__ = ("_chain",)

    def __init__(self, chain: Chain) -> None:
        self._chain = chain

    def __enter__(self) -> Keeper:
        chain = self._chain
        chain._rw.acquire_read()
        try:
            return Keeper(
                ReadOnlyStore(chain._store.backend),
                chain._chain_id,
                chain._params,
                chain._extension_params,
            )
        except BaseException:
            chain._rw.release_read()
            raise

    def __exit__(self, *exc: object) -> None:
        self._chain._rw.release_read()


class Chain:
    """A keepersim chain: genesis, blocks, messages, queries, selection, events."""

    def __init__(
        self,
        backend: KVBackend,
        *,
        policy_override: PolicyFactory | None = None,
        write_every: int = 1,
    ) -> None:
        """``policy_override``: a harness's policy (the simulator's oracle) that this chain runs
        instead of the one its params name; not a param, so governance can never select it.
        ``write_every``: commits between two write-backs of the state cache to ``backend``
        (keepersim.store.cache; the app hash is computed at every commit either way)."""
        # The inferences only grow: the one collection the cache holds as used, not in full.
        self._store = CommitStore(backend, streamed=(keys.INFERENCES,), write_every=write_every)
        self._block_lock = threading.Lock()
        self._rw = RWLock()
        self._index_lock = threading.Lock()
        self._index = SelectionIndex()
        # The policy's pipeline rules (its policy is named in the params, too).
        self._rules: ParamsView[PipelineRules] = ParamsView(
            lambda ext: get_pipeline_rules(self.get_policy_object(ext.health_params.policy), ext)
        )
        self._policies: dict[str, HealthPolicy] = {}
        # The policy of the block's extension params, looked up once per params object (the
        # chain replaces its params on a change and never edits them).
        self._block_policy: tuple[ExtensionParams | None, HealthPolicy] = (None, HealthPolicy())
        self._override = None if policy_override is None else get_override(policy_override)
        self._chain_id = ""
        # Decoded params of the last commit (read-only; replaced, never mutated).
        self._params: Params | None = None
        self._extension_params: ExtensionParams | None = None
        if self.has_genesis():
            self._chain_id = Keeper(ReadOnlyStore(self._store.backend)).chain_id

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        memory: bool = False,
        genesis: Genesis | None = None,
        policy_override: PolicyFactory | None = None,
        write_every: int = 1,
    ) -> Chain:
        """Open (or create) a chain on a LevelDB folder (default ``./.keepersim/chain``), or in
        memory; apply ``genesis`` if the store has none yet. ``write_every``: see __init__."""
        backend: KVBackend
        if memory:
            backend = MemoryBackend()
        else:
            folder = Path(path) if path is not None else DEFAULT_HOME / "chain"
            folder.mkdir(parents=True, exist_ok=True)
            backend = LevelDBBackend(folder)
        chain = cls(backend, policy_override=policy_override, write_every=write_every)
        if genesis is not None and not chain.has_genesis():
            try:
                chain.init_genesis(genesis)
            except BaseException:
                chain.close()  # release the folder: the caller never gets this chain to close
                raise
        return chain

    # lifecycle
    def has_genesis(self) -> bool:
        # Params exist from genesis on and are never deleted: once seen, no need to read again.
        if self._params is None:
            raw = self._store.backend.get(keys.PARAMS)
            if raw is None:
                return False
            self._params = Params.FromString(raw)
        return True

    def init_genesis(self, genesis: Genesis) -> bytes:
        with self._block_lock:
            if self.has_genesis():
                raise GenesisError("the store already has a genesis")
            buffer = self._store.begin()
            try:
                keeper = Keeper(buffer)
                init_genesis(keeper, genesis)
                with self._rw.write():
                    app_hash = self._store.commit(buffer, genesis.keepersim.height)
                    self._params = keeper.get_params()
                    self._extension_params = keeper.get_extension_params()
            except BaseException:
                buffer.discard()
                raise
            self._chain_id = genesis.chain_id
            with self._index_lock:
                self._index.process_commit(set(), True, {})
            return app_hash

    @property
    def height(self) -> int:
        return self._store.get_height()

    @property
    def app_hash(self) -> bytes:
        return self._store.get_app_hash()

    def verify_app_hash(self) -> bool:
        """Recompute the app hash from the whole committed state and compare (a full scan: for
        checks, not for every block)."""
        with self._block_lock, self._rw.read():
            return self._store.verify_app_hash()

    @property
    def chain_id(self) -> str:
        return self._chain_id

    def flush(self) -> None:
        """Write every commit the state cache holds back to the store now."""
        with self._block_lock, self._rw.write():
            self._store.flush()

    def close(self) -> None:
        """Write back what the state cache holds, then close the store."""
        with self._block_lock, self._rw.write():
            self._store.close()

    def __enter__(self) -> Chain:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get_policy_object(self, name: str) -> HealthPolicy:
        """The policy the chain runs when its params name ``name``: the override if it has one."""
        if self._override is not None:
            return self._override
        policy = self._policies.get(name)
        if policy is None:
            policy = get_policy(name)
            self._policies[name] = policy
        return policy

    def get_policy_name(self) -> str:
        """The name of the policy in force (an override's own name)."""
        if self._override is not None:
            return self._override.name
        with self.read() as k:
            return k.get_extension_params().health_params.policy

    def deliver_block(
        self,
        txs: Iterable[Message] = (),
        height: int | None = None,
        *,
        strict: bool = False,
        meta: MetaHook | None = None,
    ) -> BlockResult:
        """Begin block, the messages in order, end block, commit; return the events.

        A message that breaks a rule is rejected alone, in its own nested scope of the block's
        buffer (nothing it wrote, emitted or touched stays), and reported in ``tx_results``;
        with ``strict`` it fails the whole block instead. Any error in the block's own logic
        discards the block: the store stays at the last commit.

        ``meta`` (a resumable run's checkpoint): see :data:`MetaHook`; not part of the app hash.
        """
        with self._block_lock:
            if not self.has_genesis():
                raise BlockError("the chain has no genesis")
            last = self._store.get_height()
            h = last + 1 if height is None else height
            if h != last + 1:
                # Expiries and epoch boundaries happen at exact heights: a gap would skip them.
                raise BlockError(f"block height {h} does not follow the last committed {last}")
            msgs = list(txs)
            rejected: dict[int, TxResult] = {}
            while True:
                result = self._deliver_once(msgs, h, strict, rejected, meta)
                if result is not None:
                    return result
                # A rejected message left what its scope cannot take back (touched marks, the
                # policy's in-memory state): the block again, without it.

    def _deliver_once(
        self,
        msgs: list[Message],
        h: int,
        strict: bool,
        rejected: dict[int, TxResult],
        meta: MetaHook | None,
    ) -> BlockResult | None:
        """Build and commit block ``h`` (the block lock held), leaving out the messages of
        ``rejected``; None (nothing committed) if a message is rejected after it marked
        addresses touched or reached the policy (it joins ``rejected``)."""
        buffer = self._store.begin()
        try:
            keeper = Keeper(buffer, self._chain_id, self._params, self._extension_params)
            begin_block(keeper, h)
            ext = keeper.get_extension_params()
            params_policy = self._block_policy
            if params_policy[0] is not ext:  # new params (or the first block): look it up
                params_policy = (ext, self.get_policy_object(ext.health_params.policy))
                self._block_policy = params_policy
            policy = params_policy[1]
            ctx = BlockContext(keeper, policy, h)
            gas_by_step: dict[str, int] = {"begin_block": buffer.gas}  # the block's set-up too
            results = []
            registered = False  # a registration can change who has a PoC slot
            for i, msg in enumerate(msgs):
                if rejected:
                    known = rejected.get(i)
                    if known is not None:
                        results.append(known)  # charged as when it ran and was rejected
                        buffer.gas += known.gas_used
                        gas_by_step[known.kind] = gas_by_step.get(known.kind, 0) + known.gas_used
                        continue
                kind, handler = get_message_route(msg)
                # Its own scope: a rejected message leaves no write, event or touched mark.
                buffer.begin_nested()
                mark = ctx.get_message_mark()
                before = buffer.gas
                try:
                    handler(ctx, msg)
                except KeepersimError as exc:
                    buffer.discard_nested()
                    if strict:
                        raise BlockError(
                            f"block {h}, tx {i} ({kind}): {exc}", height=h, tx_index=i
                        ) from exc
                    gas = buffer.gas - before
                    gas_by_step[kind] = gas_by_step.get(kind, 0) + gas
                    failed = TxResult(i, kind, False, f"{type(exc).__name__}: {exc}", gas)
                    if not ctx.discard_message(mark):
                        rejected[i] = failed
                        buffer.discard()
                        return None
                    results.append(failed)
                else:
                    buffer.merge_nested()
                    gas = buffer.gas - before
                    gas_by_step[kind] = gas_by_step.get(kind, 0) + gas
                    results.append(TxResult(i, kind, True, "", gas))
                    registered = registered or kind in _REGISTRATION_KINDS
            end_block(ctx, gas_by_step)
            reset = (
                keeper.params_changed
                or keeper.hints.verdicts_reset
                or registered
                or not _RESET_EVENTS.isdisjoint(map(type, keeper.events))
            )
            extra = (
                None
                if meta is None
                else meta(
                    BlockResult(
                        h, b"", tuple(keeper.events), tuple(results), buffer.gas, gas_by_step
                    )
                )
            )
            with self._rw.write():
                app_hash = self._store.commit(buffer, h, extra)
                self._params = keeper.get_params()
                self._extension_params = keeper.get_extension_params()
                with self._index_lock:
                    self._index.process_commit(
                        keeper.hints.touched
                        if policy.verdict_reads_participants
                        else keeper.hints.verdict_touched,
                        reset,
                        keeper.hints.verdicts,
                    )
        except BaseException:
            buffer.discard()
            raise
        return BlockResult(
            h, app_hash, tuple(keeper.events), tuple(results), buffer.gas, gas_by_step
        )

    # queries (read the last committed block)
    def read(self) -> AbstractContextManager[Keeper]:
        """A read-only keeper over the last committed block, held consistent while in use."""
        return _CommittedRead(self)

    def get_params(self) -> ModuleParams:
        """A copy of the params in force, the chain's and the extension's (the chain's own copies
        are shared by its queries)."""
        with self.read() as k:
            return k.get_module_params()

    def get_participant(self, address: str) -> Participant | None:
        with self.read() as k:
            return k.get_participant(address)

    def get_inference(self, inference_id: str) -> Inference | None:
        with self.read() as k:
            return k.get_inference(inference_id)

    def get_policy_state(self, address: str) -> dict[str, object]:
        with self.read() as k:
            policy = self.get_policy_object(k.get_extension_params().health_params.policy)
            view = policy.get_state_view(PolicyReader(k, policy), address, self.height)
            return {"policy": policy.name, "address": address, **view}

    def get_selection_table(self, model: str = "") -> SelectionTable:
        """The selection table of the committed height (computed once per height and model)."""
        index = self._index
        table = index.tables.get(model)  # a plain dict read: the hot path takes no lock
        if table is not None:
            return table
        with self._index_lock:  # no read lock, keeper or policy when the memo answers alone
            table = index.get_memo_table(model, self.height)
        if table is not None:
            return table
        with self.read() as k, self._index_lock:
            table = index.tables.get(model)
            if table is None:
                table = self._compute_table(k, model)
                index.tables[model] = table
            return table

    def get_table_weights(self, model: str = "") -> tuple[SelectionTable, Mapping[str, int]]:
        """The selection table of the committed height and the weight each of its candidates
        entered the pipeline with (:class:`Candidate` ``weight``: the group weight,
        reputation-adjusted when the params say so), before gate, cap and weight factor. The
        mapping is shared: read it, do not change it."""
        table = self.get_selection_table(model)
        with self._index_lock:
            memo = self._index.models.get(model)
            if memo is None or memo.table is not table:
                raise RuntimeError(f"the selection table of model {model!r} changed meanwhile")
            if memo.weights is None:
                memo.weights = {c.address: c.weight for c in memo.candidates}
            return table, memo.weights

    def _compute_table(self, keeper: Keeper, model: str) -> SelectionTable:
        index = self._index
        height = self.height
        params = keeper.get_params()
        ext = keeper.get_extension_params()
        policy = self.get_policy_object(ext.health_params.policy)
        index.height = height  # the read lock holds the store at it
        rules = index.rules = self._rules.get(ext)
        if index.poc_heights is None:
            epoch = keeper.get_epoch(keeper.get_effective_epoch_index())
            start = -1 if epoch is None else epoch.poc_start_block_height
            index.poc_heights = (
                range(0) if start < 0 else get_poc_heights(start, params.epoch_params)
            )
        poc = height in index.poc_heights
        candidates = index.candidates.get((model, poc))
        if candidates is None:
            candidates = get_candidates(keeper, model, height)
            index.candidates[(model, poc)] = candidates
        reader = PolicyReader(keeper, policy)
        last = index.models.get(model)
        if last is not None and last.candidates is candidates:
            return index.process_memo(
                model, last, height, lambda address: policy.get_health(reader, address, height)
            )
        healths = [policy.get_health(reader, c.address, height) for c in candidates]
        index.dirty.setdefault(model, set()).clear()
        memo = ModelTable(candidates, healths)
        table = memo.state.compute_table(height=height, model=model, rules=rules)
        memo.table = table
        index.models[model] = memo
        return table

    def get_random_executor(self, model: str = "", request_id: str = "") -> Selection:
        """GetRandomExecutor: a weighted, deterministic draw among admitted candidates."""
        table = self.get_selection_table(model)
        seed = compute_selection_seed(self._chain_id, table.height, model, request_id)
        return Selection(
            compute_draw(table, seed),
            table.height,
            model,
            request_id,
            table.fallback,
            table.panic,
        )

    def select_executors(self, model: str, k: int, request_id: str = "") -> list[str]:
        """k distinct executors drawn by weight without replacement."""
        table = self.get_selection_table(model)
        seed = compute_selection_seed(self._chain_id, table.height, model, request_id)
        return compute_draws(table, seed, k)

    def get_meta(self, key: bytes) -> bytes | None:
        """An entry committed through ``deliver_block(..., meta=...)`` (None if absent)."""
        with self._rw.read():
            return self._store.get_meta(key)

    def iterate_meta(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """The committed meta entries whose keys start with ``prefix``."""
        with self._rw.read():
            return self._store.iterate_meta(prefix)

    def get_page(
        self,
        prefix: bytes,
        *,
        key: bytes = b"",
        offset: int = 0,
        limit: int | None = None,
        count_total: bool = False,
    ) -> Page:
        """One page of the committed entries under ``prefix`` (a collection of
        :mod:`keepersim.types.keys`), the way the chain's paginated queries read a prefix store:
        from ``prefix + key``, ``offset`` entries skipped, at most ``limit`` (None: all)."""
        end = prefix_end(prefix)
        values: list[bytes] = []
        next_key: bytes | None = None
        skipped = 0
        with self.read() as k:
            height = self.height
            for stored_key, raw in k.store.iterate(prefix + key, end):
                if skipped < offset:
                    skipped += 1
                    continue
                if len(values) == limit:
                    next_key = stored_key[len(prefix) :]
                    break
                values.append(raw)
            total = sum(1 for _ in k.store.iterate(prefix, end)) if count_total else 0
        return Page(height, tuple(values), next_key, total)

    def export_genesis(self) -> Genesis:
        with self.read() as k:
            return export_genesis(k, self.height)


class StoreNotEmptyError(KeepersimError):
    """:func:`open_chain` was asked for a fresh chain in a folder that already holds files."""

    def __init__(self, folder: Path) -> None:
        super().__init__(f"store folder {folder} is not empty")
        self.folder = folder


def open_chain(
    store: StoreKind,
    path: str | os.PathLike[str] | None,
    *,
    genesis: Genesis,
    policy_override: PolicyFactory | None = None,
    resume: bool = False,
    write_every: int = 1,
) -> Chain:
    """A fresh chain with ``genesis``: in memory (``path`` is not used), or on LevelDB in the
    folder ``path``, which must be missing or empty (else :class:`StoreNotEmptyError`) unless
    ``resume``: then the chain in it is opened as it stands (at its last write-back). The one
    way the simulator, replay and the server open a run's chain; a fresh folder whose opening
    fails is left as found. ``write_every``: see Chain."""
    if store == "memory":
        return Chain.open(
            memory=True, genesis=genesis, policy_override=policy_override, write_every=write_every
        )
    if store != "leveldb" or path is None:
        raise ValueError(f"open_chain: expected 'memory', or 'leveldb' with a path, got {store!r}")
    folder = Path(path)
    existed = folder.exists()
    if existed and any(folder.iterdir()):
        if not resume:
            raise StoreNotEmptyError(folder)
        return Chain.open(
            folder, genesis=genesis, policy_override=policy_override, write_every=write_every
        )
    try:
        return Chain.open(
            folder, genesis=genesis, policy_override=policy_override, write_every=write_every
        )
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        if existed:
            folder.mkdir(exist_ok=True)
        raise
