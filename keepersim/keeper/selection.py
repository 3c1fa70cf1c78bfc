"""Executor selection: candidates -> PoC-slot filter -> health gate -> exclusion cap / panic ->
fallback -> weight factor -> deterministic weighted draw. The pipeline exists here only.

The draw uses integers and a seed hashed from chain data (chain id, height, model, request id),
so every machine picks the same executor for the same request.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, compress, islice
from operator import lt, sub

from keepersim.keeper.keeper import Keeper
from keepersim.keeper.policies.base import Health, HealthPolicy
from keepersim.keeper.reputation import compute_adjusted_weight
from keepersim.types.errors import NoExecutorsError, UnknownModelError
from keepersim.types.messages import ACTIVE, EpochParams, ValidationWeight
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams


@dataclass(frozen=True, slots=True)
class Candidate:
    address: str
    weight: int  # group weight, reputation-adjusted when params say so


@dataclass(frozen=True, slots=True)
class SelectionTable:
    height: int
    model: str
    addresses: tuple[str, ...]
    cumulative: tuple[int, ...]
    total: int
    fallback: bool
    panic: bool
    excluded: tuple[str, ...]
    shadow_excluded: tuple[str, ...]
    candidate_weight: int
    excluded_weight: int


def get_poc_heights(epoch_start: int, params: EpochParams) -> range:
    """The heights of the PoC phase that starts at ``epoch_start``: PoC stages and the gap before
    the new validators take over, at the start of each epoch."""
    span = (
        params.poc_stage_duration
        + params.poc_validation_delay
        + params.poc_validation_duration
        + params.set_new_validators_delay
    )
    return range(epoch_start, epoch_start + span)


def has_poc_slot(member: ValidationWeight) -> bool:
    """The member (of the model's sub-group, so it serves the model) has an ML node that keeps
    serving during PoC: timeslot 1 of ``MLNodeInfo.timeslot_allocation``. Upstream ee730031
    reads a preserved-nodes snapshot instead and deprecates the field; keepersim keeps the
    older rule, the one its participants' ML nodes describe."""
    return any(
        len(node.timeslot_allocation) > 1 and node.timeslot_allocation[1]
        for node in member.ml_nodes
    )


#: The selection rules, as reports name them: upstream's (gonka-ai/gonka ee730031,
#: epochgroup/random.go, the default) and the fork's unmerged PR #8
#: (``extension_params.reputation_weighting``).
SELECTION_BY_WEIGHT = "weight"
SELECTION_BY_REPUTATION = "weight x reputation (fork PR #8)"


def get_selection_rule(params: ExtensionParams) -> str:
    """The rule :func:`get_candidates` weighs candidates by under ``params``."""
    if params.reputation_weighting:
        return SELECTION_BY_REPUTATION
    return SELECTION_BY_WEIGHT


def get_candidates(keeper: Keeper, model: str, height: int) -> list[Candidate]:
    """Active members of the effective epoch group (or the model's sub-group)."""
    params = keeper.get_params()
    epoch_index = keeper.get_effective_epoch_index()
    group = keeper.get_epoch_group(epoch_index, model)
    if group is None:
        if model:
            raise UnknownModelError(f"unknown model {model!r} in epoch {epoch_index}")
        raise NoExecutorsError(f"no epoch group for epoch {epoch_index}")
    epoch = keeper.get_epoch(epoch_index)
    poc = epoch is not None and height in get_poc_heights(
        epoch.poc_start_block_height, params.epoch_params
    )
    weighting = keeper.get_extension_params().reputation_weighting
    out: list[Candidate] = []
    for member in group.validation_weights:
        participant = keeper.get_participant(member.member_address)
        if participant is None or participant.status != ACTIVE:
            continue
        if poc and not has_poc_slot(member):
            continue
        weight = (
            compute_adjusted_weight(member.weight, member.reputation)
            if weighting
            else member.weight
        )
        if weight > 0:
            out.append(Candidate(member.member_address, weight))
    if not out:
        raise NoExecutorsError(
            f"after filtering participants the pool for model {model!r} is empty "
            f"(epoch {epoch_index}, height {height})"
        )
    return out


@dataclass(frozen=True, slots=True)
class PipelineRules:
    """What decides the pipeline besides the verdicts: the policy's exclusion cap, panic
    threshold and fallback, and whether it runs in shadow."""

    cap_pct: int
    panic_pct: int
    fallback_allowed: bool
    shadow: bool


def get_pipeline_rules(policy: HealthPolicy, params: ExtensionParams) -> PipelineRules:
    return PipelineRules(
        cap_pct=policy.get_exclusion_cap_pct(params),
        panic_pct=policy.get_panic_pct(params),
        fallback_allowed=policy.is_fallback_allowed(params),
        shadow=params.health_params.shadow,
    )


def is_cap_binding(out_weight: int, total: int, cap_pct: int) -> bool:
    """The gate keeps out more than ``cap_pct`` of the candidate weight."""
    return out_weight * 100 > cap_pct * total


def is_panic(admitted_weight: int, total: int, panic_pct: int) -> bool:
    """Too little weight is admitted: the policy's panic threshold admits everyone."""
    return bool(panic_pct) and admitted_weight * 100 < panic_pct * total


def get_draw_weight(weight: int, health: Health, shadow: bool, gated: bool = False) -> int:
    """A candidate's weight in the draw (0: not drawn). In shadow no factor applies. ``gated``:
    the gate alone decides, and a closed gate draws only in shadow; otherwise the caller has
    admitted the candidate (cap, panic, fallback).

    weight x factor rounding below 1 keeps 1 (an admitted candidate is never rounded away); a
    zero factor keeps it out, like a closed gate.
    """
    if gated and not (shadow or health.admitted):
        return 0
    w = weight if shadow else weight * health.factor_num // health.factor_den
    if w > 0:
        return w
    return 0 if health.factor_num <= 0 else 1


def compute_selection_table(
    candidates: Sequence[Candidate],
    healths: Sequence[Health],
    *,
    height: int,
    model: str,
    rules: PipelineRules,
) -> SelectionTable:
    """Apply gate, cap, panic, fallback and weight factors to candidates with their verdicts.

    The reference: :class:`IncrementalTable` gives the same tables, computed faster when none of
    cap, panic and fallback applies, and calls this whenever one might.
    """
    cap_pct, panic_pct, shadow = rules.cap_pct, rules.panic_pct, rules.shadow
    fallback_allowed = rules.fallback_allowed
    total = sum(c.weight for c in candidates)
    admitted = [h.admitted for h in healths]
    out_idx = [i for i, ok in enumerate(admitted) if not ok]
    out_weight = sum(candidates[i].weight for i in out_idx)
    if out_idx and is_cap_binding(out_weight, total, cap_pct):
        # Keep out the most degraded first, within the cap, and always at least one.
        order = sorted(out_idx, key=lambda i: (-healths[i].severity, candidates[i].address))
        kept_weight = 0
        for n, i in enumerate(order):
            w = candidates[i].weight
            if n > 0 and is_cap_binding(kept_weight + w, total, cap_pct):
                admitted[i] = True
            else:
                kept_weight += w
    panic = False
    admitted_weight = sum(c.weight for c, ok in zip(candidates, admitted, strict=True) if ok)
    if is_panic(admitted_weight, total, panic_pct):
        panic = True
        admitted = [True] * len(candidates)
    fallback = False
    if not any(admitted):
        if shadow and not fallback_allowed:
            pass  # the policy would refuse the request: in shadow, everyone is "would exclude"
        elif not fallback_allowed:
            raise NoExecutorsError(
                f"no available executors for model {model!r}: every candidate is kept out"
            )
        else:
            fallback = True
            admitted = [True] * len(candidates)
    excluded = tuple(c.address for c, ok in zip(candidates, admitted, strict=True) if not ok)
    shadow_excluded: tuple[str, ...] = ()
    if shadow:
        shadow_excluded, excluded = excluded, ()
        admitted = [True] * len(candidates)
    addresses: list[str] = []
    cumulative: list[int] = []
    running = 0
    for c, h, ok in zip(candidates, healths, admitted, strict=True):
        if not ok:
            continue
        w = get_draw_weight(c.weight, h, shadow)
        if w == 0:
            continue
        running += w
        addresses.append(c.address)
        cumulative.append(running)
    if running == 0:
        raise NoExecutorsError(f"no available executors for model {model!r}: all weights are 0")
    excluded_weight = total - sum(
        c.weight for c, ok in zip(candidates, admitted, strict=True) if ok
    )
    return SelectionTable(
        height=height,
        model=model,
        addresses=tuple(addresses),
        cumulative=tuple(cumulative),
        total=running,
        fallback=fallback,
        panic=panic,
        excluded=excluded,
        shadow_excluded=shadow_excluded,
        candidate_weight=total,
        excluded_weight=excluded_weight,
    )


class IncrementalTable:
    """One model's candidates and their current verdicts, with the sums the pipeline needs kept
    up to date verdict by verdict (a block changes a few verdicts, not the fleet's).

    When the cap does not bind, there is no panic and someone is admitted (the common case), the
    gate alone decides and the table is a few C-level passes (compress, accumulate); otherwise
    :func:`compute_selection_table` decides. Either way the table equals the reference's.
    """

    __slots__ = (
        "candidates",
        "healths",
        "addresses",
        "total",
        "out",
        "out_weight",
        "out_count",
        "shadow",
        "draw",
        "draw_zero",
        "cumulative",
        "first_changed",
    )

    def __init__(self, candidates: Sequence[Candidate], healths: Sequence[Health]) -> None:
        self.candidates = list(candidates)
        self.healths = list(healths)
        self.addresses = tuple(c.address for c in candidates)
        self.total = sum(c.weight for c in candidates)
        self.out = [not h.admitted for h in self.healths]
        self.out_weight = sum(c.weight for c, out in zip(candidates, self.out, strict=True) if out)
        self.out_count = sum(self.out)
        self.shadow = False
        self.draw: list[int] = []  # per candidate: its draw weight on the gate-only path
        self.draw_zero = 0
        # The running sums of ``draw`` as the last table had them, valid below first_changed.
        self.cumulative: tuple[int, ...] = ()
        self.first_changed = 0
        self.process_shadow(False)

    def process_shadow(self, shadow: bool) -> None:
        """Draw weights when the gate alone decides: a closed gate draws only in shadow."""
        self.shadow = shadow
        self.draw = [
            get_draw_weight(c.weight, h, shadow, True)
            for c, h in zip(self.candidates, self.healths, strict=True)
        ]
        self.draw_zero = self.draw.count(0)
        self.first_changed = 0

    def process_health(self, i: int, health: Health) -> None:
        """Candidate ``i`` has a new verdict."""
        self.process_healths([(i, health)])

    def process_healths(self, changes: Iterable[tuple[int, Health]]) -> None:
        """Candidates have new verdicts: (position, verdict) pairs."""
        healths, candidates, out, draw, shadow = (
            self.healths,
            self.candidates,
            self.out,
            self.draw,
            self.shadow,
        )
        draw_zero, first_changed = self.draw_zero, self.first_changed
        for i, health in changes:
            old = healths[i]
            healths[i] = health
            weight = candidates[i].weight
            admitted = health.admitted
            if old.admitted != admitted:
                out[i] = not admitted
                self.out_weight += -weight if admitted else weight
                self.out_count += -1 if admitted else 1
            w = get_draw_weight(weight, health, shadow, True)
            was = draw[i]
            if w != was:
                draw_zero += (w == 0) - (was == 0)
                draw[i] = w
                if i < first_changed:
                    first_changed = i
        self.draw_zero, self.first_changed = draw_zero, first_changed

    def get_cumulative(self) -> tuple[int, ...]:
        """The running sums of every draw weight: those below the first change are the last
        table's, the rest are summed on from there."""
        start, kept = self.first_changed, self.cumulative
        draw = self.draw
        if start == 0:
            cumulative = tuple(accumulate(draw))
        elif start >= len(draw):
            cumulative = kept
        else:
            rest = accumulate(islice(draw, start, None), initial=kept[start - 1])
            cumulative = kept[:start] + tuple(islice(rest, 1, None))
        self.cumulative = cumulative
        self.first_changed = len(draw)
        return cumulative

    def compute_table(self, *, height: int, model: str, rules: PipelineRules) -> SelectionTable:
        shadow = rules.shadow
        if shadow != self.shadow:
            self.process_shadow(shadow)
        n = len(self.candidates)
        total = self.total
        if (
            (self.out_count and is_cap_binding(self.out_weight, total, rules.cap_pct))
            or is_panic(total - self.out_weight, total, rules.panic_pct)
            or self.out_count == n  # nobody admitted: fallback or refusal
            or self.draw_zero == n  # nobody drawable: the reference raises
        ):
            return compute_selection_table(
                self.candidates, self.healths, height=height, model=model, rules=rules
            )
        excluded = tuple(compress(self.addresses, self.out)) if self.out_count else ()
        shadow_excluded: tuple[str, ...] = ()
        if shadow:
            shadow_excluded, excluded = excluded, ()
        if self.draw_zero:
            addresses = tuple(compress(self.addresses, self.draw))
            cumulative = tuple(accumulate(filter(None, self.draw)))
            self.first_changed = 0  # these sums skip candidates: none is reusable
        else:
            addresses = self.addresses
            cumulative = self.get_cumulative()
        return SelectionTable(
            height=height,
            model=model,
            addresses=addresses,
            cumulative=cumulative,
            total=cumulative[-1],
            fallback=False,
            panic=False,
            excluded=excluded,
            shadow_excluded=shadow_excluded,
            candidate_weight=total,
            excluded_weight=0 if shadow else self.out_weight,
        )


def compute_restamped_table(table: SelectionTable, height: int) -> SelectionTable:
    """The same table, valid at another height (nothing that decides it changed)."""
    return SelectionTable(
        height,
        table.model,
        table.addresses,
        table.cumulative,
        table.total,
        table.fallback,
        table.panic,
        table.excluded,
        table.shadow_excluded,
        table.candidate_weight,
        table.excluded_weight,
    )


def compute_selection_seed(chain_id: str, height: int, model: str, request_id: str) -> int:
    data = b"\x00".join(
        (
            b"keepersim/select/v1",
            chain_id.encode(),
            str(height).encode(),
            model.encode(),
            request_id.encode(),
        )
    )
    return int.from_bytes(hashlib.sha256(data).digest(), "big")


def compute_draw(table: SelectionTable, seed: int) -> str:
    """First index whose cumulative weight exceeds r = seed mod total."""
    return table.addresses[bisect_right(table.cumulative, seed % table.total)]


def compute_member_weights(table: SelectionTable) -> list[int]:
    """Each drawable member's weight (``table.addresses`` order), from the cumulative sums."""
    return [b - a for a, b in zip((0, *table.cumulative), table.cumulative, strict=False)]


def compute_weight_factors(
    table: SelectionTable, candidate_weights: Mapping[str, int]
) -> dict[str, float]:
    """The drawable members of ``table`` it gives less than their candidate weight (the weight
    they entered the pipeline with, ``candidate_weights``: every drawable member is in it), each
    with the fraction it gives: draw weight / candidate weight, in (0, 1). Members at full
    weight (or above: a factor over 1) are left out; so are the kept out (:func:`get_kept_out`),
    which are not drawn at all."""
    cumulative = table.cumulative
    drawn = list(map(sub, cumulative, chain((0,), cumulative)))
    weights = list(map(candidate_weights.__getitem__, table.addresses))
    short = list(map(lt, drawn, weights))
    if not any(short):
        return {}
    return {
        a: d / w for a, d, w in compress(zip(table.addresses, drawn, weights, strict=True), short)
    }


def get_kept_out(table: SelectionTable) -> tuple[str, ...]:
    """Who the table keeps out of the draw: its excluded, or in shadow mode whom the policy
    would exclude (a table has one or the other)."""
    return table.shadow_excluded or table.excluded


def compute_draws(table: SelectionTable, seed: int, k: int) -> list[str]:
    """k distinct executors, each drawn by weight among those not yet chosen (trin's sampling)."""
    addresses = list(table.addresses)
    weights = compute_member_weights(table)
    chosen: list[str] = []
    for i in range(min(k, len(addresses))):
        total = sum(weights)
        r = int.from_bytes(hashlib.sha256(seed.to_bytes(32, "big") + i.to_bytes(4, "big")).digest())
        r %= total
        running = 0
        for j, w in enumerate(weights):
            running += w
            if r < running:
                chosen.append(addresses.pop(j))
                weights.pop(j)
                break
    return chosen
