"""Begin block and end block, written as ordered lists of named steps (like the chain's spec)."""

from __future__ import annotations

from collections.abc import Callable

from keepersim.keeper.context import BlockContext
from keepersim.keeper.inferences import process_inference_expiry
from keepersim.keeper.keeper import Keeper
from keepersim.module.epoch import process_epoch_boundary
from keepersim.module.params_load import get_loaded_policy
from keepersim.store.buffer import BlockBuffer
from keepersim.types import keys
from keepersim.types.events import ParamsRejected
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams


def process_pending_params(keeper: Keeper, height: int) -> None:
    """Params accepted by governance in the previous block (the chain's, keepersim's extension,
    or both) take effect now; the keeper records it (``params_changed``: every derived selection
    datum is then stale). Params that cannot load are dropped instead (ParamsRejected says why):
    the old ones stay and the block goes on."""
    has_chain = keeper.store.has(keys.PENDING_PARAMS)
    has_extension = keeper.store.has(keys.PENDING_EXTENSION_PARAMS)
    if not has_chain and not has_extension:
        return
    try:
        chain = keeper.get_pending_params() or keeper.get_params()
        extension = keeper.get_pending_extension_params() or keeper.get_extension_params()
        get_loaded_policy(ModuleParams(params=chain, extension_params=extension))
    except Exception as exc:  # whatever it is, these params cannot run: the chain must not stop
        keeper.delete_pending_params()
        keeper.delete_pending_extension_params()
        keeper.emit(ParamsRejected(height, f"{type(exc).__name__}: {exc}"))
        return
    if has_chain:
        keeper.set_params(chain)
        keeper.delete_pending_params()
    if has_extension:
        keeper.set_extension_params(extension)
        keeper.delete_pending_extension_params()
    keeper.params_changed = True
    # New thresholds apply to everyone: let the policy look at every participant once.
    keeper.hints.mark_all([p.address for p in keeper.iterate_participants()])


def begin_block(keeper: Keeper, height: int) -> None:
    process_pending_params(keeper, height)


def process_policy_end_block(ctx: BlockContext) -> None:
    ctx.policy.process_end_block(ctx.policy_store)


END_BLOCK_STEPS: tuple[Callable[[BlockContext], None], ...] = (
    process_inference_expiry,  # expire inferences due now: miss -> stats, SPRT, policy
    process_policy_end_block,  # breaker / policy transitions for this block
    process_epoch_boundary,  # summaries, stats reset, reputation, clear breaker, new group
)


def flush_policy_store(ctx: BlockContext) -> None:
    """The policy's block-cached entries and wake-ups reach the store (end block's last step)."""
    ctx.policy_store.flush()


def end_block(ctx: BlockContext, gas_by_step: dict[str, int] | None = None) -> None:
    """The steps in order, then the policy's writes. ``gas_by_step``: each step's gas (the
    block buffer's, keepersim/store/gas.py) added under the step's name."""
    store = ctx.keeper.store
    steps = (*END_BLOCK_STEPS, flush_policy_store)
    if gas_by_step is None or not isinstance(store, BlockBuffer):
        for step in steps:
            step(ctx)
        return
    for step in steps:
        before = store.gas
        step(ctx)
        name = step.__name__
        gas_by_step[name] = gas_by_step.get(name, 0) + store.gas - before
