"""The state's part of the acceleration layer: a write-back cache between the blocks and the
backend (docs/architecture.md, "The acceleration layer", lists the other parts).

A block reads and rewrites a small working set (participants, inferences in flight and their
timeouts, policy entries and wake-ups). Held here, that set is read from memory, decoded objects
included, each commit takes the old app-hash term of a key it overwrites from memory, and the
backend sees one write batch every ``write_every`` commits. The rules read and write plainly
through the block buffer; what the layer above keeps across blocks (the chain's verdict memo,
a policy's memo) is keepersim.keeper.acceleration's and chain.py's, carried here only as
opaque memos.

- **Resident keys** (every key whose first byte is not in ``streamed``) live in memory in full,
  loaded by one scan when the cache opens: a read, a scan (a policy's due wake-ups, the
  timeouts of a height) and "is it there?" never touch the backend. Absent means absent.
- **Streamed keys** (the inferences: they only grow) are cached as read or written, absent ones
  included, in two generations: when the young one reaches ``max_streamed`` entries, the old one
  is dropped (after a write-back, so nothing unwritten is lost) and the young one becomes old.
- **Decoded objects**: the block buffer hands each message it wrote back with the commit, so the
  next block takes it without decoding (``take_decoded``: the block then owns it, so a failed
  block leaves nothing changed behind; ``peek_decoded``: read only).
- **Memos**: opaque values handed from one block to the next the same way (given with a commit,
  taken by the next block; a failed block, a reopen or forget_derived leaves none). Their one
  user is keepersim.keeper.acceleration.policy_store (a policy's memo, e.g. a log index),
  which owns what they hold; the cache only carries them, so that they share the committed
  state's fate.
- **Write-back**: the default is every commit (the node prototype, tests, resumable runs).
  Every N commits (other simulate and replay runs: 64) batches the backend's writes; the app
  hash is still computed at every commit, and a crash loses at most the blocks since the last
  write-back: the backend's height is the last one written.

The cache is the committed state as the chain sees it; queries read it under the chain's read
lock. ``tests/store/test_store_cache.py`` proves it equal to the state as a plain dict.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from heapq import merge
from typing import Any, TypeVar

from keepersim.store.apphash import compute_entry_term
from keepersim.store.errors import StoreClosedError
from keepersim.store.keyindex import KeyIndex
from keepersim.store.kv import KVBackend, KVReader, check_batch

T = TypeVar("T")

_MISSING: Any = object()
DEFAULT_MAX_STREAMED = 200_000


class StateCache:
    """A KVBackend over another one (LevelDB or memory), holding the working set in memory."""

    # Tests turn this on: each handed-back object must encode to the bytes written for it (a
    # rule that changed a message after writing it would make the next block read another).
    verify_objects = False

    __slots__ = (
        "backend",
        "write_every",
        "_streamed",
        "_max_streamed",
        "_resident",
        "_resident_keys",
        "_young",
        "_old",
        "_terms",
        "_old_terms",
        "_decoded",
        "_memos",
        "_unwritten",
        "_fresh",
        "_commits",
        "_complete",
        "_closed",
        "__weakref__",
    )

    def __init__(
        self,
        backend: KVBackend,
        *,
        streamed: Iterable[bytes] = (),
        write_every: int = 1,
        max_streamed: int = DEFAULT_MAX_STREAMED,
    ) -> None:
        """``streamed``: one-byte key prefixes cached as used instead of held in full."""
        if write_every < 1:
            raise ValueError(f"write_every must be at least 1, got {write_every}")
        prefixes = list(streamed)
        for prefix in prefixes:
            if len(prefix) != 1 or prefix == b"\xff":
                raise ValueError(f"a streamed prefix is one byte below 0xff, got {prefix!r}")
        self.backend = backend
        self.write_every = write_every
        self._streamed = frozenset(prefix[0] for prefix in prefixes)
        self._max_streamed = max_streamed
        self._young: dict[bytes, bytes | None] = {}
        self._old: dict[bytes, bytes | None] = {}
        self._terms: dict[bytes, int] = {}
        self._old_terms: dict[bytes, int] = {}
        # key -> (decoded object, its stored bytes: their length is its read's gas)
        self._decoded: dict[bytes, tuple[object, bytes]] = {}
        self._memos: dict[object, object] = {}
        # key -> value (None: deleted) committed here but not yet written to the backend.
        self._unwritten: dict[bytes, bytes | None] = {}
        # Resident keys put since the last write-back that the backend does not hold: deleted
        # before the next one, they leave the batch (a put and a delete the backend would
        # only write to drop: a timeout whose expiration comes before the next write-back).
        self._fresh: set[bytes] = set()
        self._commits = 0
        self._closed = False
        # The resident entries: a dict, and their keys in order beside it for the range scans,
        # one sorted list per collection (keyindex.py).
        self._resident: dict[bytes, bytes] = {}
        for start, stop in _get_resident_ranges(self._streamed):
            self._resident.update(backend.iterate(start, stop))
        self._resident_keys = KeyIndex(self._resident)
        # Every streamed key is in memory while the backend had none at open and nothing was
        # evicted: a key not in memory is then known to be absent, without a read.
        self._complete = not any(
            next(iter(backend.iterate(bytes((p,)), bytes((p + 1,)))), None) for p in self._streamed
        )
        _LIVE.add(self)

    # -- reads: the committed state ------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        """The committed value of ``key`` (None: absent), from memory when known."""
        if not key or key[0] not in self._streamed:
            value: bytes | None = self._resident.get(key)
            return value
        value = self._young.get(key, _MISSING)
        if value is _MISSING:
            value = self._old.get(key, _MISSING)
            if value is _MISSING:
                value = None if self._complete else self.backend.get(key)
            self._young[key] = value
        return value

    def iterate(
        self, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries in ``[start, stop)`` as of this call, resident ones from memory."""
        self._check_open()
        entries = get_resident_range(self._resident, self._resident_keys, start, stop, reverse)
        if not self._streamed or not self._may_stream(start, stop):
            return iter(entries)
        streamed = self._iterate_streamed(start, stop, reverse)
        if not entries:
            return streamed
        return merge(entries, streamed, key=lambda entry: entry[0], reverse=reverse)

    def _may_stream(self, start: bytes | None, stop: bytes | None) -> bool:
        lo = 0 if not start else start[0]
        hi = 255 if stop is None else stop[0]
        if lo == hi:  # a range inside one prefix (most scans: one collection's)
            return lo in self._streamed
        return any(lo <= prefix <= hi for prefix in self._streamed)

    def _iterate_streamed(
        self, start: bytes | None, stop: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """The streamed entries in range: the backend's, overlaid by what is not written yet."""
        return _iterate_streamed(
            self.backend, self._unwritten, self._streamed, start, stop, reverse
        )

    def snapshot(self) -> KVReader:
        """A consistent view of the committed state now: a copy of what is held in memory over
        the backend's own snapshot."""
        self._check_open()
        return CacheSnapshot(self)

    def get_term(self, key: bytes) -> int:
        """The app-hash term of ``key``'s committed entry (0: absent), from memory when known."""
        term = self._terms.get(key)
        if term is None:
            term = self._old_terms.get(key)
            if term is None:
                value = self.get(key)
                term = 0 if value is None else compute_entry_term(key, value)
            self._terms[key] = term
        return term

    def compute_sum_change(
        self, changes: Mapping[bytes, bytes | None]
    ) -> tuple[int, dict[bytes, int]]:
        """What a commit of ``changes`` (key -> new value, None: deleted) adds to the state sum
        (not reduced), and the new entries' terms; each old term from memory when known."""
        self._check_open()
        streamed = self._streamed
        resident_get = self._resident.get
        young_get = self._young.get
        terms_get = self._terms.get
        term = compute_entry_term
        delta = 0
        new_terms: dict[bytes, int] = {}
        for key, value in changes.items():
            if key and key[0] in streamed:
                old = young_get(key, _MISSING)
                if old is _MISSING:
                    old = self.get(key)
            else:
                old = resident_get(key)
            if old is not None:
                if old == value:
                    continue
                known = terms_get(key)
                delta -= self.get_term(key) if known is None else known
            if value is not None:
                new = new_terms[key] = term(key, value)
                delta += new
        return delta, new_terms

    # -- decoded objects and memos, for the block being built (never for queries) --------------
    def peek_decoded(
        self, key: bytes, decode: Callable[[bytes], T]
    ) -> tuple[T | None, bytes | None]:
        """The committed entry of ``key`` decoded, to read only, and its stored bytes (None,
        None: absent)."""
        entry = self._decoded.get(key)
        if entry is None:
            raw = self.get(key)
            if raw is None:
                return None, None
            entry = self._decoded[key] = (decode(raw), raw)
        return entry  # type: ignore[return-value]

    def take_decoded(
        self, key: bytes, decode: Callable[[bytes], T]
    ) -> tuple[T | None, bytes | None]:
        """The committed entry of ``key`` decoded, for the caller to change and write (the
        cache forgets it until a commit hands a written object back), and its stored bytes
        (None, None: absent)."""
        entry = self._decoded.pop(key, None)
        if entry is not None:
            return entry  # type: ignore[return-value]
        raw = self.get(key)
        return (None, None) if raw is None else (decode(raw), raw)

    def take_memo(self, name: object) -> object | None:
        """The memo the last commit handed on under ``name`` (taken: a failed block leaves none)."""
        return self._memos.pop(name, None)

    # -- writes ------------------------------------------------------------------------------
    def write_batch(self, puts: Mapping[bytes, bytes], deletes: Iterable[bytes]) -> None:
        """Apply a batch as one commit (its terms computed when next asked): see commit_batch."""
        dels = list(deletes)
        check_batch(puts, dels)
        for key in [*puts, *dels]:
            self._terms.pop(key, None)
            self._old_terms.pop(key, None)
        self.commit_batch(puts, dels, {}, {}, {})

    def commit_batch(
        self,
        puts: Mapping[bytes, bytes],
        deletes: Iterable[bytes],
        terms: Mapping[bytes, int],
        written: Mapping[bytes, tuple[object, bytes]],
        memos: Mapping[object, object],
    ) -> None:
        """Apply one commit: ``puts`` then ``deletes`` (see commit_changes)."""
        changes: dict[bytes, bytes | None] = dict(puts)
        changes.update(dict.fromkeys(deletes))
        self.commit_changes(changes, terms, written, memos)

    def commit_changes(
        self,
        changes: Mapping[bytes, bytes | None],
        terms: Mapping[bytes, int],
        written: Mapping[bytes, tuple[object, bytes]],
        memos: Mapping[object, object],
    ) -> None:
        """Apply one commit: ``changes`` (key -> new value, None: deleted), with the new
        entries' app-hash terms (those not given are computed when next asked), the objects
        written with the bytes each was written as (kept for the next block where those very
        bytes are the key's new value) and the memos handed to the next block. Written back
        every ``write_every`` commits. A put without a term in ``terms`` must leave its value
        as it was, or be metadata. Keys and values are bytes (the block buffer checked them)."""
        self._check_open()
        if self.verify_objects:
            _verify_objects(changes, written)
        if (self._commits + 1) % self.write_every == 0:
            # Written first: if the backend refuses the batch, memory has not moved either.
            batch = dict(self._unwritten)
            batch.update(changes)
            self._write_back(batch)
            unwritten = None
        else:
            unwritten = self._unwritten
        streamed = self._streamed
        resident = self._resident
        add_key = self._resident_keys.add
        remove_key = self._resident_keys.remove
        young = self._young
        terms_pop = self._terms.pop
        fresh = self._fresh
        objects = self._decoded
        forget_object = objects.pop
        written_get = written.get
        unheld: list[bytes] = []  # fresh keys deleted: they never reach the backend
        # One pass over the written keys; a deleted key's term goes with it (an absent key's
        # term is never read: kept, it would only pile up).
        for key, value in changes.items():
            entry = written_get(key)
            if entry is not None and entry[1] is value:
                objects[key] = entry
            else:
                forget_object(key, None)
            if key and key[0] in streamed:
                young[key] = value
                if value is None:
                    terms_pop(key, None)
            elif value is None:
                if resident.pop(key, None) is not None:
                    remove_key(key)
                terms_pop(key, None)
                if key in fresh:
                    unheld.append(key)
            else:
                if key not in resident:
                    add_key(key)
                    # Absent from the state and untouched since the last write-back: absent
                    # from the backend too.
                    if unwritten is not None and key not in unwritten:
                        fresh.add(key)
                resident[key] = value
        if unwritten is not None:
            unwritten.update(changes)
            for key in unheld:
                del unwritten[key]
                fresh.discard(key)
        # A put without a new term left its value as it was (or is metadata, never hashed).
        self._terms.update(terms)
        self._memos = dict(memos)
        self._commits += 1
        if unwritten is None and len(young) >= self._max_streamed:
            self._evict()

    def commit_summed(
        self,
        changes: Mapping[bytes, bytes | None],
        written: Mapping[bytes, tuple[object, bytes]],
        memos: Mapping[object, object],
        get_meta: Callable[[int], Mapping[bytes, bytes | None]],
    ) -> None:
        """One commit of ``changes`` (not changed here), summed and applied: ``get_meta`` is
        given what the changes add to the state sum (compute_sum_change's) and returns the
        unhashed metadata entries (reserved keys, None: deleted) committed with them.

        A commit that writes back computes the sum first (commit_changes: a refused batch
        leaves memory as it was). The others cannot fail once their old values are in memory,
        so they take each key's old value and term once, in the pass that applies it."""
        self._check_open()
        if (self._commits + 1) % self.write_every == 0:
            delta, terms = self.compute_sum_change(changes) if changes else (0, {})
            batch = dict(changes)
            batch.update(get_meta(delta))
            self.commit_changes(batch, terms, written, memos)
            return
        if self.verify_objects:
            _verify_objects(changes, written)
        streamed = self._streamed
        young = self._young
        if not self._complete:
            # Read the streamed keys memory lacks now: the pass below then reads memory only.
            old_gen = self._old
            get = self.get
            for key in changes:
                if key and key[0] in streamed and key not in young and key not in old_gen:
                    get(key)
        resident = self._resident
        resident_get = resident.get
        add_key = self._resident_keys.add
        remove_key = self._resident_keys.remove
        young_get = young.get
        terms = self._terms
        terms_get = terms.get
        terms_pop = terms.pop
        get_term = self.get_term
        term = compute_entry_term
        unwritten = self._unwritten
        fresh = self._fresh
        objects = self._decoded
        forget_object = objects.pop
        written_get = written.get
        unheld: list[bytes] = []  # fresh keys deleted: they never reach the backend
        delta = 0
        # Each key: its old term taken (before its new value is in memory: get_term reads
        # it), then its new value applied, as commit_changes' pass does.
        for key, value in changes.items():
            entry = written_get(key)
            if entry is not None and entry[1] is value:
                objects[key] = entry
            else:
                forget_object(key, None)
            if key and key[0] in streamed:
                old = young_get(key, _MISSING)
                if old is _MISSING:
                    old = self.get(key)  # from the old generation (read above)
                if old is not None:
                    if old == value:
                        young[key] = value
                        continue
                    known = terms_get(key)
                    delta -= get_term(key) if known is None else known
                young[key] = value
                if value is None:
                    terms_pop(key, None)
                else:
                    new = terms[key] = term(key, value)
                    delta += new
            elif value is None:
                old = resident_get(key)
                if old is not None:
                    known = terms_get(key)
                    delta -= get_term(key) if known is None else known
                    del resident[key]
                    remove_key(key)
                terms_pop(key, None)
                if key in fresh:
                    unheld.append(key)
            else:
                old = resident_get(key)
                if old is None:
                    add_key(key)
                    # Absent from the state and untouched since the last write-back: absent
                    # from the backend too.
                    if key not in unwritten:
                        fresh.add(key)
                    new = terms[key] = term(key, value)
                    delta += new
                elif old != value:
                    known = terms_get(key)
                    delta -= get_term(key) if known is None else known
                    new = terms[key] = term(key, value)
                    delta += new
                resident[key] = value
        unwritten.update(changes)
        meta = get_meta(delta)
        for key, value in meta.items():  # reserved keys: resident, never hashed
            forget_object(key, None)
            if value is None:
                if resident.pop(key, None) is not None:
                    remove_key(key)
                if key in fresh:
                    unheld.append(key)
            else:
                if key not in resident:
                    add_key(key)
                    if key not in unwritten:
                        fresh.add(key)
                resident[key] = value
        unwritten.update(meta)
        for key in unheld:
            del unwritten[key]
            fresh.discard(key)
        self._memos = dict(memos)
        self._commits += 1

    def flush(self) -> None:
        """Write everything committed since the last write-back to the backend, in one batch."""
        if self._unwritten:
            self._write_back(self._unwritten)
            if len(self._young) >= self._max_streamed:
                self._evict()

    def _write_back(self, batch: dict[bytes, bytes | None]) -> None:
        puts = {key: value for key, value in batch.items() if value is not None}
        deletes = [key for key, value in batch.items() if value is None]
        self.backend.write_batch(puts, deletes)
        self._unwritten = {}
        self._fresh = set()

    def _evict(self) -> None:
        """Drop the old generation of streamed entries (all written back) and age the young."""
        self._complete = False
        self._old, self._young = self._young, {}
        keep = self._old
        streamed = self._streamed
        self._old_terms = {
            k: t for k, t in self._terms.items() if k and k[0] in streamed and k in keep
        }
        self._terms = {k: t for k, t in self._terms.items() if not k or k[0] not in streamed}
        self._decoded = {k: o for k, o in self._decoded.items() if not k or k[0] not in streamed}

    def forget_derived(self) -> None:
        """Forget the decoded objects, memos and terms (the state stays): as after a reopen."""
        self._decoded = {}
        self._memos = {}
        self._terms = {}
        self._old_terms = {}

    def close(self) -> None:
        """Write back what is left, then close the backend (later reads raise
        StoreClosedError, as the backend's do). Idempotent."""
        if not self._closed:
            self._closed = True
            try:
                self.flush()
            finally:
                self.backend.close()
                # Every read now reaches the closed backend, which raises.
                self._resident = {}
                self._resident_keys = KeyIndex()
                self._streamed = frozenset(range(256))
                self._young, self._old = {}, {}
                self._complete = False

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("the store is closed")


_LIVE: weakref.WeakSet[StateCache] = weakref.WeakSet()


def _verify_objects(
    changes: Mapping[bytes, bytes | None], written: Mapping[bytes, tuple[object, bytes]]
) -> None:
    """Each handed-back object must encode to the bytes written for it (StateCache.verify_objects)."""
    for key, (obj, raw) in written.items():
        if raw is changes.get(key) and obj.SerializeToString() != raw:  # type: ignore[attr-defined]
            raise AssertionError(f"the object handed back for {key!r} was changed")


def forget_all_derived() -> None:
    """Every live cache forgets what it derived (tests: a rule must decide the same without)."""
    for cache in list(_LIVE):
        cache.forget_derived()


def _get_resident_ranges(streamed: frozenset[int]) -> list[tuple[bytes | None, bytes | None]]:
    """The key ranges outside the streamed one-byte prefixes, in order."""
    ranges: list[tuple[bytes | None, bytes | None]] = []
    start: bytes | None = None
    for prefix in sorted(streamed):
        if start is None or start < bytes((prefix,)):
            ranges.append((start, bytes((prefix,))))
        start = bytes((prefix + 1,))
    ranges.append((start, None))
    return ranges


class CacheSnapshot:
    """The committed state at one commit, unchanged by later ones (StateCache.snapshot)."""

    __slots__ = ("_streamed", "_resident", "_resident_keys", "_overlay", "_base")

    def __init__(self, cache: StateCache) -> None:
        self._streamed = cache._streamed
        self._resident = cache._resident.copy()
        self._resident_keys = cache._resident_keys.copy()
        streamed = self._streamed
        self._overlay = {k: v for k, v in cache._unwritten.items() if k and k[0] in streamed}
        self._base = cache.backend.snapshot()

    def get(self, key: bytes) -> bytes | None:
        if not key or key[0] not in self._streamed:
            return self._resident.get(key)
        value = self._overlay.get(key, _MISSING)
        return self._base.get(key) if value is _MISSING else value

    def iterate(
        self, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        entries = get_resident_range(self._resident, self._resident_keys, start, stop, reverse)
        streamed = _iterate_streamed(
            self._base, self._overlay, self._streamed, start, stop, reverse
        )
        return merge(entries, streamed, key=_key, reverse=reverse)


def get_resident_range(
    resident: Mapping[bytes, bytes],
    keys: KeyIndex,
    start: bytes | None,
    stop: bytes | None,
    reverse: bool,
) -> list[tuple[bytes, bytes]]:
    """The entries of ``[start, stop)`` in key order (reversed if asked). Found by bisection
    of the range's collection: an empty range, as most of a block's queue lookups are, costs
    two bisections."""
    return [(key, resident[key]) for key in keys.get_range(start, stop, reverse)]


def _iterate_streamed(
    base: KVReader,
    unwritten: Mapping[bytes, bytes | None],
    streamed: frozenset[int],
    start: bytes | None,
    stop: bytes | None,
    reverse: bool,
) -> Iterator[tuple[bytes, bytes]]:
    """The streamed entries of ``[start, stop)``: ``base``'s, overlaid by ``unwritten``."""
    overlay = sorted(
        (key, value)
        for key, value in unwritten.items()
        if key
        and key[0] in streamed
        and (start is None or key >= start)
        and (stop is None or key < stop)
    )
    if reverse:
        overlay.reverse()
    entries = (
        entry
        for entry in base.iterate(start, stop, reverse)
        if entry[0] and entry[0][0] in streamed
    )
    return _overlay(entries, overlay, reverse)


def _key(entry: tuple[bytes, bytes]) -> bytes:
    return entry[0]


def _overlay(
    base: Iterator[tuple[bytes, bytes]],
    overlay: list[tuple[bytes, bytes | None]],
    reverse: bool,
) -> Iterator[tuple[bytes, bytes]]:
    """``base`` in key order with ``overlay``'s entries replacing (None: hiding) its own."""
    if not overlay:
        yield from base
        return
    replaced = {key for key, _ in overlay}
    kept = (entry for entry in base if entry[0] not in replaced)
    added = [(key, value) for key, value in overlay if value is not None]
    yield from merge(kept, added, key=lambda entry: entry[0], reverse=reverse)
