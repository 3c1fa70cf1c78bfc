"""Deterministic app hash over the committed state, kept up to date in O(writes) per block.

The state is hashed as an additive multiset hash (AdHash): every entry (k, v) maps to
``term = int(blake2b(len(k).to_bytes(4, 'big') + k + v, digest_size=32))`` and the state sum is
the sum of all terms mod 2**256. A commit subtracts the old term of each written or deleted key
(if it existed) and adds the new term, so it never rescans the state. The length prefix keeps
``(k, v)`` pairs with the same concatenation apart.

Because addition is commutative, the sum depends only on the set of entries, not on the order
in which they were written: an export and re-import of identical state gives an identical hash,
and two write orders that reach the same state agree.

AdHash with a 256-bit modulus is fine for detecting divergence between simulator runs; it is
not collision resistant against an adversary choosing entries (generalized birthday attacks
apply), so it must not be used where someone may craft state to forge a hash.

``app_hash = sha256(b"keepersim/apphash/v1" + state_sum.to_bytes(32, "big"))``.
"""

from __future__ import annotations

from collections.abc import Iterable
from hashlib import blake2b, sha256
from struct import Struct

MODULUS = 1 << 256
APP_HASH_DOMAIN = b"keepersim/apphash/v1"


# Copying a pre-configured hasher is cheaper than the keyword-parsing constructor, and this
# runs once per written key at every commit; three updates cost less than concatenating the
# three parts first (two copies of the value).
_BLAKE2B_256 = blake2b(digest_size=32)
_pack_len = Struct(">I").pack


def compute_entry_term(key: bytes, value: bytes) -> int:
    """The entry's summand in the state sum: blake2b-256 of len(key) (4 bytes, big-endian),
    key and value."""
    h = _BLAKE2B_256.copy()
    h.update(_pack_len(len(key)))
    h.update(key)
    h.update(value)
    return int.from_bytes(h.digest(), "big")


def compute_app_hash(state_sum: int) -> bytes:
    """32-byte app hash of a state sum."""
    return sha256(APP_HASH_DOMAIN + (state_sum % MODULUS).to_bytes(32, "big")).digest()


def compute_state_sum(entries: Iterable[tuple[bytes, bytes]]) -> int:
    """Full recomputation of the state sum (verification and tests)."""
    total = 0
    term = compute_entry_term
    for key, value in entries:
        total += term(key, value)
    return total % MODULUS


EMPTY_APP_HASH = compute_app_hash(0)
"""App hash of the empty state."""
