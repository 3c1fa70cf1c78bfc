"""As-recorded replay and ``keepersim serve``'s trace runner start from the same genesis and send
the same block messages for the same trace (they share keepersim.trace.genesis and
keepersim.trace.messages); the order inside a block and the decline reason are the format's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import strategies as st
from replay_helpers import (
    declined_line,
    header_line,
    inference_line,
    make_params,
    make_participants,
    params_line,
    participants_line,
    write_trace,
)

from keepersim.chain import Chain
from keepersim.replay.as_recorded import replay_as_recorded
from keepersim.server.runner import BlockSink, TraceRunner, TraceSource
from keepersim.trace.format import DECLINE_REASON
from keepersim.trace.messages import build_recorded_finish, build_recorded_start
from keepersim.trace.records import InferenceRecord
from keepersim.types.messages import (
    FINISHED,
    Inference,
    MsgFinishInference,
    MsgStartInference,
    MsgUpdateParams,
)
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.tx_pb2 import (
    MsgDeclineInference,
    MsgRegisterParticipant,
    MsgUpdateExtensionParams,
)

Blocks = dict[int, list[Message]]


def _write(path: Path, *, epoch: int = 0, first: int = 1) -> Path:
    """A trace with every kind of outcome: a finish recorded before its start, one in its start
    block, a later one, a decline, an expiry; a later params line and a weight change."""
    fleet = make_participants(3)
    later = make_params(expiration=25)
    heavier = make_participants(3)
    heavier[1][0].weight = 250
    base = first - 1
    return write_trace(
        path,
        [
            header_line(first, base + 60),
            params_line(make_params(), height=base),
            participants_line(fleet, epoch=epoch, height=base),
            inference_line("a", base + 3, "p0", "FINISHED", end=base + 6),
            inference_line("b", base + 3, "p1", "FINISHED", end=base + 3),
            inference_line("c", base + 4, "p2", "FINISHED", end=base + 2, executed_by="p2"),
            declined_line("d", base + 4, "p1", end=base + 5),
            inference_line("e", base + 5, "p2", "EXPIRED"),
            declined_line("f", base + 6, "p0"),
            params_line(later, height=base + 10),
            participants_line(heavier, epoch=epoch, height=base + 12),
            inference_line("g", base + 20, "p1", "FINISHED", end=base + 22),
        ],
    )


def _normalise(msg: Message) -> Message:
    """A copy without the health policy / shadow flag (as-recorded replay watches in shadow
    mode under its own policy; serve runs the recorded one)."""
    out = type(msg)()
    out.CopyFrom(msg)
    if isinstance(out, MsgUpdateExtensionParams):
        out.extension_params.health_params.ClearField("policy")
        out.extension_params.health_params.ClearField("shadow")
    if isinstance(out, Genesis):
        out.keepersim.extension_params.health_params.ClearField("policy")
        out.keepersim.extension_params.health_params.ClearField("shadow")
    return out


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Every chain opened and block delivered, per chain (by id)."""
    seen: dict[str, Any] = {"geneses": [], "blocks": {}}
    real_open, real_deliver = Chain.open, Chain.deliver_block

    def open_(cls: type[Chain], *args: Any, **kwargs: Any) -> Chain:
        if kwargs.get("genesis") is not None:
            seen["geneses"].append(kwargs["genesis"])
        return real_open(*args, **kwargs)

    def deliver(self: Chain, txs: Any = (), *args: Any, **kwargs: Any) -> Any:
        txs = list(txs)
        result = real_deliver(self, txs, *args, **kwargs)
        seen["blocks"].setdefault(id(self), {})[result.height] = [_normalise(m) for m in txs]
        return result

    monkeypatch.setattr(Chain, "open", classmethod(open_))
    monkeypatch.setattr(Chain, "deliver_block", deliver)
    yield seen


def _replay_both(trace: Path, recorded: dict[str, Any]) -> tuple[Genesis, Blocks, Genesis, Blocks]:
    report = replay_as_recorded(trace, policies=["windowed"], store="memory")
    assert report.tx_failures.count == 0
    (as_recorded_genesis,) = recorded["geneses"]
    (as_recorded_blocks,) = recorded["blocks"].values()
    source = TraceSource(trace)
    chain = source.open_chain()
    try:
        runner = TraceRunner(BlockSink(chain), source)
        runner.run_blocking()
        assert runner.status()["rejected_txs"] == 0
        serve_blocks = recorded["blocks"][id(chain)]
    finally:
        chain.close()
    return as_recorded_genesis, as_recorded_blocks, source.genesis, serve_blocks


@pytest.mark.parametrize(("epoch", "first"), [(0, 1), (3, 121)])
def test_as_recorded_and_serve_send_the_same_blocks(
    tmp_trace: Path, recorded: dict[str, Any], epoch: int, first: int
) -> None:
    """The same genesis (a mid-chain trace's epoch formed in both) and the same messages."""
    trace = _write(tmp_trace, epoch=epoch, first=first)
    genesis, blocks, served_genesis, served_blocks = _replay_both(trace, recorded)
    assert _normalise(genesis) == _normalise(served_genesis)
    assert served_genesis.keepersim.effective_epoch_index == epoch
    if epoch:
        assert [e.index for e in served_genesis.keepersim.epochs] == [epoch]
        assert {g.epoch_index for g in served_genesis.keepersim.epoch_groups} == {epoch}
    assert sorted(blocks) == sorted(served_blocks) == list(range(first, first + 60))
    assert blocks == served_blocks
    kinds = {type(m) for txs in blocks.values() for m in txs}
    assert {
        MsgStartInference,
        MsgFinishInference,
        MsgDeclineInference,
        MsgUpdateParams,
        MsgUpdateExtensionParams,
        MsgRegisterParticipant,
    } <= kinds


def _ids(txs: list[Message]) -> list[tuple[str, str]]:
    return [(type(m).__name__, getattr(m, "inference_id", "")) for m in txs]


def test_block_order_and_decline_reason_follow_the_format(
    tmp_trace: Path, recorded: dict[str, Any]
) -> None:
    trace = _write(tmp_trace)
    _, blocks, _, served = _replay_both(trace, recorded)
    for got in (blocks, served):
        # start b finishes in its own block: after the block's starts
        assert _ids(got[3]) == [
            ("MsgStartInference", "a"),
            ("MsgStartInference", "b"),
            ("MsgFinishInference", "b"),
        ]
        # c's finish was recorded before its start: just before the start, in the start's block
        assert _ids(got[4]) == [
            ("MsgFinishInference", "c"),
            ("MsgStartInference", "c"),
            ("MsgStartInference", "d"),
        ]
        # outcomes of earlier starts first, by (start, id), then the block's starts
        assert _ids(got[6]) == [
            ("MsgFinishInference", "a"),
            ("MsgStartInference", "f"),
            ("MsgDeclineInference", "f"),
        ]
        declines = [m for txs in got.values() for m in txs if isinstance(m, MsgDeclineInference)]
        assert [(m.inference_id, m.creator, m.reason) for m in declines] == [
            ("d", "p1", DECLINE_REASON),
            ("f", "p0", DECLINE_REASON),
        ]
        # the later params line (height 10) goes in block 9, the weight change in block 12
        assert [type(m) for m in got[9]] == [MsgUpdateParams, MsgUpdateExtensionParams]
        assert [(type(m), getattr(m, "weight", None)) for m in got[12]] == [
            (MsgRegisterParticipant, 250)
        ]
    assert DECLINE_REASON == "capacity"


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
_UINT64 = st.integers(0, 2**64 - 1)


@given(_TEXT, _TEXT, _TEXT, _TEXT, _TEXT, _UINT64, _UINT64, _UINT64)
def test_recorded_messages_carry_the_recorded_inference(
    inference_id: str,
    model: str,
    requested_by: str,
    assigned_to: str,
    executed_by: str,
    prompt_tokens: int,
    completion_tokens: int,
    max_tokens: int,
) -> None:
    """The start and finish built field by field are the messages of the recorded Inference's
    fields (the keyword form), to the byte."""
    inference = Inference(
        inference_id=inference_id,
        model=model,
        requested_by=requested_by,
        assigned_to=assigned_to,
        executed_by=executed_by,
        prompt_token_count=prompt_tokens,
        completion_token_count=completion_tokens,
        max_tokens=max_tokens,
        status=FINISHED,
        start_block_height=5,
        end_block_height=7,
    )
    record = InferenceRecord(3, inference)
    start = MsgStartInference(
        creator=inference.requested_by,
        inference_id=inference.inference_id,
        model=inference.model,
        requested_by=inference.requested_by,
        assigned_to=inference.assigned_to,
        prompt_token_count=inference.prompt_token_count,
        max_tokens=inference.max_tokens,
    )
    finish = MsgFinishInference(
        creator=inference.executed_by,
        inference_id=inference.inference_id,
        executed_by=inference.executed_by,
        model=inference.model,
        requested_by=inference.requested_by,
        prompt_token_count=inference.prompt_token_count,
        completion_token_count=inference.completion_token_count,
    )
    for built, expected in (
        (build_recorded_start(record), start),
        (build_recorded_finish(record), finish),
    ):
        assert built == expected
        assert built.SerializeToString(deterministic=True) == expected.SerializeToString(
            deterministic=True
        )
