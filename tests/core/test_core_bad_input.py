"""Bad input: every rejection names what was wrong, leaves no trace, and with ``strict`` rejects
the whole block with the store unchanged."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from core_helpers import MODEL, Driver
from google.protobuf.message import Message

from keepersim.chain import Chain
from keepersim.store.buffer import RESERVED_PREFIX
from keepersim.types.errors import BlockError, GenesisError
from keepersim.types.messages import (
    EXPIRED,
    FINISHED,
    STARTED,
    MsgFinishInference,
    MsgStartInference,
    MsgUpdateParams,
    Participant,
)
from keepersim.types.params import GOV_AUTHORITY
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.tx_pb2 import (
    MsgDeclineInference,
    MsgRegisterParticipant,
    MsgUpdateExtensionParams,
    Tx,
)


def dump(chain: Chain) -> dict[bytes, bytes]:
    """Every state entry (the store's own 0xff metadata, e.g. the height, left out)."""
    with chain.read() as k:
        return dict(k.store.iterate(None, RESERVED_PREFIX))


def start(i: str, to: str = "p0") -> MsgStartInference:
    return MsgStartInference(inference_id=i, assigned_to=to, model=MODEL)


def finish(i: str, by: str = "p0") -> MsgFinishInference:
    return MsgFinishInference(inference_id=i, executed_by=by)


@pytest.fixture
def busy(chain: Chain) -> Chain:
    """A chain with committed history: one inference in flight, one finished."""
    r = chain.deliver_block([start("kept"), start("done", "p1"), finish("done", "p1")])
    assert not r.get_failed()
    return chain


BAD_MESSAGES: list[tuple[str, Message, str, str]] = [
    (
        "unknown-assignee",
        start("x", "ghost"),
        "UnknownParticipantError",
        "MsgStartInference.assigned_to: unknown participant 'ghost'",
    ),
    (
        "unknown-executor",
        finish("x", "ghost"),
        "UnknownParticipantError",
        "MsgFinishInference.executed_by: unknown participant 'ghost'",
    ),
    ("empty-id", start(""), "InvalidMessageError", "MsgStartInference.inference_id is empty"),
    (
        "nul-in-id",
        start("a\x00b"),
        "InvalidMessageError",
        "MsgStartInference.inference_id contains a 0x00 byte",
    ),
    (
        "no-assignee",
        MsgStartInference(inference_id="x", model=MODEL),
        "InvalidMessageError",
        "MsgStartInference.assigned_to is empty",
    ),
    (
        "no-model",
        MsgStartInference(inference_id="x", assigned_to="p0"),
        "InvalidMessageError",
        "MsgStartInference.model is empty",
    ),
    (
        "finish-empty-id",
        finish(""),
        "InvalidMessageError",
        "MsgFinishInference.inference_id is empty",
    ),
    (
        "finish-no-executor",
        MsgFinishInference(inference_id="x"),
        "InvalidMessageError",
        "MsgFinishInference.executed_by is empty",
    ),
    (
        "decline-empty-id",
        MsgDeclineInference(),
        "InvalidMessageError",
        "MsgDeclineInference.inference_id is empty",
    ),
    (
        "unknown-inference",
        MsgDeclineInference(inference_id="ghost"),
        "UnknownInferenceError",
        "MsgDeclineInference: unknown inference 'ghost'",
    ),
    (
        "decline-by-other",
        MsgDeclineInference(inference_id="kept", creator="p3"),
        "InvalidMessageError",
        "MsgDeclineInference.creator 'p3' is not the assigned executor 'p0'",
    ),
    (
        "decline-finished",
        MsgDeclineInference(inference_id="done"),
        "InferenceStateError",
        "inference 'done' is not in progress",
    ),
    (
        "duplicate-start",
        start("kept", "p2"),
        "DuplicateInferenceError",
        "inference 'kept' was already started",
    ),
    (
        "finish-twice",
        finish("done", "p1"),
        "InferenceStateError",
        "inference 'done' cannot finish: status FINISHED",
    ),
    ("empty-tx", Tx(), "InvalidMessageError", "Tx carries no message"),
    (
        "not-a-message",
        Participant(address="p9"),
        "InvalidMessageError",
        "not a module message: Participant",
    ),
    (
        "params-missing",
        MsgUpdateParams(authority=GOV_AUTHORITY),
        "InvalidMessageError",
        "MsgUpdateParams.params is missing",
    ),
    (
        "extension-params-missing",
        MsgUpdateExtensionParams(authority=GOV_AUTHORITY),
        "InvalidMessageError",
        "MsgUpdateExtensionParams.extension_params is missing",
    ),
    (
        "extension-params-not-gov",
        MsgUpdateExtensionParams(authority="p0"),
        "UnauthorizedError",
        "MsgUpdateExtensionParams.authority 'p0' is not the governance account",
    ),
    (
        "no-creator",
        MsgRegisterParticipant(weight=5),
        "InvalidMessageError",
        "MsgRegisterParticipant.creator is empty",
    ),
    (
        "negative-weight",
        MsgRegisterParticipant(creator="newbie", weight=-1),
        "InvalidMessageError",
        "MsgRegisterParticipant.weight must be >= 0, got -1 for 'newbie'",
    ),
]


@pytest.mark.parametrize(
    ("msg", "error", "text"), [b[1:] for b in BAD_MESSAGES], ids=[b[0] for b in BAD_MESSAGES]
)
def test_rejected_message_names_the_fault_and_leaves_no_trace(
    busy: Chain, msg: Message, error: str, text: str
) -> None:
    before, app_hash, height = dump(busy), busy.app_hash, busy.height
    # strict: the whole block is rejected, the store stays at the last commit
    with pytest.raises(BlockError) as exc_info:
        busy.deliver_block([start("fine", "p3"), msg], strict=True)
    assert f"block {height + 1}, tx 1 " in str(exc_info.value)
    assert text in str(exc_info.value)
    assert type(exc_info.value.__cause__).__name__ == error
    assert (busy.height, busy.app_hash, dump(busy)) == (height, app_hash, before)
    assert busy.get_inference("fine") is None
    # not strict: the message alone is rejected, the block is committed without any trace of it
    result = busy.deliver_block([msg])
    assert [(r.index, r.ok) for r in result.tx_results] == [(0, False)]
    assert result.tx_results[0].error.startswith(f"{error}: ")
    assert text in result.tx_results[0].error
    assert result.events == ()
    assert busy.height == height + 1
    assert result.app_hash == app_hash and dump(busy) == before
    assert busy._store.verify_app_hash()
    # the committed history is intact and the chain goes on
    kept = busy.get_inference("kept")
    assert kept is not None and (kept.status, kept.assigned_to) == (STARTED, "p0")
    assert not busy.deliver_block([finish("kept")]).get_failed()


def test_good_messages_around_a_bad_one_are_kept(busy: Chain) -> None:
    result = busy.deliver_block([start("a", "p2"), start("b", "ghost"), start("c", "p3")])
    assert [r.ok for r in result.tx_results] == [True, False, True]
    assert busy.get_inference("a") is not None and busy.get_inference("c") is not None
    assert busy.get_inference("b") is None


def test_finish_after_expiry_rejected(chain: Chain) -> None:
    d = Driver(chain)
    d.add(1, start("late"))
    d.run_to(21)  # expired in the end block of 1 + 20
    assert chain.get_inference("late").status == EXPIRED  # type: ignore[union-attr]
    result = chain.deliver_block([finish("late")])
    assert result.tx_results[0].error == (
        "InferenceExpiredError: inference 'late' expired at its timeout; finish rejected"
    )
    stats = chain.get_participant("p0").current_epoch_stats  # type: ignore[union-attr]
    assert (stats.inference_count, stats.missed_requests) == (0, 1)
    assert chain.get_inference("late").status == EXPIRED  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "blocks",
    [
        [[start("i")], [finish("i")]],
        [[finish("i")], [start("i")]],
        [[start("i"), finish("i")]],
        [[finish("i"), start("i")]],
    ],
    ids=["start-then-finish", "finish-then-start", "same-block", "same-block-finish-first"],
)
def test_start_and_finish_in_either_order_count_once(
    chain: Chain, blocks: list[list[Message]]
) -> None:
    for msgs in blocks:
        assert not chain.deliver_block(msgs).get_failed()
    Driver(chain).run_to(30)  # well past the expiry height
    inference = chain.get_inference("i")
    assert inference is not None
    assert (inference.status, inference.assigned_to, inference.executed_by) == (
        FINISHED,
        "p0",
        "p0",
    )
    assert inference.start_block_height >= 1
    stats = chain.get_participant("p0").current_epoch_stats  # type: ignore[union-attr]
    assert (stats.inference_count, stats.missed_requests) == (1, 0)
    with chain.read() as k:
        assert list(k.iterate_timeouts()) == []
    again = chain.deliver_block([start("i"), finish("i")])
    assert [r.ok for r in again.tx_results] == [False, False]


@pytest.mark.parametrize(
    ("mutate", "text"),
    [
        (
            lambda g: setattr(g.inference.participant_list[1], "weight", -5),
            "genesis.app_state.inference.participant_list[1].weight must be >= 0, got -5 (p1)",
        ),
        (
            lambda g: setattr(g.inference.participant_list[2], "address", "p0"),
            "genesis.app_state.inference.participant_list[2].address 'p0' is a duplicate",
        ),
        (
            lambda g: setattr(g.inference.participant_list[0], "address", ""),
            "genesis.app_state.inference.participant_list[0].address is empty",
        ),
        (lambda g: setattr(g, "chain_id", ""), "genesis.chain_id is empty"),
        (
            lambda g: setattr(g.inference.params.validation_params, "expiration_blocks", 0),
            "genesis params: invalid params: params.validation_params.expiration_blocks=0 "
            "breaks rule: > 0",
        ),
        (
            lambda g: setattr(g.keepersim.extension_params, "cb_miss_threshold_pct", 101),
            "genesis params: invalid params: extension_params.cb_miss_threshold_pct=101",
        ),
        (
            lambda g: g.keepersim.policy_state.add(key=b"\x00p0", value=b""),
            "genesis.keepersim.policy_state[0].key is outside the policy prefixes",
        ),
        (
            lambda g: g.keepersim.participant_nodes.add(address="ghost"),
            "genesis.keepersim.participant_nodes[4].address 'ghost' is not a participant",
        ),
    ],
    ids=[
        "negative-weight",
        "duplicate",
        "empty-address",
        "no-chain-id",
        "invalid-params",
        "invalid-extension-params",
        "policy-key",
        "nodes-of-a-stranger",
    ],
)
def test_bad_genesis_rejected_and_store_left_empty(
    tmp_path: Path, genesis: Genesis, mutate: Callable[[Genesis], None], text: str
) -> None:
    bad = Genesis()
    bad.CopyFrom(genesis)
    mutate(bad)
    path = tmp_path / "db"
    with pytest.raises(GenesisError) as exc_info:
        Chain.open(path, genesis=bad)
    assert text in str(exc_info.value)
    # Nothing was committed, and the folder is free to be opened again with a good genesis.
    with Chain.open(path) as empty:
        assert not empty.has_genesis() and empty.height == 0
    with Chain.open(path, genesis=genesis) as good:
        assert good.has_genesis() and good.get_participant("p1") is not None


def test_block_on_chain_without_genesis(tmp_path: Path) -> None:
    with Chain.open(tmp_path / "db") as chain, pytest.raises(BlockError, match="no genesis"):
        chain.deliver_block([])


def test_block_height_must_follow_the_last(chain: Chain) -> None:
    chain.deliver_block([])
    with pytest.raises(BlockError, match="block height 1 does not follow the last committed 1"):
        chain.deliver_block([], height=1)
    # A gap would skip the expiries and epoch boundaries of the missing heights.
    with pytest.raises(BlockError, match="block height 3 does not follow the last committed 1"):
        chain.deliver_block([], height=3)
    assert chain.height == 1
    assert chain.deliver_block([], height=2).height == 2


def test_genesis_twice_rejected(chain: Chain, genesis: Genesis) -> None:
    app_hash = chain.app_hash
    with pytest.raises(GenesisError, match="already has a genesis"):
        chain.init_genesis(genesis)
    assert chain.app_hash == app_hash
