"""Genesis: import a Genesis into an empty store, export the whole state back.

The module's part is the chain's own ``GenesisState`` (``app_state.inference`` of ``inferenced
export``): params and participants. What keepersim holds beyond it (its extension params, epochs,
groups, inferences, timeouts, summaries, exclusions, the policies' state, pending governance, the
participants' models and ML nodes, declines) is in ``keepersim.v1.GenesisExtension``. Export ->
import into a fresh store -> export gives the same JSON and the same app hash, because every
collection is exported verbatim (policy state as raw entries) and the app hash depends only on the
state's content.

The file is the chain's genesis document shape: ``{"chain_id", "initial_height", "app_state":
{"inference": ...}, "keepersim": ...}``, the chain's part printed as the chain prints it. A real
node's export (other modules, ``genesis_time``, ``consensus``, ... are ignored) or a bare module
genesis (an object with ``params``) reads too; without the extension the participants serve every
model of ``model_list`` and the extension params are keepersim's defaults.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from google.protobuf import json_format

from keepersim.inputs import get_json_type
from keepersim.keeper.keeper import Keeper
from keepersim.keeper.policies import BUILTIN_POLICIES
from keepersim.keeper.policies.base import process_missing_wakeups
from keepersim.module.epoch import process_new_epoch_group
from keepersim.module.params_load import get_loaded_policy
from keepersim.store.kv import prefix_end
from keepersim.types import keys
from keepersim.types.chain_json import compute_chain_json, parse_chain_json
from keepersim.types.errors import ChainJsonError, GenesisError, InvalidParamsError
from keepersim.types.messages import ACTIVE, GenesisState, Inference, Participant
from keepersim.types.params import get_default_extension_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis, GenesisExtension
from keepersim.types.pb.keepersim.v1.health_pb2 import PolicyStateEntry
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes

#: The genesis document's own keys (beside ``app_state``) that keepersim reads.
_DOCUMENT_KEYS = frozenset({"chain_id", "initial_height", "keepersim"})
_POLICY_RANGES = (keys.POLICY_STATE, keys.POLICY_QUEUE, keys.POLICY_ITEMS, keys.POLICY_LOG)


def compute_genesis(
    chain_id: str,
    params: ModuleParams,
    participants: Iterable[tuple[Participant, ParticipantNodes | None]] = (),
    height: int = 0,
) -> Genesis:
    """A fresh chain's genesis: the params (the chain's and the extension), and each participant
    with the models and ML nodes it registered (None: none registered)."""
    genesis = Genesis(chain_id=chain_id)
    genesis.inference.params.CopyFrom(params.params)
    genesis.keepersim.extension_params.CopyFrom(params.extension_params)
    genesis.keepersim.height = height
    for participant, nodes in participants:
        genesis.inference.participant_list.append(participant)
        if nodes is not None:
            genesis.keepersim.participant_nodes.append(nodes)
    return genesis


def get_genesis_params(genesis: Genesis) -> ModuleParams:
    """The params a genesis starts with: the chain's, and the extension's or keepersim's
    defaults when it has none."""
    ext = genesis.keepersim
    return ModuleParams(
        params=genesis.inference.params,
        extension_params=ext.extension_params
        if ext.HasField("extension_params")
        else get_default_extension_params(),
    )


def validate_genesis(genesis: Genesis) -> None:
    try:
        get_loaded_policy(get_genesis_params(genesis))
    except InvalidParamsError as exc:
        raise GenesisError(f"genesis params: {exc}") from exc
    ext = genesis.keepersim
    if ext.HasField("pending_params") or ext.HasField("pending_extension_params"):
        pending = get_genesis_params(genesis)
        if ext.HasField("pending_params"):
            pending.params.CopyFrom(ext.pending_params)
        if ext.HasField("pending_extension_params"):
            pending.extension_params.CopyFrom(ext.pending_extension_params)
        try:
            get_loaded_policy(pending)
        except InvalidParamsError as exc:
            raise GenesisError(f"genesis pending params: {exc}") from exc
    if not genesis.chain_id:
        raise GenesisError("genesis.chain_id is empty")
    seen: set[str] = set()
    for i, p in enumerate(genesis.inference.participant_list):
        where = f"genesis.app_state.inference.participant_list[{i}]"
        if not p.address or "\x00" in p.address:
            raise GenesisError(f"{where}.address is empty or has a 0x00 byte")
        if p.address in seen:
            raise GenesisError(f"{where}.address {p.address!r} is a duplicate")
        seen.add(p.address)
        if p.weight < 0:
            raise GenesisError(f"{where}.weight must be >= 0, got {p.weight} ({p.address})")
    for i, nodes in enumerate(ext.participant_nodes):
        if nodes.address not in seen:
            raise GenesisError(
                f"genesis.keepersim.participant_nodes[{i}].address {nodes.address!r} is not a "
                "participant"
            )
    for i, entry in enumerate(ext.policy_state):
        if not entry.key.startswith(_POLICY_RANGES):
            raise GenesisError(
                f"genesis.keepersim.policy_state[{i}].key is outside the policy prefixes"
            )


def init_genesis(keeper: Keeper, genesis: Genesis) -> None:
    """Write the genesis state; form epoch 0's group when the genesis carries no epochs."""
    validate_genesis(genesis)
    chain, ext = genesis.inference, genesis.keepersim
    params = get_genesis_params(genesis)
    keeper.set_chain_id(genesis.chain_id)
    keeper.set_params(params.params)
    keeper.set_extension_params(params.extension_params)
    registered = {n.address for n in ext.participant_nodes}
    every_model = sorted({m.id for m in chain.model_list if m.id})
    for listed in chain.participant_list:
        # A copy: the chain's state cache keeps what is written, and the genesis stays the caller's.
        p = Participant()
        p.CopyFrom(listed)
        if not p.index:
            p.index = p.address
        if p.status == 0:
            p.status = ACTIVE
        keeper.set_participant(p)
        if p.address not in registered and every_model:
            keeper.set_participant_nodes(ParticipantNodes(address=p.address, models=every_model))
    for nodes in ext.participant_nodes:
        keeper.set_participant_nodes(nodes)
    for listed_inference in ext.inferences:
        inference = Inference()
        inference.CopyFrom(listed_inference)
        keeper.set_inference(inference)
    for timeout in ext.inference_timeouts:
        keeper.set_timeout(timeout.expiration_height, timeout.inference_id)
    for summary in ext.epoch_performance_summaries:
        keeper.set_summary(summary)
    for excluded in ext.excluded_participants:
        keeper.set_excluded(excluded)
    for declines in ext.epoch_declines:
        keeper.set_declines(declines)
    for entry in ext.policy_state:
        keeper.store.set(entry.key, entry.value)
    if ext.policy_state:
        # An entry imported without its queue key (written by hand, or by another tool) would
        # never wake up: give it the key it needs.
        for name in sorted(BUILTIN_POLICIES):
            process_missing_wakeups(keeper.store, BUILTIN_POLICIES[name](), ext.height)
    if ext.HasField("pending_params"):
        keeper.set_pending_params(ext.pending_params)
    if ext.HasField("pending_extension_params"):
        keeper.set_pending_extension_params(ext.pending_extension_params)
    if ext.epochs:
        for epoch in ext.epochs:
            keeper.set_epoch(epoch)
        for group in ext.epoch_groups:
            keeper.set_epoch_group(group)
        keeper.set_effective_epoch_index(ext.effective_epoch_index)
    else:
        process_new_epoch_group(keeper, 0, ext.height)


def export_genesis(keeper: Keeper, height: int) -> Genesis:
    genesis = Genesis(chain_id=keeper.chain_id)
    genesis.inference.params.CopyFrom(keeper.get_params())
    genesis.inference.participant_list.extend(keeper.iterate_participants())
    ext = genesis.keepersim
    ext.extension_params.CopyFrom(keeper.get_extension_params())
    ext.height = height
    ext.effective_epoch_index = keeper.get_effective_epoch_index()
    pending = keeper.get_pending_params()
    if pending is not None:
        ext.pending_params.CopyFrom(pending)
    pending_ext = keeper.get_pending_extension_params()
    if pending_ext is not None:
        ext.pending_extension_params.CopyFrom(pending_ext)
    ext.participant_nodes.extend(keeper.iterate_participant_nodes())
    ext.epochs.extend(keeper.iterate_epochs())
    ext.epoch_groups.extend(keeper.iterate_epoch_groups())
    ext.inferences.extend(keeper.iterate_inferences())
    for expiration_height, inference_id in keeper.iterate_timeouts():
        t = ext.inference_timeouts.add()
        t.expiration_height = expiration_height
        t.inference_id = inference_id
    ext.epoch_performance_summaries.extend(keeper.iterate_summaries())
    ext.excluded_participants.extend(keeper.iterate_excluded())
    ext.epoch_declines.extend(keeper.iterate_declines())
    for prefix in _POLICY_RANGES:
        for key, value in keeper.store.iterate(prefix, prefix_end(prefix)):
            ext.policy_state.append(PolicyStateEntry(key=key, value=value))
    return genesis


def compute_genesis_document(genesis: Genesis) -> dict[str, Any]:
    """The genesis file's JSON: the chain's document shape, the module part as the chain prints
    it, keepersim's extension beside it."""
    return {
        "chain_id": genesis.chain_id,
        "initial_height": str(genesis.keepersim.height + 1),
        "app_state": {"inference": compute_chain_json(genesis.inference)},
        "keepersim": json_format.MessageToDict(genesis.keepersim, preserving_proto_field_name=True),
    }


def genesis_to_json(genesis: Genesis) -> str:
    return json.dumps(compute_genesis_document(genesis), indent=1)


def parse_genesis_document(data: Any, source: str = "<genesis>") -> Genesis:
    """A Genesis from a genesis document (keepersim's or a node's export) or a bare module
    genesis; errors name the source and the field."""
    if not isinstance(data, dict):
        raise GenesisError(f"{source}: expected a JSON object, got {get_json_type(data)}")
    if "app_state" in data:
        app_state = data["app_state"]
        if not isinstance(app_state, dict) or not isinstance(app_state.get("inference"), dict):
            raise GenesisError(f"{source}: app_state.inference: expected an object")
        module = app_state["inference"]
        where = "app_state.inference"
    elif "params" in data or "participant_list" in data:
        # The module's own object, with the document's keys beside it if the file has them.
        module = {k: v for k, v in data.items() if k not in _DOCUMENT_KEYS}
        where = "(module genesis)"
    else:
        raise GenesisError(
            f"{source}: expected a genesis document with app_state.inference, or the inference "
            "module's genesis (an object with params)"
        )
    chain_id = data.get("chain_id", "")
    if not isinstance(chain_id, str):
        raise GenesisError(
            f"{source}: chain_id: expected a string, got {get_json_type(chain_id)} {chain_id!r}"
        )
    genesis = Genesis(chain_id=chain_id)
    try:
        genesis.inference.CopyFrom(
            parse_chain_json(module, GenesisState, where=f"{source}: {where}")
        )
    except ChainJsonError as exc:
        raise GenesisError(str(exc)) from exc
    extension = data.get("keepersim")
    if extension is not None:
        if not isinstance(extension, dict):
            raise GenesisError(
                f"{source}: keepersim: expected an object (keepersim.v1.GenesisExtension), "
                f"got {get_json_type(extension)}"
            )
        try:
            genesis.keepersim.CopyFrom(json_format.ParseDict(extension, GenesisExtension()))
        except json_format.ParseError as exc:
            raise GenesisError(f"{source}: keepersim: {exc}") from exc
        if "initial_height" in data and "height" not in extension:
            genesis.keepersim.height = _parse_initial_height(data["initial_height"], source) - 1
    elif "initial_height" in data:
        genesis.keepersim.height = _parse_initial_height(data["initial_height"], source) - 1
    return genesis


def _parse_initial_height(value: object, source: str) -> int:
    try:
        height = int(str(value))
    except ValueError:
        height = 0
    if height < 1:
        raise GenesisError(f"{source}: initial_height: expected an integer >= 1, got {value!r}")
    return height


def genesis_from_json(text: str, source: str = "<genesis>") -> Genesis:
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GenesisError(f"{source}: line {exc.lineno} column {exc.colno}: {exc.msg}") from exc
    return parse_genesis_document(data, source)
