"""Commit point of the chain state: one atomic write batch per block, with its metadata."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from keepersim.store.apphash import (
    MODULUS,
    compute_app_hash,
    compute_state_sum,
)
from keepersim.store.buffer import RESERVED_PREFIX, BlockBuffer
from keepersim.store.cache import StateCache
from keepersim.store.errors import StoreError
from keepersim.store.kv import KVBackend, KVReader

META_PREFIX = b"\xffmeta/"
HEIGHT_KEY = META_PREFIX + b"height"
"""Last committed height, 8-byte big-endian."""
STATE_SUM_KEY = META_PREFIX + b"state_sum"
"""AdHash state sum of the non-reserved keys, 32-byte big-endian."""
APP_HASH_KEY = META_PREFIX + b"app_hash"
"""App hash of that state, stored so tools can read it without this module."""
RUN_META_PREFIX = META_PREFIX + b"run/"
"""Unhashed metadata a caller commits with a block (e.g. a resumable run's checkpoint)."""


class CommitStore:
    """Owns a backend behind the state cache (keepersim.store.cache); hands out one BlockBuffer
    per block; commits it together with metadata (height, state sum, app hash), so state and
    hash are never out of step, in memory or in the backend.

    Metadata lives under the reserved ``b"\\xff"`` keyspace and is not part of the hashed state.
    """

    __slots__ = ("backend", "_height", "_state_sum", "_app_hash", "_has_commit")

    def __init__(
        self, backend: KVBackend, *, streamed: Iterable[bytes] = (), write_every: int = 1
    ) -> None:
        """``streamed``, ``write_every``: the cache's (StateCache)."""
        self.backend = (
            backend
            if isinstance(backend, StateCache)
            else StateCache(backend, streamed=streamed, write_every=write_every)
        )
        backend = self.backend
        height = backend.get(HEIGHT_KEY)
        state_sum = backend.get(STATE_SUM_KEY)
        app_hash = backend.get(APP_HASH_KEY)
        if height is None and state_sum is None and app_hash is None:
            # Never committed here; state written by other means still gets a correct sum.
            self._has_commit = False
            self._height = 0
            self._state_sum = compute_state_sum(backend.iterate(None, RESERVED_PREFIX))
        else:
            if height is None or state_sum is None or app_hash is None:
                raise StoreError("store metadata is incomplete (height, state_sum, app_hash)")
            if len(height) != 8 or len(state_sum) != 32:
                raise StoreError("store metadata has a wrong length")
            self._has_commit = True
            self._height = int.from_bytes(height, "big")
            self._state_sum = int.from_bytes(state_sum, "big")
            if compute_app_hash(self._state_sum) != app_hash:
                raise StoreError("stored app hash does not match the stored state sum")
        self._app_hash = compute_app_hash(self._state_sum)

    def get_height(self) -> int:
        """Last committed height (0 if none)."""
        return self._height

    def get_app_hash(self) -> bytes:
        """App hash of the last committed state (hash of the empty state if none)."""
        return self._app_hash

    def get_state_sum(self) -> int:
        """AdHash state sum of the last committed state."""
        return self._state_sum

    def begin(self) -> BlockBuffer:
        """A new, empty buffer over the backend for the next block."""
        return BlockBuffer(self.backend)

    def commit(
        self, buffer: BlockBuffer, height: int, meta: Mapping[bytes, bytes | None] | None = None
    ) -> bytes:
        """Write the buffer's changes and the new metadata in one batch; return the app hash.

        ``meta``: extra entries under :data:`RUN_META_PREFIX` (None deletes one), written in
        the same batch and outside the hashed state, so they are exactly as durable as the block.

        The old term of each written key comes from the cache. The height must exceed the last
        committed one (any height >= 0 for the first commit). On success the buffer is emptied;
        if the write fails, nothing changes and the buffer keeps its writes.
        """
        if buffer.backend is not self.backend:
            raise ValueError("buffer belongs to a different backend")
        if height < 0 or (self._has_commit and height <= self._height):
            raise ValueError(f"height {height} must be above last committed {self._height}")
        if meta:
            for key in meta:
                if not key.startswith(RUN_META_PREFIX):
                    raise ValueError(f"meta key {key!r} must start with {RUN_META_PREFIX!r}")
        state_sum = self._state_sum
        app_hash = self._app_hash

        def get_meta(delta: int) -> dict[bytes, bytes | None]:
            nonlocal state_sum, app_hash
            state_sum = (self._state_sum + delta) % MODULUS
            # The same sum, the same hash: a block that changed no entry (most blocks of a
            # quiet chain) hashes nothing.
            app_hash = (
                self._app_hash if state_sum == self._state_sum else compute_app_hash(state_sum)
            )
            entries: dict[bytes, bytes | None] = {
                HEIGHT_KEY: height.to_bytes(8, "big"),
                STATE_SUM_KEY: state_sum.to_bytes(32, "big"),
                APP_HASH_KEY: app_hash,
            }
            if meta:
                entries.update(meta)  # None deletes
            return entries

        # The buffer's own pending writes (not a copy): the cache does not change them, and
        # the buffer is emptied right after.
        self.backend.commit_summed(
            buffer.peek_changes(), buffer.get_written(), buffer.get_memos(), get_meta
        )
        self._has_commit = True
        self._height = height
        self._state_sum = state_sum
        self._app_hash = app_hash
        buffer.discard()
        return app_hash

    def get_meta(self, key: bytes) -> bytes | None:
        """A metadata entry committed with ``commit(..., meta=...)`` (None if absent)."""
        return self.backend.get(key)

    def iterate_meta(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """The metadata entries whose keys start with ``prefix`` (under RUN_META_PREFIX)."""
        if not prefix.startswith(RUN_META_PREFIX):
            raise ValueError(f"meta prefix {prefix!r} must start with {RUN_META_PREFIX!r}")
        stop = (int.from_bytes(prefix, "big") + 1).to_bytes(len(prefix), "big")
        return list(self.backend.iterate(prefix, stop))

    def verify_app_hash(self) -> bool:
        """Recompute the state sum from every non-reserved key, in the cache and in the backend
        (after a write-back), and compare both with the tracked one."""
        self.backend.flush()
        in_memory = compute_state_sum(self.backend.iterate(None, RESERVED_PREFIX))
        stored = compute_state_sum(self.backend.backend.iterate(None, RESERVED_PREFIX))
        return (
            in_memory == stored == self._state_sum
            and compute_app_hash(self._state_sum) == self._app_hash
        )

    def flush(self) -> None:
        """Write back to the backend every commit the cache still holds (StateCache.flush)."""
        self.backend.flush()

    def get_committed_view(self) -> KVReader:
        """Snapshot of the last committed state, for queries while the next block is built."""
        return self.backend.snapshot()

    def close(self) -> None:
        """Close the backend."""
        self.backend.close()
