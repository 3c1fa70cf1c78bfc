"""The Chain's selection memo never changes an answer: a fresh Chain over the same committed
state (an empty memo) and the reference pipeline (compute_selection_table over verdicts computed
from scratch) give the same table at every height, for every policy, gated and in shadow.

The traffic is the simulator's kind (weighted nodes, 30% of them degraded, latencies of 1-8
blocks, misses that expire, a few declines), driven here on the chain alone so that the check
depends on the core only.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
from google.protobuf.message import Message

from keepersim.chain import Chain
from keepersim.keeper.policies import BUILTIN_POLICIES
from keepersim.keeper.policies.base import PolicyReader
from keepersim.keeper.selection import (
    SelectionTable,
    compute_selection_table,
    get_candidates,
    get_pipeline_rules,
)
from keepersim.store.kv import KVBackend
from keepersim.types.errors import NoExecutorsError
from keepersim.types.messages import MsgFinishInference, MsgStartInference, Participant
from keepersim.types.params import get_default_params
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgDeclineInference

MODEL = "default"
PARTICIPANTS = 12
BLOCKS = 700


def compute_reference_table(chain: Chain, model: str) -> SelectionTable:
    """The table by the reference pipeline alone: no memo, no incremental sums."""
    with chain.read() as k:
        params = k.get_extension_params()
        policy = chain.get_policy_object(params.health_params.policy)
        height = chain.height
        candidates = get_candidates(k, model, height)
        reader = PolicyReader(k, policy)
        healths = [policy.get_health(reader, c.address, height) for c in candidates]
        return compute_selection_table(
            candidates,
            healths,
            height=height,
            model=model,
            rules=get_pipeline_rules(policy, params),
        )


def get_outcome(fn: Any) -> tuple[Any, ...]:
    """A table as a tuple, or the error that a gate leaving nobody raises."""
    try:
        return dataclasses.astuple(fn())
    except NoExecutorsError as exc:
        return ("error", str(exc))


def make_memo_genesis(policy: str, shadow: bool, rng: random.Random) -> Genesis:
    params = get_default_params()
    params.params.epoch_params.epoch_length = 300
    params.params.validation_params.expiration_blocks = 20
    params.extension_params.health_params.policy = policy
    params.extension_params.health_params.shadow = shadow
    genesis = Genesis(chain_id="memo")
    genesis.inference.params.CopyFrom(params.params)
    genesis.keepersim.extension_params.CopyFrom(params.extension_params)
    for i in range(PARTICIPANTS):
        address = f"p{i:02d}"
        weight = max(1, int(1000 * rng.lognormvariate(0, 0.8)))
        genesis.inference.participant_list.append(Participant(address=address, weight=weight))
        genesis.keepersim.participant_nodes.append(
            ParticipantNodes(address=address, models=[MODEL])
        )
    return genesis


@pytest.mark.parametrize("shadow", [False, True], ids=["gated", "shadow"])
@pytest.mark.parametrize("policy", sorted(BUILTIN_POLICIES))
def test_memoized_table_equals_fresh_table(policy: str, shadow: bool) -> None:
    rng = random.Random(4)
    genesis = make_memo_genesis(policy, shadow, rng)
    addresses = [p.address for p in genesis.inference.participant_list]
    degraded = set(rng.sample(addresses, round(0.3 * PARTICIPANTS)))
    miss = {
        a: rng.uniform(0.4, 0.7) if a in degraded else rng.uniform(0.005, 0.02) for a in addresses
    }
    due: dict[int, list[Message]] = {}
    checked = []
    kept_out = 0  # heights at which someone is out of the table (or would be, in shadow)
    with Chain.open(memory=True, genesis=genesis) as chain:
        for h in range(1, BLOCKS + 1):
            msgs = due.pop(h, [])
            for j in range(rng.randrange(7)):  # 3 arrivals per block on average
                inference_id = f"r{h}-{j}"
                try:
                    address = chain.get_random_executor(MODEL, inference_id).address
                except NoExecutorsError:
                    address = rng.choice(addresses)
                msgs.append(
                    MsgStartInference(inference_id=inference_id, assigned_to=address, model=MODEL)
                )
                roll = rng.random()
                if roll < 0.02:
                    end: Message = MsgDeclineInference(inference_id=inference_id, creator=address)
                elif roll < 0.02 + miss[address]:
                    continue  # never finishes: expires after 20 blocks
                else:
                    end = MsgFinishInference(inference_id=inference_id, executed_by=address)
                due.setdefault(h + rng.randint(1, 8), []).append(end)
            result = chain.deliver_block(msgs)
            assert not result.get_failed(), result.get_failed()
            backend: KVBackend = chain._store.backend  # noqa: SLF001 - the same committed state
            memo = get_outcome(lambda: chain.get_selection_table(MODEL))  # noqa: B023
            fresh = get_outcome(lambda: Chain(backend).get_selection_table(MODEL))  # noqa: B023
            reference = get_outcome(lambda: compute_reference_table(chain, MODEL))  # noqa: B023
            assert memo == fresh, (policy, h)
            assert memo == reference, (policy, h)
            checked.append(h)
            table = chain.get_selection_table(MODEL) if memo[0] != "error" else None
            if (
                table is None
                or table.excluded
                or table.shadow_excluded
                or len(table.addresses) < PARTICIPANTS
            ):
                kept_out += 1
    assert len(checked) == BLOCKS
    # The traffic moves the verdicts: someone is kept out (by the policy or, under none, the
    # chain's SPRT) at some heights, and not at all of them.
    assert 0 < kept_out < BLOCKS, kept_out
