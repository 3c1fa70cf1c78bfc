"""Fixtures shared by the store tests: every backend-level test runs on both backends."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from keepersim.store import KVBackend, LevelDBBackend, MemoryBackend

BackendFactory = Callable[[], KVBackend]


@pytest.fixture(params=["leveldb", "memory"])
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendFactory]:
    """Factory of fresh backends of one kind (LevelDB in its own tmp folder each time)."""
    opened: list[KVBackend] = []

    def make() -> KVBackend:
        backend: KVBackend
        if request.param == "leveldb":
            backend = LevelDBBackend(tmp_path / f"db{len(opened)}")
        else:
            backend = MemoryBackend()
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        backend.close()


@pytest.fixture
def backend(make_backend: BackendFactory) -> KVBackend:
    """One fresh backend of each kind."""
    return make_backend()
