"""Genesis: import a GenesisState into an empty store, export the whole state back.

Export -> import into a fresh store -> export gives the same JSON and the same app hash, because
every collection is exported verbatim (policy state as raw entries) and the app hash depends only
on the state's content.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format

from keepersim.keeper.keeper import Keeper
from keepersim.keeper.policies import BUILTIN_POLICIES
from keepersim.keeper.policies.base import process_missing_wakeups
from keepersim.module.epoch import process_new_epoch_group
from keepersim.module.params_load import get_loaded_policy
from keepersim.store.kv import prefix_end
from keepersim.types import keys
from keepersim.types.errors import GenesisError, InvalidParamsError
from keepersim.types.pb.inference.inference.genesis_pb2 import GenesisState
from keepersim.types.pb.inference.inference.types_pb2 import ACTIVE
from keepersim.types.pb.keepersim.v1.health_pb2 import PolicyStateEntry

_POLICY_RANGES = (keys.POLICY_STATE, keys.POLICY_QUEUE, keys.POLICY_ITEMS, keys.POLICY_LOG)


def validate_genesis(genesis: GenesisState) -> None:
    for name in ("params", "pending_params"):
        if name == "params" or genesis.HasField(name):
            try:
                get_loaded_policy(getattr(genesis, name))
            except InvalidParamsError as exc:
                raise GenesisError(f"genesis.{name}: {exc}") from exc
    if not genesis.chain_id:
        raise GenesisError("genesis.chain_id is empty")
    seen: set[str] = set()
    for i, p in enumerate(genesis.participants):
        where = f"genesis.participants[{i}]"
        if not p.address or "\x00" in p.address:
            raise GenesisError(f"{where}.address is empty or has a 0x00 byte")
        if p.address in seen:
            raise GenesisError(f"{where}.address {p.address!r} is a duplicate")
        seen.add(p.address)
        if p.weight < 0:
            raise GenesisError(f"{where}.weight must be >= 0, got {p.weight} ({p.address})")
    for i, entry in enumerate(genesis.policy_state):
        if not entry.key.startswith(_POLICY_RANGES):
            raise GenesisError(f"genesis.policy_state[{i}].key is outside the policy prefixes")


def init_genesis(keeper: Keeper, genesis: GenesisState) -> None:
    """Write the genesis state; form epoch 0's group when the genesis carries no epochs."""
    validate_genesis(genesis)
    keeper.set_chain_id(genesis.chain_id)
    keeper.set_params(genesis.params)
    for p in genesis.participants:
        if not p.index:
            p.index = p.address
        if p.status == 0:
            p.status = ACTIVE
        keeper.set_participant(p)
    for inference in genesis.inferences:
        keeper.set_inference(inference)
    for timeout in genesis.inference_timeouts:
        keeper.set_timeout(timeout.expiration_height, timeout.inference_id)
    for summary in genesis.epoch_performance_summaries:
        keeper.set_summary(summary)
    for excluded in genesis.excluded_participants:
        keeper.set_excluded(excluded)
    for entry in genesis.policy_state:
        keeper.store.set(entry.key, entry.value)
    if genesis.policy_state:
        # An entry imported without its queue key (written by hand, or by another tool) would
        # never wake up: give it the key it needs.
        for name in sorted(BUILTIN_POLICIES):
            process_missing_wakeups(keeper.store, BUILTIN_POLICIES[name](), genesis.height)
    if genesis.HasField("pending_params"):
        keeper.set_pending_params(genesis.pending_params)
    if genesis.epochs:
        for epoch in genesis.epochs:
            keeper.set_epoch(epoch)
        for group in genesis.epoch_groups:
            keeper.set_epoch_group(group)
        keeper.set_effective_epoch_index(genesis.effective_epoch_index)
    else:
        process_new_epoch_group(keeper, 0, genesis.height)


def export_genesis(keeper: Keeper, height: int) -> GenesisState:
    genesis = GenesisState(
        params=keeper.get_params(),
        chain_id=keeper.chain_id,
        height=height,
        effective_epoch_index=keeper.get_effective_epoch_index(),
    )
    pending = keeper.get_pending_params()
    if pending is not None:
        genesis.pending_params.CopyFrom(pending)
    genesis.participants.extend(keeper.iterate_participants())
    genesis.epochs.extend(keeper.iterate_epochs())
    genesis.epoch_groups.extend(keeper.iterate_epoch_groups())
    genesis.inferences.extend(keeper.iterate_inferences())
    for expiration_height, inference_id in keeper.iterate_timeouts():
        t = genesis.inference_timeouts.add()
        t.expiration_height = expiration_height
        t.inference_id = inference_id
    genesis.epoch_performance_summaries.extend(keeper.iterate_summaries())
    genesis.excluded_participants.extend(keeper.iterate_excluded())
    for prefix in _POLICY_RANGES:
        for key, value in keeper.store.iterate(prefix, prefix_end(prefix)):
            genesis.policy_state.append(PolicyStateEntry(key=key, value=value))
    return genesis


def genesis_to_json(genesis: GenesisState) -> str:
    data = json_format.MessageToDict(genesis, preserving_proto_field_name=True)
    return json.dumps(data, indent=1, sort_keys=True)


def genesis_from_json(text: str, source: str = "<genesis>") -> GenesisState:
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GenesisError(f"{source}: line {exc.lineno} column {exc.colno}: {exc.msg}") from exc
    try:
        return json_format.ParseDict(data, GenesisState())
    except json_format.ParseError as exc:
        raise GenesisError(f"{source}: {exc}") from exc
