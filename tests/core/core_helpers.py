"""Helpers for the core tests: a block driver, a counting backend, a deterministic scenario.

Imported by the tests in this folder as ``core_helpers`` (pytest puts the folder on sys.path) and
run as a script by the cross-process determinism test.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from google.protobuf.message import Message

from keepersim.chain import BlockResult, Chain
from keepersim.keeper.policies.base import PolicyReader
from keepersim.keeper.policies.gonka import GonkaBreaker
from keepersim.store.kv import KVBackend, KVReader, prefix_end
from keepersim.types import keys
from keepersim.types.events import HealthTransition
from keepersim.types.messages import MsgFinishInference, MsgStartInference, Participant
from keepersim.types.params import GOV_AUTHORITY
from keepersim.types.pb.keepersim.v1.health_pb2 import CircuitBreakerEntry
from keepersim.types.pb.keepersim.v1.tx_pb2 import (
    MsgDeclineInference,
    MsgRegisterParticipant,
    MsgUpdateExtensionParams,
)

MODEL = "m"
GONKA_STATE = keys.POLICY_STATE + GonkaBreaker.prefix
GONKA_QUEUE = keys.POLICY_QUEUE + GonkaBreaker.prefix


@dataclass
class Driver:
    """Delivers blocks one by one with messages planned for given heights.

    ``success(addr, h)`` puts a start and its finish into block h; ``miss(addr, h)`` puts a start
    into block h - expiration_blocks so that the inference expires in the end block of h.
    """

    chain: Chain
    plan: dict[int, list[Message]] = field(default_factory=dict)
    results: dict[int, BlockResult] = field(default_factory=dict)
    _seq: int = 0

    @property
    def height(self) -> int:
        return self.chain.height

    def new_id(self, tag: str = "inf") -> str:
        self._seq += 1
        return f"{tag}-{self._seq:05d}"

    def add(self, height: int, *msgs: Message) -> None:
        assert height > self.height, f"block {height} is already committed"
        self.plan.setdefault(height, []).extend(msgs)

    def success(self, address: str, height: int, n: int = 1) -> list[str]:
        ids = [self.new_id() for _ in range(n)]
        for i in ids:
            self.add(
                height,
                MsgStartInference(inference_id=i, assigned_to=address, model=MODEL),
                MsgFinishInference(inference_id=i, executed_by=address),
            )
        return ids

    def miss(self, address: str, height: int, n: int = 1) -> list[str]:
        start = height - self.chain.get_params().params.validation_params.expiration_blocks
        ids = [self.new_id() for _ in range(n)]
        for i in ids:
            self.add(start, MsgStartInference(inference_id=i, assigned_to=address, model=MODEL))
        return ids

    def decline(self, address: str, height: int) -> str:
        i = self.new_id()
        self.add(
            height,
            MsgStartInference(inference_id=i, assigned_to=address, model=MODEL),
            MsgDeclineInference(inference_id=i, creator=address, reason="busy"),
        )
        return i

    def run_to(self, height: int) -> list[BlockResult]:
        """Deliver every block up to ``height`` (inclusive); every tx must be accepted."""
        out = []
        while self.height < height:
            h = self.height + 1
            r = self.chain.deliver_block(self.plan.pop(h, []))
            assert not r.get_failed(), r.get_failed()
            self.results[h] = r
            out.append(r)
        return out

    def transitions(self, address: str | None = None) -> list[HealthTransition]:
        out = []
        for h in sorted(self.results):
            for e in self.results[h].events:
                if isinstance(e, HealthTransition) and (address is None or e.address == address):
                    out.append(e)
        return out

    def transitions_at(self, height: int, address: str | None = None) -> list[HealthTransition]:
        return [t for t in self.transitions(address) if t.height == height]

    def state(self, address: str) -> dict[str, object]:
        return self.chain.get_policy_state(address)

    def entry(self, address: str) -> CircuitBreakerEntry | None:
        with self.chain.read() as k:
            raw = k.store.get(GONKA_STATE + address.encode())
        return None if raw is None else CircuitBreakerEntry.FromString(raw)

    def queue(self) -> list[tuple[int, str]]:
        with self.chain.read() as k:
            n = len(GONKA_QUEUE)
            return [
                (keys.decode_height_key(key[n:]), address)
                for key, raw in k.store.iterate(GONKA_QUEUE, prefix_end(GONKA_QUEUE))
                for address in keys.decode_address_set(raw)
            ]

    def health(self, address: str, height: int) -> tuple[bool, str]:
        """GonkaBreaker.get_health at any height, over the committed state."""
        policy = GonkaBreaker()
        with self.chain.read() as k:
            h = policy.get_health(PolicyReader(k, policy), address, height)
        return h.admitted, h.state

    def participant(self, address: str) -> Participant:
        p = self.chain.get_participant(address)
        assert p is not None
        return p


class CountingBackend:
    """A KVBackend wrapper counting the keys the chain reads, iterates over and writes."""

    def __init__(self, inner: KVBackend) -> None:
        self.inner = inner
        self.gets = 0
        self.iterations = 0
        self.iterated = 0
        self.written = 0

    def reset(self) -> None:
        self.gets = self.iterations = self.iterated = self.written = 0

    def counts(self) -> tuple[int, int, int, int]:
        return self.gets, self.iterations, self.iterated, self.written

    def get(self, key: bytes) -> bytes | None:
        self.gets += 1
        return self.inner.get(key)

    def iterate(
        self, start: bytes | None = None, stop: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        self.iterations += 1
        return self._count(self.inner.iterate(start, stop, reverse))

    def _count(self, it: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        for kv in it:
            self.iterated += 1
            yield kv

    def write_batch(self, puts: Mapping[bytes, bytes], deletes: Iterable[bytes]) -> None:
        dels = list(deletes)
        self.written += len(puts) + len(dels)
        self.inner.write_batch(puts, dels)

    def snapshot(self) -> KVReader:
        return self.inner.snapshot()

    def close(self) -> None:
        self.inner.close()


def run_scenario(chain: Chain, blocks: int = 90, seed: int = 7) -> list[str]:
    """A fixed, busy block sequence (selection, starts, finishes, misses, declines, a new
    participant, a params update, epoch boundaries); returns the app hash hex after each block."""
    rng = random.Random(seed)
    reliability = {f"p{i}": r for i, r in enumerate((1.0, 0.95, 0.6, 0.2, 0.0, 0.9))}
    open_ids: list[tuple[str, str]] = []
    hashes = [chain.app_hash.hex()]
    for h in range(chain.height + 1, chain.height + 1 + blocks):
        msgs: list[Message] = []
        still_open = []
        for inference_id, addr in open_ids:
            roll = rng.random()
            if roll < reliability.get(addr, 0.5) * 0.5:
                msgs.append(MsgFinishInference(inference_id=inference_id, executed_by=addr))
            elif roll > 0.97:
                msgs.append(MsgDeclineInference(inference_id=inference_id, creator=addr))
            else:
                still_open.append((inference_id, addr))
        open_ids = still_open
        for j in range(rng.randint(1, 4)):
            request_id = f"req-{h}-{j}"
            addr = chain.get_random_executor(MODEL, request_id).address
            msgs.append(MsgStartInference(inference_id=request_id, assigned_to=addr, model=MODEL))
            open_ids.append((request_id, addr))
        if h == 17:
            msgs.append(MsgRegisterParticipant(creator="late", weight=3000, models=[MODEL]))
        if h == 33:
            ext = chain.get_params().extension_params
            ext.cb_min_samples = 6
            msgs.append(MsgUpdateExtensionParams(authority=GOV_AUTHORITY, extension_params=ext))
        rng.shuffle(msgs)
        result = chain.deliver_block(msgs)
        # A finish or decline that lost the race with its expiry is rejected; nothing else may be.
        late = ("InferenceExpiredError", "InferenceStateError")
        assert all(r.error.startswith(late) for r in result.get_failed()), result.get_failed()
        hashes.append(result.app_hash.hex())
    return hashes


def make_scenario_genesis_json() -> str:
    """The scenario's genesis as JSON (so a subprocess builds exactly the same one)."""
    from keepersim.module.genesis import genesis_to_json
    from keepersim.types.messages import MLNodeInfo
    from keepersim.types.params import get_default_params
    from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
    from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes

    params = get_default_params()
    params.params.epoch_params.epoch_length = 30
    params.params.validation_params.expiration_blocks = 6
    params.extension_params.cb_initial_cooldown_blocks = 8
    params.extension_params.cb_max_cooldown_blocks = 40
    genesis = Genesis(chain_id="keepersim-scenario")
    genesis.inference.params.CopyFrom(params.params)
    genesis.keepersim.extension_params.CopyFrom(params.extension_params)
    for i in range(6):
        address = f"p{i}"
        genesis.inference.participant_list.append(
            Participant(address=address, weight=1000 + 250 * i)
        )
        genesis.keepersim.participant_nodes.append(
            ParticipantNodes(
                address=address,
                models=[MODEL],
                ml_nodes=[MLNodeInfo(node_id=f"n{i}", timeslot_allocation=[True, i % 2 == 0])],
            )
        )
    return genesis_to_json(genesis)


if __name__ == "__main__":  # used by the cross-process determinism test
    from keepersim.module.genesis import genesis_from_json

    with Chain.open(memory=True, genesis=genesis_from_json(make_scenario_genesis_json())) as c:
        sys.stdout.write("\n".join(run_scenario(c)) + "\n")
