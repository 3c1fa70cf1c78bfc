"""The chain's upgrade handlers v0.2.13 and v0.2.14, as far as they write ``Params``.

Ported from ``inference-chain/app/upgrades/v0_2_13/upgrades.go`` and
``inference-chain/app/upgrades/v0_2_14/upgrades.go`` at gonka commit
ee730031decedd2428aa56c65084ae5ab33d9192 (the v0.2.14 release), in the order each
``CreateUpgradeHandler`` calls them, for a ``gonka-mainnet`` chain. Each ``process_*`` function
is one Go function and says which; what the handlers do outside ``Params`` (governance models,
gov quorum, genesis-only params, escrows, bounties, mint) is not modelled here.

Two users: the mainnet preset (the live v0.2.12 params, then both upgrades:
:mod:`keepersim.types.chain_mainnet`), and the chain-params reader
(:mod:`keepersim.types.chain_params_json`), which takes from these handlers the value of each
field an older node's JSON lacks: a v0.2.14 binary decodes such a field as its proto3 zero, and
the upgrade that introduced it is what gave it a value on the chain.
"""

from __future__ import annotations

from typing import Final

from keepersim.types.chain_defaults import (
    KIMI_MODEL_ID,
    MINIMAX_MODEL_ID,
    get_chain_default_params,
)
from keepersim.types.pb.inference.inference.params_pb2 import (
    Decimal,
    DevshardApprovedVersion,
    Params,
    PoCModelConfig,
    PoCStatTestParams,
)

__all__ = [
    "UPGRADES_COMMIT",
    "UPGRADE_FIELD_SOURCES",
    "V0_2_13",
    "V0_2_14",
    "compute_default_seal_grace_nonces",
    "process_upgrades",
    "process_v0_2_13_upgrade",
    "process_v0_2_14_upgrade",
]

UPGRADES_COMMIT = "ee730031decedd2428aa56c65084ae5ab33d9192"
V0_2_13 = "app/upgrades/v0_2_13/upgrades.go"
V0_2_14 = "app/upgrades/v0_2_14/upgrades.go"

# v0_2_13/upgrades.go constants
V0_2_13_MAX_ESCROWS_PER_EPOCH = 500_000  # MaxEscrowsPerEpoch
V0_2_13_MAX_NONCE = 1_000_000  # MaxNonce
V0_2_13_CREATORS = (  # devshardAllowedCreatorAddressesToAdd
    "gonka1r2s0rwgskp6y4ed7qr7d25qdwjwlvpp6demv90",
    "gonka1ls8wqecwj369du8s2t9a223xu9sgvmzlw2ye9c",
    "gonka10wmset95nhgfjt4wklsyjqpx55m40zy3gha2pn",
    "gonka17ld2g62230w0erzexefzw03sw0adtuchr425rp",
)
V0_2_13_DEVSHARD_V1 = DevshardApprovedVersion(  # DevshardV1Name / Binary / Sha256
    name="v1",
    binary="https://github.com/gonka-ai/gonka/releases/download/release%2Fv0.2.13-devshard-v1/devshardd.zip",
    sha256="dad6f1b97843816c0a33874b89ac403e48b54fe3aa1a0fdccb228d89d2a5594c",
)
V0_2_13_KIMI_WEIGHT_SCALE = Decimal(value=78, exponent=-2)  # kimiWeightScaleFactor
V0_2_13_MINIMAX = PoCModelConfig(  # minimaxPoCModelConfig
    model_id=MINIMAX_MODEL_ID,
    seq_len=1024,
    stat_test=PoCStatTestParams(
        dist_threshold=Decimal(value=75, exponent=-2),
        p_mismatch=Decimal(value=1, exponent=-1),
        p_value_threshold=Decimal(value=5, exponent=-2),
    ),
    weight_scale_factor=Decimal(value=3024, exponent=-4),
    penalty_start_epoch=278,  # minimaxStartEpoch
)
# v0_2_14/upgrades.go constants
V0_2_14_CREATORS = ("gonka1t9akhsrqjkavh68c7cannlfdj58y25vsewfflt",)
# x/inference/types/params.go constants (ee730031)
DEFAULT_POC_VALIDATION_VOTE_THRESHOLD_BPS = 5000  # DefaultPocValidationVoteThresholdBps
DEFAULT_SEAL_GRACE_MULTIPLIER = 10  # DefaultSealGraceMultiplier
DEVSHARD_SEAL_GRACE_FLOOR = 20  # DevshardSealGraceFloor
DEFAULT_DEVSHARD_GROUP_SIZE = 16  # DefaultDevshardGroupSize

#: The DevshardEscrowParams fields v0_2_14 backfillDevshardEscrowParamDefaults sets from the
#: defaults when zero (besides the seal-grace nonces, which it derives from the group size).
_BACKFILLED_ZERO_FIELDS: Final = (
    "default_inference_seal_grace_seconds",
    "create_devshard_fee",
    "fee_per_nonce",
    "refusal_timeout",
    "execution_timeout",
    "validation_rate",
    "vote_threshold_factor",
)

#: Which handler gives each field a v0.2.12 node's params lack (the fields v0.2.13 and v0.2.14
#: added to ``Params``), as ``path -> "version function"`` (``app/upgrades/<version>/upgrades.go``
#: at :data:`UPGRADES_COMMIT`); "" where no handler sets the field, so the chain keeps the proto3
#: zero the new binary decodes.
UPGRADE_FIELD_SOURCES: dict[str, str] = {
    "poc_params.validation_vote_threshold_bps": "v0_2_14 setPocValidationVoteThreshold",
    "devshard_escrow_params.max_nonce": "v0_2_13 setDevshardEscrowParams",
    "devshard_escrow_params.devshard_requests_enabled": "v0_2_13 setDevshardEscrowParams",
    **{
        f"devshard_escrow_params.{name}": "v0_2_14 backfillDevshardEscrowParamDefaults"
        for name in ("default_inference_seal_grace_nonces", *_BACKFILLED_ZERO_FIELDS)
    },
    # Not among backfillDevshardEscrowParamDefaults' fields: the chain keeps 0, which
    # devshard/state/seal.go reads as DefaultAutoSealEveryNNonces (150).
    "devshard_escrow_params.default_auto_seal_every_n_nonces": "",
    "maintenance_params": "v0_2_14 initMaintenanceParams",
}


def compute_default_seal_grace_nonces(group_size: int) -> int:
    """``DefaultDevshardInferenceSealGraceNonces`` (params.go:143): 10 x group size, floor 20."""
    return max(group_size * DEFAULT_SEAL_GRACE_MULTIPLIER, DEVSHARD_SEAL_GRACE_FLOOR)


def _ensure_devshard(p: Params) -> None:
    """``if params.DevshardEscrowParams == nil { ... = DefaultDevshardEscrowParams() }``."""
    if not p.HasField("devshard_escrow_params"):
        p.devshard_escrow_params.CopyFrom(get_chain_default_params().devshard_escrow_params)


def _add_creators(p: Params, addresses: tuple[str, ...]) -> None:
    """``addDevshardAllowedCreatorAddresses``: appended in order, skipping those present."""
    _ensure_devshard(p)
    creators = p.devshard_escrow_params.allowed_creator_addresses
    for address in addresses:
        if address not in creators:
            creators.append(address)


def process_v0_2_13_upgrade(p: Params) -> None:
    """v0_2_13 ``CreateUpgradeHandler``'s writes to Params, in its order."""
    # setDevshardEscrowParams
    _ensure_devshard(p)
    ds = p.devshard_escrow_params
    ds.max_escrows_per_epoch = V0_2_13_MAX_ESCROWS_PER_EPOCH
    ds.max_nonce = V0_2_13_MAX_NONCE
    ds.devshard_requests_enabled = True  # DefaultDevshardRequestsEnabled
    # setDevshardAllowedCreatorAddresses
    _add_creators(p, V0_2_13_CREATORS)
    # setDevshardApprovedVersions: replaces the entry named v1, else appends
    for version in ds.approved_versions:
        if version.name == V0_2_13_DEVSHARD_V1.name:
            version.CopyFrom(V0_2_13_DEVSHARD_V1)
            break
    else:
        ds.approved_versions.append(V0_2_13_DEVSHARD_V1)
    # updateModelParams (an error upstream when poc_params is nil: the upgrade would halt)
    if p.HasField("poc_params"):
        models = p.poc_params.models
        for model in models:  # setPoCModelWeightScale
            if model.model_id == KIMI_MODEL_ID:
                model.weight_scale_factor.CopyFrom(V0_2_13_KIMI_WEIGHT_SCALE)
                break
        for model in models:  # upsertPoCModelConfig
            if model.model_id == MINIMAX_MODEL_ID:
                model.CopyFrom(V0_2_13_MINIMAX)
                break
        else:
            models.append(V0_2_13_MINIMAX)


def process_v0_2_14_upgrade(p: Params) -> None:
    """v0_2_14 ``CreateUpgradeHandler``'s writes to Params, in its order (mainnet: the creator
    address is added; ``isTestnet`` skips it elsewhere)."""
    # backfillDevshardEscrowParamDefaults: zero fields get the defaults
    _ensure_devshard(p)
    ds = p.devshard_escrow_params
    defaults = get_chain_default_params().devshard_escrow_params
    if ds.default_inference_seal_grace_nonces == 0:
        group_size = ds.group_size or DEFAULT_DEVSHARD_GROUP_SIZE
        ds.default_inference_seal_grace_nonces = compute_default_seal_grace_nonces(group_size)
    for name in _BACKFILLED_ZERO_FIELDS:
        if getattr(ds, name) == 0:
            setattr(ds, name, getattr(defaults, name))
    # setPocValidationVoteThreshold
    if not p.HasField("poc_params"):
        p.poc_params.CopyFrom(get_chain_default_params().poc_params)
    p.poc_params.validation_vote_threshold_bps = DEFAULT_POC_VALIDATION_VOTE_THRESHOLD_BPS
    # setDevshardAllowedCreatorAddresses
    _add_creators(p, V0_2_14_CREATORS)
    # initMaintenanceParams: DefaultMaintenanceParams() when nil, else left as it is
    if not p.HasField("maintenance_params"):
        p.maintenance_params.CopyFrom(get_chain_default_params().maintenance_params)


def process_upgrades(p: Params) -> None:
    """Both upgrades in turn: a v0.2.12 chain's Params as v0.2.14 leaves them."""
    process_v0_2_13_upgrade(p)
    process_v0_2_14_upgrade(p)
