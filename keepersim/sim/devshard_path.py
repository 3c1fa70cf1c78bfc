"""The devshard path of a run (issue 33): escrows, their slots, the session picker, the limiter.

A scenario's ``devshard`` key (:mod:`keepersim.sim.devshard_spec`) sends a share of its requests
here instead of ``GetRandomExecutor``. Every rule is gonka ee730031's (``github:kaitakuai/gonka``;
the pure rules and their ported tests are :mod:`keepersim.keeper.devshard` and
:mod:`keepersim.gateway`, docs/design/devshard.md):

Escrows
    ``open_escrows`` open escrows per model (default 1), each with its own session; request
    ``n`` takes escrow lane ``n % open_escrows`` (a deterministic stand-in for the gateway's
    choice among its escrows by capacity weights, not modelled). An escrow is created when a
    request finds its lane empty, when the lane's escrow used its ``nonces_per_escrow`` nonces,
    or when the epoch changed since its creation (its group is its epoch's; the gateway's
    escrow rotation by balance is not modelled). Its slots are
    ``compute_escrow_slots`` = ``MsgCreateDevshardEscrow``
    (``x/inference/keeper/msg_server_create_devshard_escrow.go:49-78``): the header's app hash
    (the state after the previous block, ``Chain.app_hash`` before the block is delivered), the
    chain-wide escrow counter + 1, the model, the model group's validation weights of the
    effective epoch, ``group_size`` slots (the scenario's, else
    ``devshard_escrow_params.group_size``, else 16: ``types/params.go:102``). No health filter,
    as upstream; with ``slot_filter`` the weights of the participants the chain policy's table
    excludes at that height are dropped first (the what-if), unless that leaves nobody.
Nonces and the picker
    Each escrow's session is a :class:`~keepersim.gateway.picker.PickerState` over its slots
    (``devshard/cmd/devshardctl/session_picker.go``): nonce ``n`` goes to slot ``n % size``
    (``devshard/user/session.go:591-592``); requests of a block are queued in arrival order
    (re-tries after a decline first), then the picker runs until the queue is empty, a nonce is
    held, or the escrow's nonces run out (then the next escrow takes the rest of the queue in
    the same block). A dispatch is an assignment like ``GetRandomExecutor``'s (same outcome
    draw, capacity, pushback); a ghost probe burns the nonce and sends nothing; a request whose
    exclude set covers every available host is dropped (``ErrNoAvailableHost``): unassigned,
    or unserved after a decline. No PoC phase gates the picker (keepersim's PoC is one block
    long and every participant keeps serving, module docstring of :mod:`keepersim.sim.run_genesis`).
What the chain records
    Each dispatched nonce is delivered as the chain's ``MsgStartInference`` assigned to the
    slot's host, and ends as a finish, a decline or an expiry: keepersim's stand-in for the
    escrow's settlement, whose per-host stats reach the same epoch counters
    (``keeper/devshard_host_stats.go:74-127``: completed = assigned - missed), here per request
    instead of once per escrow. A miss is a dispatched nonce that was not answered in time (a
    voted timeout, ``devshard/state/machine.go:1152``); a ghost probe is never a miss (no
    request was sent, so no timeout can be voted). In time means the escrow's deadlines
    (``compute_deadline_blocks``, read from the chain's ``devshard_escrow_params`` when the
    escrow is created; ``devshard/user/session.go:1747-1781``): a host that never answers is
    timed out ``refusal_timeout`` + 5 s after the send (13 blocks), one that answers
    ``execution_timeout`` + 5 s after its receipt (385 blocks). An answer within the execution
    deadline is a finish even past the chain's ``expiration_blocks`` (the chain's record gets
    it at the expiry height, so its counters see the escrow's verdict); one past it is an
    ``execution_timeout`` miss.
The limiter (``devshard-limiter`` runs only)
    The gateway's ``ParticipantRequestLimiter`` (:mod:`keepersim.gateway.limiter`) is the
    picker's throttle check (``gateway.go:299-307``); each dispatch takes a token
    (``participant_limiter.go:443-502``). It learns each dispatch's outcome
    (``signals.get_outcome_signal``): a finish at its height (success), a decline one block
    later (429/503), a miss at the refusal deadline (13 blocks at 5 s: no receipt,
    ``devshard/host/timeout.go:34-58``) when the host never answered, or at the execution
    deadline when it answered too slowly. Signals of a height are applied
    before that height's picker runs. The limiter's state is the gateway's:
    outside the app hash, driven only by the run's own outcomes, so deterministic. Other
    policies run the picker without a throttle checker (``NewRedundancy``'s nil checker).
No winner (``devshard-limiter`` runs)
    A host in shadow quarantine or on probation (``is_no_winner``) gets real traffic but
    cannot win (``devshard/docs/host-health.md``). The gateway's ``Redundancy`` then starts the
    next attempt at once (``primary_suspicious`` decision, ``redundancy.go:1714-1716``;
    ``suspicious_host_immediate_escalation``, ``:2631-2637``): keepersim queues a race attempt
    of the same request (id ``<first attempt's id>/w<k>``) right behind, in the same block,
    with every participant tried so far excluded (``triedParticipants``, ``:1695-1710``); the
    picker gives it the next usable nonce (ghosts in between as usual). A race attempt on
    another no-winner host escalates again, up to ``maxAttempts`` attempts, the group size
    (``:3721-3730``: ``maxSpeculativeAttempts`` is unset outside PoC). Every attempt is a real
    nonce: a ``MsgStartInference`` on the chain, an outcome the limiter learns (a finished
    attempt is a success whether or not it won, ``recordSample``, ``:4003-4060``). The winner
    (``devshard_race_winners``) is an eligible attempt that finished, else a no-winner one
    (``resolvedWinnerNonce`` / ``fallbackSuspiciousWinner``, ``:3732-3766``), else none. A race
    attempt that finds no host ends silently, and its decline is neither re-tried nor
    unserved: the request's own attempt decides that. Simplified: upstream's race is in
    wall-clock time (first content wins, losers are cancelled); here every attempt runs to its
    own outcome, the PerfTracker's speculative attempts for slow or unresponsive hosts and the
    receipt timeout's secondary are not modelled.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any, Final

from keepersim.chain import Chain
from keepersim.gateway.limiter import (
    LimiterState,
    compute_new_limiter,
    is_blocked,
    is_no_winner,
    process_admission,
    process_outcome,
    process_update_params,
)
from keepersim.gateway.limiter_params import compute_limiter_params, compute_picker_stale_blocks
from keepersim.gateway.picker import (
    GhostKind,
    HostChecks,
    PickerRequest,
    PickerState,
    process_picker_run,
)
from keepersim.gateway.signals import OutcomeClass
from keepersim.keeper.devshard.slots import compute_escrow_slots
from keepersim.keeper.devshard.timing import compute_deadline_blocks
from keepersim.module.msg_server import get_next_extension
from keepersim.sim.devshard_spec import (
    MIXED_SHARE,
    SELECTION_PATH_CHOICES,
    DevshardSpec,
    compute_effective_spec,
)
from keepersim.sim.scenario import Scenario
from keepersim.types.errors import NoExecutorsError

__all__ = [
    "DEFAULT_GROUP_SIZE",
    "MIXED_SHARE",
    "SELECTION_PATH_CHOICES",
    "compute_path_scenario",
    "get_path_variants",
    "get_selection_path_words",
    "DevshardDispatch",
    "DevshardDrop",
    "DevshardPath",
    "is_devshard_request",
]

#: The run policy whose devshard traffic passes the gateway's limiter (its chain runs ``none``).
#: ``DefaultDevshardGroupSize`` (x/inference/types/params.go:102).
DEFAULT_GROUP_SIZE: Final = 16


def is_devshard_request(seed: int, request_index: int, share: float) -> bool:
    """Whether request ``n`` goes through devshard: ``blake2b("<seed>/<n>/devshard")`` below
    ``share`` of 2**64 (the threshold an integer, so the split is exact and reproducible)."""
    if share >= 1.0:
        return True
    if share <= 0.0:
        return False
    digest = hashlib.blake2b(f"{seed}/{request_index}/devshard".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < int(share * 2**64)


@dataclass
class DevshardEscrow:
    escrow_id: int
    epoch: int
    slots: tuple[str, ...]
    picker: PickerState
    nonces_left: int
    #: Its nonces' timeout deadlines in blocks (``compute_deadline_blocks`` of the params at
    #: its creation): without a receipt after the send, with one after the receipt.
    refusal_blocks: int = 13
    execution_blocks: int = 385


@dataclass(frozen=True)
class DevshardDispatch:
    """A nonce that carries request ``request``'s ``attempt`` to ``address``."""

    request: int
    attempt: int
    model: str
    address: str
    no_winner: bool = False
    refusal_blocks: int = 13
    execution_blocks: int = 385
    #: The inference id of this nonce's request attempt (``get_request_id``'s, or a race
    #: attempt's ``<id>/w<k>``).
    request_id: str = ""
    #: 0: the request's own attempt; k > 0: the k-th redundant attempt of a "no winner" race.
    race: int = 0
    #: The race this nonce belongs to (its first attempt's id), "" outside races.
    race_root: str = ""


@dataclass(frozen=True)
class DevshardDrop:
    """A request the picker answered without a nonce (``ErrNoAvailableHost``)."""

    request: int
    attempt: int


@dataclass
class DevshardCounts:
    requests: int = 0
    dispatches: int = 0
    ghosts: dict[str, int] = field(default_factory=dict)
    drops: int = 0
    escrows: int = 0
    filtered_escrows: int = 0
    no_winner_dispatches: int = 0
    race_attempts: int = 0
    race_drops: int = 0
    limiter_signals: int = 0
    misses: dict[str, int] = field(default_factory=dict)


class DevshardPath:
    """A run's devshard side (module docstring): escrows per model, their pickers, the
    optional limiter and its pending signals. Driver state, never in the app hash."""

    def __init__(self, spec: DevshardSpec, seed: int, *, limiter: bool) -> None:
        #: The scenario's key; ``spec`` is it with the run's ``devshard_params`` applied
        #: (:meth:`process_params`, each block).
        self.scenario_spec = spec
        self.spec = spec
        self.seed = seed
        self.limiter: LimiterState | None = (
            compute_new_limiter(compute_limiter_params(spec.limiter, spec.block_time_ms))
            if limiter
            else None
        )
        self.miss_signal = spec.get_miss_signal()
        self.stale_blocks = compute_picker_stale_blocks(spec.block_time_ms)
        self.escrow_counter = 0
        # keyed by (model, lane): request n takes lane n % open_escrows
        self.escrows: dict[tuple[str, int], DevshardEscrow] = {}
        self.queue: dict[tuple[str, int], list[PickerRequest]] = {}
        self.pending: dict[str, tuple[int, int, str]] = {}  # request id -> (n, attempt, model)
        self.excluded: dict[int, set[str]] = {}  # request n -> hosts that declined it
        self.signals: dict[int, list[tuple[str, str, OutcomeClass]]] = {}
        #: A queued race attempt's id -> (k, participants tried before it, the race's root id).
        self.race_info: dict[str, tuple[int, tuple[str, ...], str]] = {}
        #: A race's root id -> [a winner-eligible attempt finished, a no-winner one finished].
        self.races: dict[str, list[int]] = {}
        self.counts = DevshardCounts()

    # routing -------------------------------------------------------------------------------

    def is_routed(self, request_index: int) -> bool:
        return is_devshard_request(self.seed, request_index, self.spec.share)

    def process_submit(
        self, height: int, request: int, attempt: int, model: str, request_id: str
    ) -> None:
        """Queue request ``n``'s ``attempt`` for the model's session (picked in this block)."""
        if attempt == 0:
            self.counts.requests += 1
        self.pending[request_id] = (request, attempt, model)
        exclude = frozenset(self.excluded.get(request, ()))
        lane = request % self.spec.open_escrows
        self.queue.setdefault((model, lane), []).append(PickerRequest(request_id, height, exclude))

    # one block -----------------------------------------------------------------------------

    def process_block(self, height: int, chain: Chain) -> list[DevshardDispatch | DevshardDrop]:
        """Apply the limiter signals due at ``height``, then run every model's picker on what
        is queued (models in name order). Reads the state committed at ``height - 1``."""
        self.process_params(chain)
        limiter = self.limiter
        for host, model, outcome in self.signals.pop(height, ()):
            if limiter is not None:
                process_outcome(limiter, host, model, outcome, height, self.miss_signal)
                self.counts.limiter_signals += 1
        out: list[DevshardDispatch | DevshardDrop] = []
        for key in sorted(self.queue):
            queued = self.queue.pop(key)
            out.extend(self._process_lane(height, chain, key, queued))
        return out

    def process_params(self, chain: Chain) -> None:
        """Follow ``extension_params.devshard_params`` in force in the block being built (a
        governance change of block ``h`` is pending there and takes effect with ``h + 1``, as
        the stepper reads ``expiration_blocks``): the limiter's settings through upstream's
        settings update (``participant_limiter.go:297-344``: buckets cut to the new burst), the
        rest read where it is used (the next escrow, the next miss)."""
        with chain.read() as k:
            params = get_next_extension(k).devshard_params
        spec = compute_effective_spec(self.scenario_spec, params)
        if spec == self.spec:
            return
        self.spec = spec
        self.miss_signal = spec.get_miss_signal()
        self.stale_blocks = compute_picker_stale_blocks(spec.block_time_ms)
        if self.limiter is not None:
            new = compute_limiter_params(spec.limiter, spec.block_time_ms)
            if new != self.limiter.params:
                process_update_params(self.limiter, new)

    def _process_lane(
        self, height: int, chain: Chain, key: tuple[str, int], queued: list[PickerRequest]
    ) -> list[DevshardDispatch | DevshardDrop]:
        model = key[0]
        out: list[DevshardDispatch | DevshardDrop] = []
        limiter = self.limiter
        checks = HostChecks(
            throttled=None
            if limiter is None
            else (lambda host: is_blocked(limiter, host, model, height))
        )
        escrow = self.escrows.get(key)
        carried = [*([] if escrow is None else escrow.picker.queue), *queued]
        while carried:
            epoch = _get_epoch(chain)
            if escrow is None or escrow.nonces_left <= 0 or escrow.epoch != epoch:
                escrow = self._process_new_escrow(height, chain, model, epoch)
                if escrow is None:  # nobody with weight: every request is dropped
                    out.extend(d for r in carried if (d := self._drop(r.request_id)))
                    carried = []
                    break
            picker = escrow.picker
            picker.queue = carried
            before = picker.nonce
            events = process_picker_run(
                picker, checks, height, self.stale_blocks, max_nonces=escrow.nonces_left
            )
            escrow.nonces_left -= picker.nonce - before
            held = False
            raced: list[PickerRequest] = []
            for e in events:
                if e.kind == "dispatch":
                    sent = self._dispatch(height, escrow, model, e.request_id, e.participant)
                    out.append(sent)
                    if sent.no_winner and sent.race + 1 < len(escrow.slots):
                        raced.append(self._process_race_attempt(height, sent))
                elif e.kind == "ghost":
                    kind = (e.ghost or GhostKind.EXCLUDE).value
                    self.counts.ghosts[kind] = self.counts.ghosts.get(kind, 0) + 1
                elif e.kind == "drop":
                    if dropped := self._drop(e.request_id):
                        out.append(dropped)
                else:
                    held = True
            carried = [*picker.queue, *raced]
            picker.queue = []
            if held or (escrow.nonces_left > 0 and not raced):
                break
        if escrow is not None:
            escrow.picker.queue = carried
            self.escrows[key] = escrow
        return out

    def _process_new_escrow(
        self, height: int, chain: Chain, model: str, epoch: int
    ) -> DevshardEscrow | None:
        with chain.read() as k:
            group = k.get_epoch_group(epoch, model)
            ds = k.get_params().devshard_escrow_params
        deadlines = compute_deadline_blocks(ds, self.spec.block_time_ms)
        weights = (
            []
            if group is None
            else [(w.member_address, w.weight) for w in group.validation_weights]
        )
        if self.spec.slot_filter:
            excluded = _get_excluded(chain, model)
            kept = [(a, w) for a, w in weights if a not in excluded]
            if any(w > 0 for _, w in kept):
                if len(kept) < len(weights):
                    self.counts.filtered_escrows += 1
                weights = kept
        size = self.spec.group_size or ds.group_size or DEFAULT_GROUP_SIZE
        escrow_id = self.escrow_counter + 1
        slots = compute_escrow_slots(chain.app_hash, escrow_id, model, weights, size)
        if not slots:  # upstream rejects the message: the counter does not move
            return None
        self.escrow_counter = escrow_id
        self.counts.escrows += 1
        return DevshardEscrow(
            escrow_id,
            epoch,
            tuple(slots),
            PickerState(tuple(slots)),
            self.spec.nonces_per_escrow,
            max(1, deadlines.refusal_blocks),
            max(1, deadlines.execution_blocks),
        )

    def _process_race_attempt(self, height: int, d: DevshardDispatch) -> PickerRequest:
        """A "no winner" host got the nonce: the gateway starts the next attempt at once on
        another participant (module docstring, "No winner")."""
        k, tried, root = self.race_info.pop(d.request_id, (0, (), d.request_id))
        tried = (*tried, d.address)
        rid = f"{root}/w{k + 1}"
        self.pending[rid] = (d.request, d.attempt, d.model)
        self.race_info[rid] = (k + 1, tried, root)
        self.races.setdefault(root, [0, 0])
        exclude = frozenset(self.excluded.get(d.request, ())) | frozenset(tried)
        return PickerRequest(rid, height, exclude)

    def _dispatch(
        self, height: int, escrow: DevshardEscrow, model: str, request_id: str, host: str
    ) -> DevshardDispatch:
        request, attempt, _ = self.pending.pop(request_id)
        race, _, root = self.race_info.get(request_id, (0, (), ""))
        if race:
            self.counts.race_attempts += 1
        no_winner = False
        if self.limiter is not None:
            no_winner = is_no_winner(self.limiter, host, model, height)
            process_admission(self.limiter, host, model, height)
        self.counts.dispatches += 1
        if no_winner:
            self.counts.no_winner_dispatches += 1
        return DevshardDispatch(
            request,
            attempt,
            model,
            host,
            no_winner,
            escrow.refusal_blocks,
            escrow.execution_blocks,
            request_id,
            race,
            root or (request_id if no_winner else ""),
        )

    def _drop(self, request_id: str) -> DevshardDrop | None:
        """The picker found no host for ``request_id``; a race attempt ends silently (the
        race's earlier attempts still run), a request's own attempt is answered as dropped."""
        request, attempt, _ = self.pending.pop(request_id)
        if self.race_info.pop(request_id, None) is not None:
            self.counts.race_drops += 1
            return None
        self.excluded.pop(request, None)
        self.counts.drops += 1
        return DevshardDrop(request, attempt)

    # outcomes ------------------------------------------------------------------------------

    def process_result(
        self,
        height: int,
        dispatch: DevshardDispatch,
        outcome: OutcomeClass,
        at: int,
        *,
        no_receipt: bool = False,
        retried: bool = False,
    ) -> None:
        """Dispatch ``dispatch`` at ``height`` ends as ``outcome`` at ``at`` (a finish's height,
        a decline's answer, a miss's expiry). The limiter learns it at ``at``, or for a host
        that never answered (``no_receipt``) at the refusal timeout if that comes first. A
        declined request that is ``retried`` excludes the host from its next attempt."""
        if outcome == "miss":
            reason = "no_receipt" if no_receipt else "execution_timeout"
            self.counts.misses[reason] = self.counts.misses.get(reason, 0) + 1
            if no_receipt:
                at = min(at, height + dispatch.refusal_blocks)
        if self.limiter is not None:
            self.signals.setdefault(at, []).append((dispatch.address, dispatch.model, outcome))
        if dispatch.race_root:
            race = self.races.setdefault(dispatch.race_root, [0, 0])
            if outcome == "finish":
                race[1 if dispatch.no_winner else 0] = 1
        if dispatch.race:  # a race attempt: the request's own attempt decides its re-try
            return
        if outcome == "decline" and retried:
            self.excluded.setdefault(dispatch.request, set()).add(dispatch.address)
        else:
            self.excluded.pop(dispatch.request, None)

    def get_metrics(self) -> dict[str, Any]:
        """The run's devshard counters (docs/metrics.md, "Devshard path")."""
        c = self.counts
        ghosts = sum(c.ghosts.values())
        nonces = c.dispatches + ghosts
        return {
            "devshard_requests": c.requests,
            "devshard_dispatches": c.dispatches,
            "devshard_ghosts": ghosts,
            "devshard_ghosts_by_kind": dict(sorted(c.ghosts.items())),
            "devshard_ghost_share": ghosts / nonces if nonces else 0.0,
            "devshard_drops": c.drops,
            "devshard_escrows": c.escrows,
            "devshard_filtered_escrows": c.filtered_escrows,
            "devshard_no_winner_dispatches": c.no_winner_dispatches,
            "devshard_races": len(self.races),
            "devshard_race_attempts": c.race_attempts,
            "devshard_race_drops": c.race_drops,
            "devshard_race_winners": _count_race_winners(self.races),
            "devshard_limiter_signals": c.limiter_signals,
            "devshard_misses_by_reason": dict(sorted(c.misses.items())),
        }


def _count_race_winners(races: dict[str, list[int]]) -> dict[str, int]:
    """Who won each race (``resolvedWinnerNonce`` / ``fallbackSuspiciousWinner``,
    ``redundancy.go:3732-3766``): an eligible attempt that finished, else a no-winner one that
    finished, else none."""
    out = {"eligible": 0, "no_winner_fallback": 0, "none": 0}
    for eligible, fallback in races.values():
        out["eligible" if eligible else "no_winner_fallback" if fallback else "none"] += 1
    return out


def _get_epoch(chain: Chain) -> int:
    with chain.read() as k:
        return k.get_effective_epoch_index()


def _get_excluded(chain: Chain, model: str) -> frozenset[str]:
    """Whom the chain policy's table keeps out at the committed height (its actual exclusion:
    a shadow table excludes nobody)."""
    try:
        table, _ = chain.get_table_weights(model)
    except NoExecutorsError:
        return frozenset()
    return frozenset(table.excluded)


def compute_path_scenario(scenario: Scenario, path: str, *, slot_filter: bool = False) -> Scenario:
    """``scenario`` on selection path ``path`` (one of :data:`SELECTION_PATH_CHOICES` but
    ``both``): its ``devshard`` key replaced, other devshard keys kept; ``slot_filter`` turns
    the chain's filter at slot sampling on wherever the path is devshard."""
    spec = scenario.devshard
    if path == "classic":
        spec = None
    elif path in ("devshard", "mixed"):
        share = 1.0 if path == "devshard" else MIXED_SHARE
        spec = dataclasses.replace(spec or DevshardSpec(), share=share)
    elif path != "scenario":
        raise ValueError(f"selection path {path!r}: expected one of {SELECTION_PATH_CHOICES}")
    if slot_filter and spec is not None:
        spec = dataclasses.replace(spec, slot_filter=True)
    if spec == scenario.devshard:
        return scenario
    return dataclasses.replace(scenario, devshard=spec)


def get_path_variants(path: str) -> tuple[str, ...]:
    """The paths a ``--selection-path`` value runs (``both``: classic and devshard)."""
    if path not in SELECTION_PATH_CHOICES:
        raise ValueError(f"selection path {path!r}: expected one of {SELECTION_PATH_CHOICES}")
    return ("classic", "devshard") if path == "both" else (path,)


def get_selection_path_words(path: str, slot_filter: bool) -> str:
    """Compare's ``--selection-path`` / ``--slot-filter`` in words (its table's first line)."""
    words = {
        "scenario": "as each scenario says",
        "classic": "every request through GetRandomExecutor",
        "devshard": "every request through devshard escrows (slots by weight, nonce "
        "round-robin; chain policies gate GetRandomExecutor only)",
        "mixed": f"{MIXED_SHARE:.0%} of requests through devshard escrows",
        "both": "each scenario twice, @classic (GetRandomExecutor) and @devshard (escrows)",
    }[path]
    if slot_filter:
        words += "; devshard slots sampled only from the participants the chain policy admits"
    return words
