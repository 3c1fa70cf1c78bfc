"""The proposal file the chain's CLI takes for ``tx gov submit-proposal`` (Cosmos SDK v0.50):

    {"messages": [{"@type": "/inference.inference.MsgUpdateParams",
                   "authority": "gonka10d07y265gmmuvt4z0w9aw880jnsr700j2h5m33",
                   "params": {<the chain's Params JSON>}}],
     "metadata": "...", "deposit": "10000000ngonka", "title": "...", "summary": "...",
     "expedited": false}

Accepted messages: the chain's ``MsgUpdateParams`` (``params``: the chain's JSON, read with
:func:`~keepersim.types.chain_params_json.parse_chain_params`: a field an older node's params
lack is filled as the chain's upgrades filled it, with a warning; note that a v0.2.14 chain
itself would decode it as zero in a submitted proposal) and keepersim's
``/keepersim.v1.MsgUpdateExtensionParams`` (``extension_params``), at most one of each. Each
replaces its whole part, as the chain's handler does (``SetParams(msg.Params)``); a part the
proposal does not update keeps the run's current value. Checked as the chain checks it: the
SDK's ``MsgSubmitProposal`` basics (messages, title, summary, deposit coins), a known ``@type``,
the authority equal to the x/gov module account of the chain's address prefix, and the resulting
params passing :func:`~keepersim.module.params_load.get_loaded_policy` (the chain's own rules,
keepersim's, and loadability). Every failure is a :class:`ProposalError`: one line naming the
file, the message and the rule.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from keepersim.inputs import InputError, read_json_input
from keepersim.limits import MAX_PROPOSAL_MESSAGES
from keepersim.module.params_load import get_loaded_policy
from keepersim.sim.scenario import get_json_type
from keepersim.types.bech32 import ACCOUNT_ADDRESS_PREFIX, GOV_AUTHORITY, GOV_MODULE_NAME
from keepersim.types.chain_json import parse_chain_json
from keepersim.types.chain_params_json import parse_chain_params
from keepersim.types.errors import ChainJsonError, InvalidParamsError, KeepersimError
from keepersim.types.messages import Params
from keepersim.types.params import get_default_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams, ModuleParams

__all__ = [
    "EXTENSION_UPDATE_TYPE",
    "PARAMS_UPDATE_TYPE",
    "Proposal",
    "ProposalError",
    "compute_proposed_params",
    "load_proposal",
    "parse_proposal",
]

PARAMS_UPDATE_TYPE = "/inference.inference.MsgUpdateParams"
EXTENSION_UPDATE_TYPE = "/keepersim.v1.MsgUpdateExtensionParams"
_MESSAGE_FIELDS = {PARAMS_UPDATE_TYPE: "params", EXTENSION_UPDATE_TYPE: "extension_params"}
_TOP_STRINGS = ("metadata", "deposit", "title", "summary")
# sdk.ParseCoinsNormalized: "<amount><denom>" joined by commas; denoms per types/coin.go.
_COIN = re.compile(r"\s*[0-9]+(\.[0-9]+)?\s*[a-zA-Z][a-zA-Z0-9/:._-]{2,127}\s*")


class ProposalError(KeepersimError):
    """A proposal the chain would reject (or a file that is not one): one line, the rule."""


@dataclass(frozen=True)
class Proposal:
    """A validated proposal: the parts it replaces (None: not updated) and its text fields."""

    title: str
    summary: str
    params: Params | None = None
    extension_params: ExtensionParams | None = None
    source: str = "proposal"

    def get_message_types(self) -> list[str]:
        out = []
        if self.params is not None:
            out.append(PARAMS_UPDATE_TYPE)
        if self.extension_params is not None:
            out.append(EXTENSION_UPDATE_TYPE)
        return out


def compute_proposed_params(current: ModuleParams, proposal: Proposal) -> ModuleParams:
    """``current`` with each part the proposal updates replaced by the proposal's (pure)."""
    out = ModuleParams()
    out.CopyFrom(current)
    if proposal.params is not None:
        out.params.CopyFrom(proposal.params)
    if proposal.extension_params is not None:
        out.extension_params.CopyFrom(proposal.extension_params)
    return out


def check_proposed_params(
    current: ModuleParams, proposal: Proposal, where: str | None = None
) -> ModuleParams:
    """The proposed params on top of ``current``, checked to load (ProposalError naming the
    rule otherwise)."""
    proposed = compute_proposed_params(current, proposal)
    try:
        get_loaded_policy(proposed)
    except InvalidParamsError as exc:
        raise ProposalError(f"{where or proposal.source}: {exc}") from exc
    return proposed


def load_proposal(path: str | os.PathLike[str], base: ModuleParams | None = None) -> Proposal:
    """Read and validate a proposal file (``base``: the params the parts not updated keep while
    checking; default :func:`get_default_params`)."""
    shown = os.fspath(path)
    try:
        data = read_json_input(path, "proposal")
    except InputError as exc:
        raise ProposalError(str(exc)) from exc
    return parse_proposal(data, shown, base=base)


def _check_authority(authority: Any, where: str) -> None:
    if not isinstance(authority, str) or authority != GOV_AUTHORITY:
        prefix = authority.rpartition("1")[0] if isinstance(authority, str) else ""
        hint = (
            f" (address prefix {prefix!r}, the chain's is {ACCOUNT_ADDRESS_PREFIX!r})"
            if prefix and prefix != ACCOUNT_ADDRESS_PREFIX
            else ""
        )
        raise ProposalError(
            f"{where}.authority: invalid authority; expected the x/gov module account "
            f"{GOV_AUTHORITY} (module {GOV_MODULE_NAME!r}), got {authority!r}{hint}"
        )


def _parse_message(message: Any, where: str) -> tuple[str, Params | ExtensionParams]:
    if not isinstance(message, dict):
        raise ProposalError(f"{where}: expected a message object, got {get_json_type(message)}")
    kind = message.get("@type")
    if not isinstance(kind, str) or kind not in _MESSAGE_FIELDS:
        raise ProposalError(
            f"{where}.@type: unknown message type {kind!r}; expected one of "
            f"{', '.join(_MESSAGE_FIELDS)}"
        )
    name = _MESSAGE_FIELDS[kind]
    where = f"{where} ({kind})"
    unknown = sorted(set(message) - {"@type", "authority", name})
    if unknown:
        raise ProposalError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}")
    _check_authority(message.get("authority"), where)
    if not isinstance(message.get(name), dict):
        raise ProposalError(f"{where}.{name}: required, the whole {name} object")
    message_type: type[Params] | type[ExtensionParams] = (
        Params if name == "params" else ExtensionParams
    )
    try:
        value = (
            parse_chain_params(message[name], where=f"{where}.{name}")
            if message_type is Params
            else parse_chain_json(message[name], message_type, where=f"{where}.{name}")
        )
    except ChainJsonError as exc:
        raise ProposalError(str(exc)) from exc
    return kind, value


def parse_proposal(
    data: Any, source: str = "proposal", base: ModuleParams | None = None
) -> Proposal:
    """A decoded proposal document -> a validated :class:`Proposal` (see the module doc)."""
    if not isinstance(data, dict):
        raise ProposalError(f"{source}: expected a proposal object, got {get_json_type(data)}")
    for key in _TOP_STRINGS:
        if key in data and not isinstance(data[key], str):
            raise ProposalError(f"{source}: {key!r} must be a string")
    if "expedited" in data and not isinstance(data["expedited"], bool):
        raise ProposalError(f"{source}: 'expedited' must be true or false")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ProposalError(f"{source}: 'messages' must be a non-empty list of messages")
    if len(messages) > MAX_PROPOSAL_MESSAGES:
        raise ProposalError(
            f"{source}: 'messages' holds {len(messages):,} messages, above the limit of "
            f"{MAX_PROPOSAL_MESSAGES} for a proposal"
        )
    for key in ("title", "summary"):
        if not str(data.get(key, "")).strip():
            raise ProposalError(f"{source}: proposal {key} cannot be empty")
    deposit = str(data.get("deposit", ""))
    if deposit and not all(_COIN.fullmatch(coin) for coin in deposit.split(",")):
        raise ProposalError(
            f"{source}: deposit {deposit!r}: invalid coins (expected e.g. '10000000ngonka')"
        )
    parts: dict[str, Params | ExtensionParams] = {}
    for i, message in enumerate(messages):
        where = f"{source}: messages[{i}]"
        kind, value = _parse_message(message, where)
        if kind in parts:
            raise ProposalError(f"{where}: a second {kind}; a proposal updates each part once")
        parts[kind] = value
    chain = parts.get(PARAMS_UPDATE_TYPE)
    ext = parts.get(EXTENSION_UPDATE_TYPE)
    proposal = Proposal(
        title=str(data["title"]),
        summary=str(data["summary"]),
        params=chain if isinstance(chain, Params) else None,
        extension_params=ext if isinstance(ext, ExtensionParams) else None,
        source=source,
    )
    check_proposed_params(get_default_params() if base is None else base, proposal)
    return proposal
