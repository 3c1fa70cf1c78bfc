"""Per-message isolation: a rejected message leaves no write, event, touched mark or policy work.

A handler is swapped in (``_HANDLERS``) that writes, emits and touches before it raises; the block
with it must equal, in app hash, events, touched sets and the policy's entries in this block, the same
block without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import keepersim.chain as chain_module
from keepersim.chain import BlockResult, Chain
from keepersim.keeper.context import BlockContext
from keepersim.module import msg_server
from keepersim.store.kv import prefix_end
from keepersim.types import keys
from keepersim.types.errors import InvalidMessageError
from keepersim.types.events import InferenceStarted
from keepersim.types.messages import (
    STARTED,
    Inference,
    MsgFinishInference,
    MsgStartInference,
    Participant,
)
from keepersim.types.params import get_default_params
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.state_pb2 import EpochDeclines, ParticipantNodes
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgRegisterParticipant

MODEL = "m"
POLICIES = ("gonka", "windowed", "trin-multiplicative", "consecutive")


def write_then_raise(ctx: BlockContext, msg: MsgRegisterParticipant) -> None:
    """Changes a participant (the decoded one, in place), writes an inference and a delete,
    emits an event, then is rejected."""
    keeper = ctx.keeper
    participant = keeper.get_participant("p1")
    assert participant is not None
    participant.weight += 7
    participant.current_epoch_stats.inference_count += 1
    keeper.set_participant(participant)
    keeper.set_inference(Inference(inference_id=f"ghost-{msg.creator}", status=STARTED))
    keeper.set_timeout(ctx.height + 3, f"ghost-{msg.creator}")
    keeper.emit(InferenceStarted(ctx.height, f"ghost-{msg.creator}", "p1"))
    raise InvalidMessageError("rejected half-way through its writes")


def store_then_raise(ctx: BlockContext, msg: MsgRegisterParticipant) -> None:
    """Writes (new keys, an overwrite, a delete), changes a decoded participant in place without
    storing it, emits an event, then is rejected: all of it taken back in the nested scope."""
    keeper = ctx.keeper
    participant = keeper.get_participant("p3")
    assert participant is not None
    participant.weight += 5
    ghost = f"ghost-{msg.creator}"
    keeper.set_inference(Inference(inference_id=ghost, status=STARTED))
    keeper.set_timeout(ctx.height + 3, ghost)
    keeper.set_effective_epoch_index(keeper.get_effective_epoch_index() + 9)
    # keepersim's own collections too: registered nodes and declines
    keeper.set_participant_nodes(ParticipantNodes(address="p3", models=["other"]))
    keeper.set_declines(EpochDeclines(epoch_index=0, address="p3", declined_requests=99))
    for key, _ in list(keeper.store.iterate(keys.INFERENCES, prefix_end(keys.INFERENCES)))[:1]:
        keeper.delete_key(key)
    keeper.emit(InferenceStarted(ctx.height, ghost, "p3"))
    raise InvalidMessageError("rejected half-way through its writes")


def reach_policy_then_raise(ctx: BlockContext, msg: MsgRegisterParticipant) -> None:
    """Writes, lets the policy see a start and an outcome, then is rejected."""
    keeper = ctx.keeper
    inference = Inference(
        inference_id=f"ghost-{msg.creator}", status=STARTED, assigned_to="p2", model=MODEL
    )
    keeper.set_inference(inference)
    ctx.process_policy_start("p2", inference)
    raise InvalidMessageError("rejected after the policy saw it")


BAD_HANDLERS = {
    "store": store_then_raise,
    "write": write_then_raise,
    "policy": reach_policy_then_raise,
}


@pytest.fixture
def bad_handler(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    def use(kind: str) -> None:
        monkeypatch.setitem(msg_server._HANDLERS, MsgRegisterParticipant, BAD_HANDLERS[kind])

    return use


class Counter:
    """Counts the attempts at building a block (Chain._deliver_once calls)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = Chain._deliver_once

        def counted(chain: Chain, *args: Any) -> Any:
            self.count += 1
            return real(chain, *args)

        monkeypatch.setattr(Chain, "_deliver_once", counted)


@pytest.fixture
def end_block_spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """What each end block starts from: touched, verdict-touched, the policy's block entries."""
    seen: list[tuple[Any, ...]] = []
    real = chain_module.end_block

    def spy(ctx: BlockContext, gas_by_step: dict[str, int] | None = None) -> None:
        entries = sorted(
            (address, entry.SerializeToString())
            for address, entry in ctx.policy_store._entries.items()
        )
        seen.append(
            (sorted(ctx.keeper.hints.touched), sorted(ctx.keeper.hints.verdict_touched), entries)
        )
        real(ctx, gas_by_step)

    monkeypatch.setattr(chain_module, "end_block", spy)
    return seen


def open_chain(policy: str) -> Chain:
    params = get_default_params()
    params.extension_params.health_params.policy = policy
    params.params.validation_params.expiration_blocks = 4
    genesis = Genesis(chain_id="isolation")
    genesis.inference.params.CopyFrom(params.params)
    genesis.keepersim.extension_params.CopyFrom(params.extension_params)
    for i in range(4):
        genesis.inference.participant_list.append(Participant(address=f"p{i}", weight=1000))
        genesis.keepersim.participant_nodes.append(
            ParticipantNodes(address=f"p{i}", models=[MODEL])
        )
    return Chain.open(memory=True, genesis=genesis)


def good_block(h: int, n: int) -> list[Any]:
    """Starts on p0..p3, finishes of some of block h - 1's starts (one for p1)."""
    msgs: list[Any] = []
    for j in range(n):
        address = f"p{j % 4}"
        msgs.append(MsgStartInference(inference_id=f"i{h}-{j}", assigned_to=address, model=MODEL))
        if h > 1 and j % 2 == 0:
            msgs.append(MsgFinishInference(inference_id=f"i{h - 1}-{j}", executed_by=address))
    return msgs


def summary(result: BlockResult) -> tuple[Any, ...]:
    ok = [(r.kind, r.ok) for r in result.tx_results if r.ok]
    return result.app_hash, result.events, ok


def run(policy: str, blocks: list[list[Any]]) -> Iterator[tuple[Any, ...]]:
    with open_chain(policy) as chain:
        for msgs in blocks:
            yield summary(chain.deliver_block(msgs))
        yield (chain.app_hash, chain.verify_app_hash())


@pytest.mark.parametrize("kind", sorted(BAD_HANDLERS))
@pytest.mark.parametrize("policy", POLICIES)
def test_rejected_half_way_leaves_nothing(
    policy: str,
    kind: str,
    bad_handler: Callable[[str], None],
    end_block_spy: list[tuple[Any, ...]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    attempts = Counter(monkeypatch)
    bad_handler(kind)
    with_bad, without = [], []
    for h in range(1, 7):
        good = good_block(h, 5)
        bad = [MsgRegisterParticipant(creator=f"x{h}-{i}") for i in range(2)]
        with_bad.append([bad[0], *good[:3], bad[1], *good[3:]])
        without.append(good)
    a = list(run(policy, with_bad))
    seen_with, built = list(end_block_spy), attempts.count
    end_block_spy.clear()
    b = list(run(policy, without))
    seen_without = list(end_block_spy)
    assert a == b
    assert a[-1][1] is True  # the committed state matches its app hash
    # Each end block starts from the same touched sets and policy entries.
    assert seen_with == seen_without
    # Writes, events and decoded participants are taken back in place; touched marks and the
    # policy's state by building the block again without the message.
    assert built == (6 if kind == "store" else 6 * 3)
    # Every rejected message is reported, with its error.
    with open_chain(policy) as chain:
        result = chain.deliver_block(with_bad[0])
    failed = result.get_failed()
    assert [r.index for r in failed] == [0, 4]
    assert all("InvalidMessageError: rejected" in r.error for r in failed)


@st.composite
def mixed_blocks(draw: st.DrawFn) -> tuple[list[list[Any]], list[list[Any]]]:
    """Blocks of good messages with bad ones (rejected half-way, or naturally invalid: a
    duplicate start, a finish by an unknown participant) drawn in between."""
    with_bad, without = [], []
    for h in range(1, draw(st.integers(2, 4)) + 1):
        good = good_block(h, draw(st.integers(0, 5)))
        mixed: list[Any] = list(good)
        for k in range(draw(st.integers(0, 4))):
            choice = draw(st.sampled_from([*BAD_HANDLERS, "duplicate", "stranger"]))
            if choice in BAD_HANDLERS:
                bad: Any = MsgRegisterParticipant(creator=f"{choice}-{h}-{k}")
            elif choice == "duplicate" and good:
                bad = good[0] if isinstance(good[0], MsgStartInference) else good[1]
            else:
                bad = MsgFinishInference(inference_id=f"i{h - 1}-0", executed_by="stranger")
            mixed.insert(draw(st.integers(0, len(mixed))), bad)
        with_bad.append(mixed)
        without.append(good)
    return with_bad, without


def route(ctx: BlockContext, msg: MsgRegisterParticipant) -> None:
    BAD_HANDLERS[msg.creator.split("-")[0]](ctx, msg)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks=mixed_blocks(), policy=st.sampled_from(POLICIES))
def test_mixed_blocks_hash_as_good_only(
    blocks: tuple[list[list[Any]], list[list[Any]]], policy: str
) -> None:
    with_bad, without = blocks
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(msg_server._HANDLERS, MsgRegisterParticipant, route)
        assert list(run(policy, with_bad)) == list(run(policy, without))
