"""The one place a result reaches the epoch stats, the SPRT and the health policy."""

from __future__ import annotations

from keepersim.keeper.context import BlockContext
from keepersim.keeper.keeper import Keeper
from keepersim.keeper.sprt import (
    compute_llr_update,
    get_llr,
    is_sprt_failed,
    set_llr,
)
from keepersim.types.errors import UnknownParticipantError
from keepersim.types.events import Outcome, ParticipantDeactivated
from keepersim.types.messages import (
    ACTIVE,
    INACTIVE,
    ExcludedParticipant,
    Inference,
    Participant,
)
from keepersim.types.pb.keepersim.v1.state_pb2 import EpochDeclines


def process_outcome(
    ctx: BlockContext, address: str, outcome: Outcome, inference: Inference
) -> None:
    keeper = ctx.keeper
    participant = keeper.get_participant(address)
    if participant is None:
        raise UnknownParticipantError(f"outcome for unknown participant {address!r}")
    stats = participant.current_epoch_stats
    if outcome is Outcome.SUCCESS:
        stats.inference_count += 1
        process_sprt(ctx, participant, fails=0, passes=1)
    elif outcome is Outcome.MISS:
        stats.missed_requests += 1
        process_sprt(ctx, participant, fails=1, passes=0)
    else:
        process_decline_count(keeper, address)
    keeper.set_participant(participant)
    ctx.process_policy_outcome(address, outcome, inference)


def process_decline_count(keeper: Keeper, address: str) -> None:
    """A neutral outcome counts in keepersim's own per-epoch declines (the chain has no field)."""
    epoch = keeper.get_effective_epoch_index()
    count = keeper.get_declines(epoch, address) + 1
    keeper.set_declines(EpochDeclines(epoch_index=epoch, address=address, declined_requests=count))


def process_sprt(ctx: BlockContext, participant: Participant, fails: int, passes: int) -> None:
    """Downtime SPRT: fails = new misses, passes = new completions; INACTIVE for the epoch at +H."""
    constants = ctx.get_sprt_constants()
    if constants is None:  # extension_params.sprt_enabled is off
        return
    stored = participant.current_epoch_stats.inactiveLLR
    llr = compute_llr_update(get_llr(stored), fails, passes, constants)
    set_llr(stored, llr)
    if participant.status == ACTIVE and is_sprt_failed(llr, constants):
        participant.status = INACTIVE
        epoch = ctx.keeper.get_effective_epoch_index()
        ctx.keeper.set_excluded(
            ExcludedParticipant(
                epoch_index=epoch,
                address=participant.address,
                reason="downtime",
                exclusion_block_height=ctx.height,
            )
        )
        ctx.keeper.emit(ParticipantDeactivated(ctx.height, participant.address, f"{llr}e-12"))
