"""Epoch settlement: summaries, stats reset, reputation, a new epoch group.

keepersim collapses the chain's PoC stages and SetNewValidators delay into the boundary block: the
new group is effective at once, and the PoC phase (for the PoC-slot filter) is the first blocks of
the epoch, as long as the PoC stages together.
"""

from __future__ import annotations

from keepersim.keeper.context import BlockContext
from keepersim.keeper.keeper import Keeper
from keepersim.keeper.reputation import compute_reputation
from keepersim.types.events import EpochSettled
from keepersim.types.messages import (
    ACTIVE,
    INACTIVE,
    CurrentEpochStats,
    Epoch,
    EpochGroupData,
    EpochPerformanceSummary,
    ValidationWeight,
)


def is_epoch_boundary(height: int, epoch_length: int) -> bool:
    return height > 0 and height % epoch_length == 0


def process_epoch_boundary(ctx: BlockContext) -> None:
    keeper = ctx.keeper
    if not is_epoch_boundary(ctx.height, keeper.get_params().epoch_params.epoch_length):
        return
    settled = keeper.get_effective_epoch_index()
    ctx.policy.process_epoch_boundary(ctx.policy_store)
    participants = list(keeper.iterate_participants())
    for participant in participants:
        stats = participant.current_epoch_stats
        keeper.set_summary(
            EpochPerformanceSummary(
                epoch_index=settled,
                participant_id=participant.address,
                inference_count=stats.inference_count,
                missed_requests=stats.missed_requests,
                earned_coins=stats.earned_coins,
                rewarded_coins=stats.rewarded_coins,
                burned_coins=stats.burned_coins,
                validated_inferences=stats.validated_inferences,
                invalidated_inferences=stats.invalidated_inferences,
            )
        )
        participant.current_epoch_stats.CopyFrom(CurrentEpochStats())
        if participant.status == INACTIVE:
            participant.status = ACTIVE
        participant.epochs_completed += 1
        keeper.set_participant(participant)
    process_epoch_group_end(keeper, settled, ctx.height)
    process_new_epoch_group(keeper, settled + 1, ctx.height)
    keeper.emit(EpochSettled(ctx.height, settled, settled + 1, len(participants)))


def process_epoch_group_end(keeper: Keeper, epoch_index: int, height: int) -> None:
    """The settled epoch's groups (parent and sub-groups) record their last block."""
    parent = keeper.get_epoch_group(epoch_index, "")
    if parent is None:
        return
    for model in ["", *parent.sub_group_models]:
        group = keeper.get_epoch_group(epoch_index, model)
        if group is not None:
            group.last_block_height = height
            keeper.set_epoch_group(group)


def process_new_epoch_group(keeper: Keeper, epoch_index: int, height: int) -> None:
    """Form the epoch's group (and one sub-group per model) from active participants, with the
    models and ML nodes they registered (keepersim.v1.ParticipantNodes). It is effective from
    the next block (``effective_block_height``)."""
    params = keeper.get_params().validation_params
    members: list[ValidationWeight] = []
    models: dict[str, list[ValidationWeight]] = {}
    for participant in keeper.iterate_participants():
        if participant.status != ACTIVE or participant.weight <= 0:
            continue
        summaries = keeper.get_recent_summaries(participant.address, params.epochs_to_max)
        nodes = keeper.get_participant_nodes(participant.address)
        member = ValidationWeight(
            member_address=participant.address,
            weight=participant.weight,
            reputation=compute_reputation(summaries, params),
            ml_nodes=nodes.ml_nodes if nodes is not None else (),
        )
        members.append(member)
        if nodes is None:
            continue
        for model in nodes.models:
            model_weight = nodes.model_weights.get(model, participant.weight)
            if model_weight == participant.weight:
                models.setdefault(model, []).append(member)
            elif model_weight > 0:
                # The sub-group's own weight (the chain sums the PoC weight of the ML nodes
                # serving the model: sub-group members' weights differ from the parent's).
                sub_member = ValidationWeight()
                sub_member.CopyFrom(member)
                sub_member.weight = model_weight
                models.setdefault(model, []).append(sub_member)
    keeper.set_epoch(Epoch(index=epoch_index, poc_start_block_height=height))
    keeper.set_effective_epoch_index(epoch_index)
    keeper.set_epoch_group(
        EpochGroupData(
            epoch_index=epoch_index,
            model_id="",
            poc_start_block_height=height,
            effective_block_height=height + 1,
            validation_weights=members,
            total_weight=sum(m.weight for m in members),
            sub_group_models=sorted(models),
        )
    )
    for model, model_members in sorted(models.items()):
        keeper.set_epoch_group(
            EpochGroupData(
                epoch_index=epoch_index,
                model_id=model,
                poc_start_block_height=height,
                effective_block_height=height + 1,
                validation_weights=model_members,
                total_weight=sum(m.weight for m in model_members),
            )
        )
