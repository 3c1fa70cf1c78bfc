"""The Cosmos SDK's KV gas schedule, applied to the store accesses of a block's keeper.

Source: ``KVGasConfig()`` in ``store/types/gas.go`` and the charges of ``store/gaskv/store.go``
of ``cosmossdk.io/store`` v1.1.x (cosmos/cosmos-sdk, the SDK v0.50 line), the store gonka builds
with: kaitakuai/gonka ``inference-chain/go.mod`` (the stored version, commit 93138310, after
v0.2.14) requires ``cosmossdk.io/store v1.1.2``, replaced by
``github.com/gonka-ai/cosmos-sdk/store v1.1.2-ps1``, with cosmos-sdk v0.50.14 replaced by
``github.com/gonka-ai/cosmos-sdk v0.53.3-ps19`` (gonka-ai/gonka 009fa8a1, Aug 2025: store
v1.1.0); the fork's changed files (iavl, rootmulti, pruning, snapshots) leave ``types/gas.go``
and ``gaskv/`` as upstream has them. The SDK wraps the KVStore a keeper takes from its context
in ``gaskv.Store``, so every keeper access is charged, whether an IAVL or inter-block cache
serves it or not:

- ``Get``: ``ReadCostFlat + ReadCostPerByte * (len(key) + len(value))`` (value absent: 0 bytes);
- ``Set``: ``WriteCostFlat + WriteCostPerByte * (len(key) + len(value))``;
- ``Has``: ``HasCost``; ``Delete``: ``DeleteCost``;
- an iterator: ``consumeSeekGas`` when it is made and at every ``Next``: ``IterNextCostFlat``,
  plus ``ReadCostPerByte * (len(key) + len(value))`` of the entry it stands on if valid. A Go
  loop ``for it := ...; it.Valid(); it.Next()`` over n entries is thus charged
  ``IterNextCostFlat * (n + 1)`` plus the bytes of every entry, the first one's twice; one that
  stops after entry j (no Next on it) is not charged entry j's bytes a second time.

keepersim's keys and values are its own (docs/metrics.md, "Gas"): the schedule is the chain's,
the bytes are keepersim's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, Protocol

# KVGasConfig() (cosmossdk.io/store v1.1.x store/types/gas.go).
HAS_COST: Final = 1000
DELETE_COST: Final = 1000
READ_COST_FLAT: Final = 1000
READ_COST_PER_BYTE: Final = 3
WRITE_COST_FLAT: Final = 2000
WRITE_COST_PER_BYTE: Final = 30
ITER_NEXT_COST_FLAT: Final = 30


def compute_read_gas(key: bytes, value: bytes | None) -> int:
    """Gas of a ``Get`` of ``key`` that found ``value`` (None: absent)."""
    return READ_COST_FLAT + READ_COST_PER_BYTE * (len(key) + (0 if value is None else len(value)))


def compute_write_gas(key: bytes, value: bytes) -> int:
    """Gas of a ``Set``."""
    return WRITE_COST_FLAT + WRITE_COST_PER_BYTE * (len(key) + len(value))


def compute_iteration_gas(entries: list[tuple[bytes, bytes]], consumed_all: bool = True) -> int:
    """Gas of an iterator over ``entries`` (in order), read to the end (``consumed_all``), or
    left after its last entry was read (no ``Next`` on it)."""
    if not entries:
        return ITER_NEXT_COST_FLAT
    per_byte = [READ_COST_PER_BYTE * (len(k) + len(v)) for k, v in entries]
    gas = ITER_NEXT_COST_FLAT + per_byte[0]  # made: it stands on the first entry
    nexts = per_byte if consumed_all else per_byte[:-1]
    return gas + sum(ITER_NEXT_COST_FLAT + b for b in nexts)


class GasMeter:
    """A plain meter, one charge per call as gaskv makes them (the reference the block
    buffer's inlined counter is tested against)."""

    __slots__ = ("consumed",)

    def __init__(self) -> None:
        self.consumed = 0

    def process_get(self, key: bytes, value: bytes | None) -> None:
        self.consumed += compute_read_gas(key, value)

    def process_set(self, key: bytes, value: bytes) -> None:
        self.consumed += compute_write_gas(key, value)

    def process_has(self) -> None:
        self.consumed += HAS_COST

    def process_delete(self) -> None:
        self.consumed += DELETE_COST

    def process_iteration(self, entries: list[tuple[bytes, bytes]], consumed_all: bool) -> None:
        self.consumed += compute_iteration_gas(entries, consumed_all)


class GasCounter(Protocol):
    """What holds a block's gas so far: one integer (the block buffer's ``gas``)."""

    gas: int


def iterate_metered(
    it: Iterator[tuple[bytes, bytes]], counter: GasCounter
) -> Iterator[tuple[bytes, bytes]]:
    """``it``, charging ``counter`` as gaskv's iterator does (see the module docstring): the
    seek now (the first entry read ahead), each entry's bytes again when the caller moves
    past it."""
    entry = next(it, None)
    if entry is None:
        counter.gas += ITER_NEXT_COST_FLAT
        return iter(())
    counter.gas += ITER_NEXT_COST_FLAT + READ_COST_PER_BYTE * (len(entry[0]) + len(entry[1]))
    return _iterate_rest(entry, it, counter)


def _iterate_rest(
    entry: tuple[bytes, bytes], it: Iterator[tuple[bytes, bytes]], counter: GasCounter
) -> Iterator[tuple[bytes, bytes]]:
    per_byte = READ_COST_PER_BYTE
    flat = ITER_NEXT_COST_FLAT
    yield entry
    for following in it:
        counter.gas += flat + per_byte * (len(entry[0]) + len(entry[1]))
        entry = following
        yield entry
    counter.gas += flat + per_byte * (len(entry[0]) + len(entry[1]))
