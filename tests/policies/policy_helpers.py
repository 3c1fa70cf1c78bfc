"""Helpers of the health-policy tests: params, genesis and a small driver over the real Chain.

Defaults keep other machinery out of the way: no SPRT, no reputation weighting, epochs long
enough not to interfere (tests that need a boundary set ``epoch_length``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from chain_builders import make_genesis, make_participant, make_test_params

from keepersim.chain import BlockResult, Chain
from keepersim.types.events import HealthTransition
from keepersim.types.messages import MsgFinishInference, MsgStartInference
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgDeclineInference

MODEL = "m"


def make_params(
    policy: str, *, expiration_blocks: int = 20, epoch_length: int = 100_000
) -> ModuleParams:
    params = make_test_params()
    ext = params.extension_params
    ext.health_params.policy = policy
    params.params.validation_params.expiration_blocks = expiration_blocks
    params.params.epoch_params.epoch_length = epoch_length
    ext.sprt_enabled = False
    ext.reputation_weighting = False
    return params


def make_policy_genesis(params: ModuleParams, weights: dict[str, int]) -> Genesis:
    participants = [
        make_participant(address, weight, (MODEL,)) for address, weight in weights.items()
    ]
    return make_genesis(params=params, participants=participants, chain_id="policy-test")


class Net:
    """Drives a chain block by block and remembers every block's result."""

    def __init__(self, chain: Chain) -> None:
        self.chain = chain
        self.results: list[BlockResult] = []
        self._next_id = 0

    def new_id(self) -> str:
        self._next_id += 1
        return f"inf-{self._next_id}"

    def start(self, address: str, inference_id: str | None = None) -> MsgStartInference:
        return MsgStartInference(
            creator="ta",
            inference_id=inference_id or self.new_id(),
            assigned_to=address,
            model=MODEL,
        )

    @staticmethod
    def finish(start: MsgStartInference) -> MsgFinishInference:
        return MsgFinishInference(
            creator=start.assigned_to,
            inference_id=start.inference_id,
            executed_by=start.assigned_to,
        )

    @staticmethod
    def decline(start: MsgStartInference) -> MsgDeclineInference:
        return MsgDeclineInference(
            creator=start.assigned_to, inference_id=start.inference_id, reason="busy"
        )

    def block(self, *msgs: object) -> BlockResult:
        result = self.chain.deliver_block(list(msgs), strict=True)  # type: ignore[arg-type]
        self.results.append(result)
        return result

    def run(self, blocks: int) -> list[BlockResult]:
        return [self.block() for _ in range(blocks)]

    def run_until(self, height: int) -> None:
        while self.chain.height < height:
            self.block()

    @property
    def height(self) -> int:
        return self.chain.height

    def succeed(self, address: str, latency: int = 1) -> None:
        """Start an inference and finish it ``latency`` blocks later (empty blocks between)."""
        start = self.start(address)
        if latency == 0:
            self.block(start, self.finish(start))
            return
        self.block(start)
        self.run(latency - 1)
        self.block(self.finish(start))

    def miss(self, address: str, count: int = 1) -> None:
        """Start ``count`` inferences in one block and let them expire (known at start + expiry)."""
        result = self.block(*[self.start(address) for _ in range(count)])
        self.run_until(
            result.height + self.chain.get_params().params.validation_params.expiration_blocks
        )

    def succeed_many(self, address: str, count: int, latency: int = 1) -> None:
        """Start ``count`` inferences in one block and finish them all ``latency`` blocks later."""
        starts = [self.start(address) for _ in range(count)]
        self.block(*starts)
        self.run(latency - 1)
        self.block(*[self.finish(s) for s in starts])

    def push_back(self, address: str) -> None:
        start = self.start(address)
        self.block(start)
        self.block(self.decline(start))

    def transitions(self, address: str | None = None) -> list[HealthTransition]:
        return [
            e
            for r in self.results
            for e in r.events
            if isinstance(e, HealthTransition) and (address is None or e.address == address)
        ]

    def state(self, address: str) -> dict[str, object]:
        return self.chain.get_policy_state(address)

    def admitted(self) -> set[str]:
        return set(self.chain.get_selection_table(MODEL).addresses)


NetFactory = Callable[..., Net]


def to_names(transitions: Sequence[HealthTransition]) -> list[tuple[str, str]]:
    return [(t.from_state, t.to_state) for t in transitions]
