"""A scenario's rules, block by block: arrivals, assignment, outcomes, capacity and pushback.

:class:`ScenarioStepper` builds and delivers one block per :meth:`ScenarioStepper.step`
(:func:`keepersim.sim.run_loop.run_scenario` and the server's scenario runner both step a chain
through it). Exactly:


Requests
    The number of requests arriving at height ``h`` is Poisson(``arrivals_per_block``, times
    the ``arrival_shape`` factor of ``h`` when the scenario has one), drawn
    for all heights at once from ``numpy.random.default_rng(seed)``: nothing else uses that
    generator, so every policy sees the same request stream. Request ``n`` (numbered from 0 in
    arrival order) has inference id ``req-<n, 8 digits>``; its model is the only model of the
    fleet, or (several models) one drawn uniformly, keyed by ``(seed, n)``.

Assignment (block ``h``)
    A request arriving at ``h`` is assigned by ``chain.get_random_executor(model, id)`` *before*
    block ``h`` is delivered: it reads the state committed at ``h - 1``, so an outcome applied in
    block ``h - 1`` (a finish, or an expiry in end block ``h - 1``) is visible to it, one applied
    in block ``h`` is not. Its ``MsgStartInference`` is in block ``h`` (start height ``h``).

Outcome of request ``n`` on executor ``a`` at ``h``
    ``d = blake2b("<seed>/<n>/<a>", 16 bytes)``; ``u = d[0:8] / 2**64``; latency
    ``L = latency_min + d[8:16] mod (latency_max - latency_min + 1)``. The same (request,
    executor) pair gets the same outcome under every policy. Capacity first: "in flight" are the
    requests ``a`` accepted at heights ``s`` with ``s + L_s > h`` (missed ones included); with
    ``capacity`` of them in flight the request is over capacity and occupies no slot, otherwise
    it takes a slot until ``h + L``. Then:

    * over capacity, scenario without ``pushback``: a miss;
    * over capacity with ``pushback``: the executor declines: ``MsgDeclineInference`` in block
      ``h + 1`` (its answer), and the requester re-selects before block ``h + 1`` (reading the
      state committed at ``h``) with id ``<id>/r1`` (then ``/r2`` ...), at most
      ``max_reselects`` times; each re-selection is a new assignment (a new on-chain inference,
      a new outcome draw keyed by the same ``n`` and the new executor). A request whose last
      attempt is declined is counted in ``unserved_requests``;
    * ``u < p_a(h)``: a miss;
    * ``L > expiration_blocks`` (in force at ``h``): a miss (the finish would come too late);
    * otherwise ``MsgFinishInference`` (executed by ``a``) in block ``h + L``.

    A miss produces no message: the chain expires the inference in end block
    ``h + expiration_blocks`` (the metrics count misses from those expiry events).

Block ``h`` holds, in order: the governance ``MsgUpdateParams`` scheduled at ``h`` (effective
from ``h + 1``), the finishes due at ``h``, the declines due at ``h``, then the starts (re-selected
requests first, then the new arrivals). Blocks are delivered with ``strict=True``: a message the
chain rejects is a driver bug and fails the run.

End of run
    After block ``scenario.blocks`` the run stops; inferences still in flight are not counted in
    ``inferences`` or ``misses`` (they are reported as ``in_flight_at_end``).
    Declined assignments (pushback) are counted in ``declines``, not in ``inferences``.

If no executor can be selected at all (``NoExecutorsError``: every candidate kept out and the
policy allows no fallback), the request is dropped and counted in ``unassigned_requests``.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from keepersim.chain import BlockResult, Chain, Selection
from keepersim.gateway.signals import OutcomeClass
from keepersim.sim.devshard_path import DevshardDispatch, DevshardPath
from keepersim.sim.governance import compute_governance_txs
from keepersim.sim.run_errors import SimulationError
from keepersim.sim.scenario import Scenario
from keepersim.sim.scenario_extras import compute_arrival_factors
from keepersim.trace.format import DECLINE_REASON
from keepersim.types.errors import NoExecutorsError
from keepersim.types.params import GOV_AUTHORITY
from keepersim.types.pb.inference.inference.tx_pb2 import MsgFinishInference, MsgStartInference
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.tx_pb2 import MsgDeclineInference, MsgExcludeParticipant

__all__ = [
    "REQUESTER",
    "ScenarioStepper",
    "SelectionHook",
    "StartHook",
    "draw_outcome",
    "get_request_id",
]

#: The account that sends every MsgStartInference (the simulated transfer agent).
REQUESTER = "keepersim-requester"


def get_request_id(request_index: int, attempt: int = 0) -> str:
    """Inference id of request ``n``'s ``attempt``-th assignment (0 = the first)."""
    base = f"req-{request_index:08d}"
    return base if attempt == 0 else f"{base}/r{attempt}"


def draw_outcome(
    seed: int, request_index: int, address: str, lat_min: int, lat_max: int
) -> tuple[float, int]:
    """``(u, latency)`` of request ``n`` on ``address``: uniform u in [0, 1) and a latency drawn
    uniformly from ``[lat_min, lat_max]``, both keyed by ``(seed, n, address)``."""
    digest = hashlib.blake2b(f"{seed}/{request_index}/{address}".encode(), digest_size=16).digest()
    u = int.from_bytes(digest[:8], "big") / 2.0**64
    latency = lat_min + int.from_bytes(digest[8:], "big") % (lat_max - lat_min + 1)
    return u, latency


def _pick_model(
    seed: int,
    request_index: int,
    models: Sequence[str],
    traffic: Sequence[tuple[str, float]] = (),
) -> str:
    """Request ``n``'s model: uniform among ``models``, or by the shares of ``traffic``
    (a scenario's ``model_traffic``), keyed by ``(seed, n)``."""
    if not traffic and len(models) == 1:
        return models[0]
    digest = hashlib.blake2b(f"{seed}/{request_index}/model".encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "big")
    if not traffic:
        return models[value % len(models)]
    total = sum(share for _, share in traffic)
    point = value / 2**64 * total
    acc = 0.0
    chosen = traffic[-1][0]
    for model, share in traffic:
        acc += share
        if share > 0 and point < acc:
            chosen = model
            break
    else:
        chosen = next(m for m, s in reversed(traffic) if s > 0)
    return chosen


SelectionHook = Callable[[int, Selection, float], None]
StartHook = Callable[[int, str, str], None]


class ScenarioStepper:
    """A scenario's block loop, one block per :meth:`step` (the rules of the module docstring).

    Arrivals, assignment, outcome draws, capacity and pushback, finishes, declines and governance
    messages live here and nowhere else: :func:`run_scenario` and the server's
    :class:`~keepersim.server.runner.ScenarioRunner` both step a chain through it.

    Each :meth:`step` builds block ``chain.height + 1`` from the state committed at
    ``chain.height``, delivers it with ``deliver(txs)`` (default ``chain.deliver_block(txs,
    strict=True)``) and returns the result; :meth:`is_done` once block ``blocks`` (default
    ``scenario.blocks``) is committed. ``seed`` overrides ``scenario.seed``; ``governance`` is a
    checked schedule (``(height, params)`` pairs sorted by height). The params of a block (its
    ``expiration_blocks``, the authority that signs governance) are those committed, or the
    pending ones when a ``MsgUpdateParams`` of the previous block takes effect with it.

    Callers record what they need through ``on_selection(height, selection, p_miss)`` (every
    assignment; ``p_miss`` is the executor's true miss probability at ``height``) and
    ``on_start(height, inference_id, executor)`` (every ``MsgStartInference``). Counts:
    ``requests`` (arrivals), ``unassigned`` (no executor), ``unserved`` (last attempt declined),
    ``planned_misses``.
    """

    def __init__(
        self,
        scenario: Scenario,
        chain: Chain,
        *,
        seed: int | None = None,
        blocks: int | None = None,
        governance: Sequence[tuple[int, ModuleParams]] = (),
        deliver: Callable[[list[Any]], BlockResult] | None = None,
        on_selection: SelectionHook | None = None,
        on_start: StartHook | None = None,
        devshard: DevshardPath | None = None,
    ) -> None:
        self.scenario = scenario
        self.devshard = devshard
        self.chain = chain
        self.seed = scenario.seed if seed is None else seed
        self.blocks = scenario.blocks if blocks is None else blocks
        self.deliver = deliver if deliver is not None else partial(chain.deliver_block, strict=True)
        self.on_selection = on_selection
        self.on_start = on_start
        rng = np.random.default_rng(self.seed)
        if scenario.arrival_shape:
            factors = compute_arrival_factors(scenario.arrival_shape, self.blocks)
            self.counts = rng.poisson(scenario.arrivals_per_block * np.asarray(factors))
        else:
            self.counts = rng.poisson(scenario.arrivals_per_block, size=self.blocks)
        self.specs = {p.address: p for p in scenario.participants}
        self.models = sorted({m for p in scenario.participants for m in p.models})
        self.governance: dict[int, list[ModuleParams]] = {}
        for height, p in governance:
            self.governance.setdefault(height, []).append(p)
        self.events: dict[int, list[tuple[str, str]]] = {}
        for event in scenario.events:
            self.events.setdefault(event.height, []).append((event.address, event.reason))
        self.finishes: dict[int, list[MsgFinishInference]] = {}
        self.declines: dict[int, list[MsgDeclineInference]] = {}
        self.reselects: dict[int, list[tuple[int, int, str]]] = {}
        self.slots: dict[str, list[int]] = {
            p.address: [] for p in scenario.participants if p.capacity is not None
        }
        self._expiration = 0
        self.next_request = 0
        self.requests = 0
        self.unassigned = 0
        self.unserved = 0
        self.planned_misses = 0

    def is_done(self) -> bool:
        return self.chain.height >= self.blocks

    def _read_params(self) -> tuple[int, str]:
        """(expiration_blocks in force in the next block, the governance authority)."""
        with self.chain.read() as k:
            params = k.get_pending_params()
            if params is None:
                params = k.get_params()
            return params.validation_params.expiration_blocks, GOV_AUTHORITY

    # one assignment ------------------------------------------------------------------------

    def assign(
        self, height: int, request: int, attempt: int, model: str, starts: list[MsgStartInference]
    ) -> None:
        rid = get_request_id(request, attempt)
        try:
            sel: Selection = self.chain.get_random_executor(model, rid)
        except NoExecutorsError:
            self.unassigned += 1
            return
        self.assign_to(height, request, attempt, model, starts, sel)

    def assign_to(
        self,
        height: int,
        request: int,
        attempt: int,
        model: str,
        starts: list[MsgStartInference],
        sel: Selection,
        deadline: int | None = None,
        retry: bool = True,
    ) -> tuple[OutcomeClass, int, bool]:
        """Assign request ``n``'s ``attempt`` to ``sel.address`` (the rules of the module
        docstring); its planned outcome, the height it resolves at, and whether a miss is one
        the host never answered (over capacity, or its miss draw). ``deadline``: the blocks an
        answer may take before it is a miss (default the chain's expiry; a devshard nonce's is
        its escrow's execution timeout: an answer after the chain's expiry but within it is
        recorded as a finish at the expiry). ``retry=False``: a decline is neither re-tried nor
        unserved (a devshard race attempt: the request's own attempt still runs)."""
        rid = sel.request_id
        address = sel.address
        spec = self.specs[address]
        p_miss = spec.get_miss_probability(height)
        if self.on_selection is not None:
            self.on_selection(height, sel, p_miss)
        u, latency = draw_outcome(self.seed, request, address, spec.latency_min, spec.latency_max)
        over = False
        planned: tuple[OutcomeClass, int, bool]
        if spec.capacity is not None:
            heap = self.slots[address]
            while heap and heap[0] <= height:
                heapq.heappop(heap)
            if len(heap) >= spec.capacity:
                over = True
            else:
                heapq.heappush(heap, height + latency)
        if over and self.scenario.pushback:
            self.declines.setdefault(height + 1, []).append(
                MsgDeclineInference(creator=address, inference_id=rid, reason=DECLINE_REASON)
            )
            if retry and attempt < self.scenario.max_reselects:
                self.reselects.setdefault(height + 1, []).append((request, attempt + 1, model))
            elif retry:
                self.unserved += 1
            planned = ("decline", height + 1, False)
        elif over or u < p_miss or latency > (deadline or self._expiration):
            self.planned_misses += 1
            planned = ("miss", height + (deadline or self._expiration), over or u < p_miss)
        else:
            planned = ("finish", height + latency, False)
            self.finishes.setdefault(height + min(latency, self._expiration), []).append(
                MsgFinishInference(
                    creator=address,
                    inference_id=rid,
                    executed_by=address,
                    model=model,
                    requested_by=REQUESTER,
                )
            )
        starts.append(
            MsgStartInference(
                creator=REQUESTER,
                inference_id=rid,
                model=model,
                requested_by=REQUESTER,
                assigned_to=address,
            )
        )
        if self.on_start is not None:
            self.on_start(height, rid, address)
        return planned

    def process_devshard(
        self, devshard: DevshardPath, height: int, starts: list[MsgStartInference]
    ) -> None:
        """Run the devshard path's pickers on the block's queued requests; each dispatch is an
        assignment to the slot's host (:mod:`keepersim.sim.devshard_path`)."""
        for event in devshard.process_block(height, self.chain):
            if not isinstance(event, DevshardDispatch):
                if event.attempt == 0:
                    self.unassigned += 1
                else:
                    self.unserved += 1
                continue
            rid = event.request_id
            sel = Selection(event.address, self.chain.height, event.model, rid, False, False)
            outcome, at, no_receipt = self.assign_to(
                height,
                event.request,
                event.attempt,
                event.model,
                starts,
                sel,
                event.execution_blocks,
                retry=event.race == 0,
            )
            devshard.process_result(
                height,
                event,
                outcome,
                at,
                no_receipt=no_receipt,
                retried=outcome == "decline" and event.attempt < self.scenario.max_reselects,
            )

    # one block -----------------------------------------------------------------------------

    def step(self) -> BlockResult:
        """Build and deliver the next block; its result."""
        h = self.chain.height + 1
        if h > self.blocks:
            raise SimulationError(f"the run ends at block {self.blocks}")
        self._expiration, authority = self._read_params()
        txs: list[Any] = []
        for p in self.governance.get(h, ()):
            txs.extend(compute_governance_txs(p, authority))
        txs.extend(
            MsgExcludeParticipant(authority=authority, address=address, reason=reason)
            for address, reason in self.events.get(h, ())
        )
        txs.extend(self.finishes.pop(h, ()))
        txs.extend(self.declines.pop(h, ()))
        starts: list[MsgStartInference] = []
        devshard = self.devshard
        for request, attempt, model in self.reselects.pop(h, ()):
            if devshard is not None and devshard.is_routed(request):
                devshard.process_submit(
                    h, request, attempt, model, get_request_id(request, attempt)
                )
            else:
                self.assign(h, request, attempt, model, starts)
        for _ in range(int(self.counts[h - 1])):
            n = self.next_request
            self.next_request += 1
            self.requests += 1
            model = _pick_model(self.seed, n, self.models, self.scenario.model_traffic)
            if devshard is not None and devshard.is_routed(n):
                devshard.process_submit(h, n, 0, model, get_request_id(n))
            else:
                self.assign(h, n, 0, model, starts)
        if devshard is not None:
            self.process_devshard(devshard, h, starts)
        txs.extend(starts)
        return self.deliver(txs)
