"""Devshard's wall-clock rules in heights: the block time, the one param that converts.

Devshard's deadlines are seconds of wall clock: the escrow's ``refusal_timeout`` (60 s: a nonce
without a receipt that long after its start may be voted timed out, gonka ee730031
``devshard/host/timeout.go:34-58``) and ``execution_timeout`` (32 min after the receipt,
``:94-121``), both ``DevshardEscrowParams`` (``inference-chain/x/inference/types/params.go:
108-109``), and the gateway limiter's quarantines (``keepersim.gateway.limiter_params``).
keepersim counts heights, so each becomes ``ceil(ms / block_time_ms)`` blocks: a deadline of
any positive length lasts at least one block and never ends before upstream's would.

``DEFAULT_BLOCK_TIME_MS`` is 5,000, upstream's own figure: the mainnet genesis sets
``epoch_length`` 17,280 blocks (``genesis/genesis.json:4998``), one day at 5 s a block;
``decentralized-api/cosmosclient/tx_manager/tx_deadline_config.go:3`` ("30 blocks ~ 2.5 minutes
at 5s/block"); ``docs/specs/restrictions/restrictions-deployment.md:29`` ("~1,555,000 blocks at
5s block time"). No ``timeout_commit`` is pinned in the repo (the node takes CometBFT's default
config, ``inference-chain/cmd/inferenced/cmd/config.go:34-42``). The live chain's params now
say ``epoch_length`` 15,391 (../shared/data/gonka-mainnet/epoch_252/params.json): if an epoch
is still about a day, a block is ~5.6 s, ``block_time_ms=5614``.
"""

from __future__ import annotations

from dataclasses import dataclass

from keepersim.types.pb.inference.inference.params_pb2 import DevshardEscrowParams

DEFAULT_BLOCK_TIME_MS = 5_000
#: ``TimeoutBuffer`` (``devshard/user/session.go:27``): the user waits this long past a
#: deadline before it asks for timeout votes (``HandleTimeout``, ``session.go:1747-1781``).
TIMEOUT_BUFFER_MS = 5_000


def compute_blocks_ceil(ms: int, block_time_ms: int = DEFAULT_BLOCK_TIME_MS) -> int:
    """A wall-clock duration as whole blocks, rounded up."""
    if block_time_ms <= 0:
        raise ValueError("block_time_ms must be positive")
    return -(-ms // block_time_ms)


@dataclass(frozen=True)
class DevshardTimeouts:
    """The escrow's inference deadlines in blocks."""

    refusal_blocks: int
    execution_blocks: int


def compute_timeout_blocks(
    params: DevshardEscrowParams, block_time_ms: int = DEFAULT_BLOCK_TIME_MS
) -> DevshardTimeouts:
    """``refusal_timeout`` / ``execution_timeout`` (seconds) in blocks: 12 / 384 at the
    defaults (60 s, 32 min) and 5 s blocks."""
    return DevshardTimeouts(
        refusal_blocks=compute_blocks_ceil(params.refusal_timeout * 1000, block_time_ms),
        execution_blocks=compute_blocks_ceil(params.execution_timeout * 1000, block_time_ms),
    )


def compute_deadline_blocks(
    params: DevshardEscrowParams, block_time_ms: int = DEFAULT_BLOCK_TIME_MS
) -> DevshardTimeouts:
    """When a nonce's timeout is asked for, in blocks (``HandleTimeout``,
    ``devshard/user/session.go:1747-1781`` at ee730031): without a receipt, ``refusal_timeout``
    after the send, with one, ``execution_timeout`` after the receipt (``confirmedAt``), each
    plus :data:`TIMEOUT_BUFFER_MS`; the verifiers accept it once the deadline has passed
    (``devshard/host/timeout.go:55-58, 119-121``). 13 / 385 at the defaults and 5 s blocks."""
    return DevshardTimeouts(
        refusal_blocks=compute_blocks_ceil(
            params.refusal_timeout * 1000 + TIMEOUT_BUFFER_MS, block_time_ms
        ),
        execution_blocks=compute_blocks_ceil(
            params.execution_timeout * 1000 + TIMEOUT_BUFFER_MS, block_time_ms
        ),
    )
