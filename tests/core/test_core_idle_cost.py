"""An idle block costs the same store work at 150 and at 2,000 participants (structural: the
keys the chain reads, iterates over and writes are counted through a wrapper backend)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from core_helpers import CountingBackend, Driver

from keepersim.chain import Chain
from keepersim.store.leveldb import LevelDBBackend
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis


def idle_block_counts(
    path: Path, n: int, make_genesis: Callable[..., Genesis], params: ModuleParams
) -> list[tuple[int, int, int, int]]:
    backend = CountingBackend(LevelDBBackend(path))
    with Chain(backend) as chain:
        chain.init_genesis(make_genesis(n, params=params))
        d = Driver(chain)
        # Some live state in both: an exclusion with its queued wake-up, inferences in flight.
        d.success("p0", 2, 3)
        d.miss("p0", 8, 4)
        d.miss("p1", 30, 2)
        d.run_to(10)
        assert chain.get_policy_state("p0")["state"] == "excluded"
        counts = []
        for _ in range(3):
            backend.reset()
            result = chain.deliver_block([])
            assert result.events == ()
            counts.append(backend.counts())
        return counts


def test_idle_block_store_work_is_independent_of_participant_count(
    tmp_path: Path, make_genesis: Callable[..., Genesis], breaker_params: ModuleParams
) -> None:
    small = idle_block_counts(tmp_path / "small", 150, make_genesis, breaker_params)
    large = idle_block_counts(tmp_path / "large", 2000, make_genesis, breaker_params)
    assert small == large
    gets, iterations, iterated, written = small[0]
    assert gets < 20 and iterations < 10 and iterated < 10 and written <= 3
