"""Key-value store layer: LevelDB/memory backends, per-block buffers, prefix views, app hash."""

from keepersim.store.apphash import (
    EMPTY_APP_HASH,
    compute_app_hash,
    compute_entry_term,
    compute_state_sum,
)
from keepersim.store.buffer import RESERVED_PREFIX, BlockBuffer, KVStore
from keepersim.store.committed import (
    APP_HASH_KEY,
    HEIGHT_KEY,
    META_PREFIX,
    STATE_SUM_KEY,
    CommitStore,
)
from keepersim.store.errors import StoreClosedError, StoreError, StoreLockedError
from keepersim.store.kv import KVBackend, KVReader, prefix_end
from keepersim.store.leveldb import LevelDBBackend, LevelDBSnapshot
from keepersim.store.memory import MemoryBackend, MemoryView
from keepersim.store.prefix import PrefixStore

__all__ = [
    "APP_HASH_KEY",
    "EMPTY_APP_HASH",
    "HEIGHT_KEY",
    "META_PREFIX",
    "RESERVED_PREFIX",
    "STATE_SUM_KEY",
    "BlockBuffer",
    "CommitStore",
    "KVBackend",
    "KVReader",
    "KVStore",
    "LevelDBBackend",
    "LevelDBSnapshot",
    "MemoryBackend",
    "MemoryView",
    "PrefixStore",
    "StoreClosedError",
    "StoreError",
    "StoreLockedError",
    "compute_app_hash",
    "compute_entry_term",
    "compute_state_sum",
    "prefix_end",
]
