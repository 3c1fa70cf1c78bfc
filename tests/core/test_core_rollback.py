"""Rollback: an exception in the middle of a block leaves the store exactly at the last commit,
and the next block then works (it replays the same height)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import pytest
from core_helpers import MODEL, Driver

from keepersim.chain import Chain
from keepersim.keeper.context import BlockContext
from keepersim.keeper.inferences import process_inference_expiry
from keepersim.keeper.policies.gonka import GonkaBreaker
from keepersim.module import abci
from keepersim.store.buffer import RESERVED_PREFIX
from keepersim.store.leveldb import LevelDBBackend
from keepersim.types.events import InferenceExpired
from keepersim.types.messages import EXPIRED, STARTED, MsgStartInference
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis


class Boom(RuntimeError):
    pass


def snapshot(chain: Chain) -> tuple[int, bytes, dict[bytes, bytes]]:
    with chain.read() as k:
        state = dict(k.store.iterate(None, RESERVED_PREFIX))
    return chain.height, chain.app_hash, state


def assert_at_last_commit(chain: Chain, before: tuple[int, bytes, dict[bytes, bytes]]) -> None:
    assert snapshot(chain) == before
    assert chain._store.verify_app_hash()


@pytest.fixture
def primed(driver: Driver) -> Driver:
    """p0 has 3 completions and 4 inferences that expire in block 8 (an exclusion is due)."""
    driver.success("p0", 2, 3)
    driver.miss("p0", 8, 4)
    driver.run_to(7)
    return driver


def test_failing_end_block_step_after_expiry_wrote(
    primed: Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = primed.chain
    wrote: list[int] = []

    def boom(ctx: BlockContext) -> None:
        stats = ctx.keeper.get_participant("p0").current_epoch_stats  # type: ignore[union-attr]
        wrote.append(stats.missed_requests)  # the expiry step did write into the block
        raise Boom("end block step failed")

    before = snapshot(chain)
    stats_before = chain.get_participant("p0").current_epoch_stats  # type: ignore[union-attr]
    monkeypatch.setattr(abci, "END_BLOCK_STEPS", (process_inference_expiry, boom))
    with pytest.raises(Boom):
        chain.deliver_block([MsgStartInference(inference_id="new", assigned_to="p1", model=MODEL)])
    assert wrote == [4]
    assert_at_last_commit(chain, before)
    assert chain.get_participant("p0").current_epoch_stats == stats_before  # type: ignore[union-attr]
    assert stats_before.missed_requests == 0
    assert chain.get_inference("new") is None
    with chain.read() as k:
        due = [inference_id for _, inference_id in k.get_timeouts_due(8)]
    assert len(due) == 4
    assert all(chain.get_inference(i).status == STARTED for i in due)  # type: ignore[union-attr]
    assert chain.get_policy_state("p0")["state"] == "healthy"
    monkeypatch.undo()
    # The next block is height 8 again, and does what block 8 has to do.
    result = chain.deliver_block(
        [MsgStartInference(inference_id="new", assigned_to="p1", model=MODEL)]
    )
    assert result.height == 8 and not result.get_failed()
    assert sum(isinstance(e, InferenceExpired) for e in result.events) == 4
    assert chain.get_policy_state("p0")["state"] == "excluded"
    assert chain.get_participant("p0").current_epoch_stats.missed_requests == 4  # type: ignore[union-attr]
    assert chain._store.verify_app_hash()


def test_failing_policy_hook_discards_the_block_even_when_not_strict(
    primed: Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = primed.chain
    before = snapshot(chain)

    def boom(*args: object) -> None:
        raise Boom("policy failed after the outcome was counted")

    monkeypatch.setattr(GonkaBreaker, "process_outcome", boom)
    with pytest.raises(Boom):
        chain.deliver_block([])
    assert_at_last_commit(chain, before)
    with chain.read() as k:
        due = [inference_id for _, inference_id in k.get_timeouts_due(8)]
    assert [chain.get_inference(i).status for i in due] == [STARTED] * 4  # type: ignore[union-attr]
    monkeypatch.undo()
    assert chain.deliver_block([]).height == 8
    assert [chain.get_inference(i).status for i in due] == [EXPIRED] * 4  # type: ignore[union-attr]


class FailingWrites:
    """LevelDB whose next ``fail`` write batches raise (an I/O error at commit)."""

    def __init__(self, inner: LevelDBBackend) -> None:
        self.inner = inner
        self.fail = 0

    def get(self, key: bytes) -> bytes | None:
        return self.inner.get(key)

    def iterate(self, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False):  # type: ignore[no-untyped-def]
        return self.inner.iterate(start, stop, reverse)

    def write_batch(self, puts: Mapping[bytes, bytes], deletes: Iterable[bytes]) -> None:
        if self.fail:
            self.fail -= 1
            raise OSError("disk full")
        self.inner.write_batch(puts, deletes)

    def snapshot(self):  # type: ignore[no-untyped-def]
        return self.inner.snapshot()

    def close(self) -> None:
        self.inner.close()


def test_failing_store_write_at_commit(
    tmp_path: object,
    make_genesis: Callable[..., Genesis],
    breaker_params: ModuleParams,
) -> None:
    backend = FailingWrites(LevelDBBackend(tmp_path / "db"))  # type: ignore[operator]
    with Chain(backend) as chain:
        chain.init_genesis(make_genesis(params=breaker_params))
        d = Driver(chain)
        d.success("p0", 2, 3)
        d.miss("p0", 8, 4)
        d.run_to(7)
        before = snapshot(chain)
        backend.fail = 1
        block = [MsgStartInference(inference_id="x", assigned_to="p1", model=MODEL)]
        with pytest.raises(OSError, match="disk full"):
            chain.deliver_block(block)
        assert_at_last_commit(chain, before)
        assert chain.get_inference("x") is None
        # Not a duplicate start: nothing of the failed block leaked into the next one.
        result = chain.deliver_block(block)
        assert result.height == 8 and not result.get_failed()
        assert chain.get_policy_state("p0")["state"] == "excluded"
        assert chain._store.verify_app_hash()
    # And the committed state is what a reopened store sees.
    with Chain.open(tmp_path / "db") as reopened:  # type: ignore[operator]
        assert (reopened.height, reopened.app_hash) == (8, result.app_hash)
        assert reopened._store.verify_app_hash()
