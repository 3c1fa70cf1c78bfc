"""The generated protobuf code in keepersim/types/pb matches proto/ (scripts/gen_proto.py --check)."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    importlib.util.find_spec("grpc_tools") is None,
    reason="grpc_tools (grpcio-tools, a dev extra) is not importable: protoc is unavailable",
)
def test_generated_protobuf_code_is_not_stale() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# The chain's message and enum names (gonka-ai/gonka ee730031, inference-chain/proto/inference/
# inference/): the 20 of issue 12 and the types they reach (docs/design/chain-types-v0.2.14.md,
# section 1, 1.21 and appendices A and B).
CHAIN_NAMES = frozenset(
    [
        "Participant",
        "CurrentEpochStats",
        "Inference",
        "Params",
        "EpochParams",
        "ValidationParams",
        "Decimal",
        "Epoch",
        "EpochGroupData",
        "ValidationWeight",
        "MLNodeInfo",
        "EpochPerformanceSummary",
        "InferenceTimeout",
        "ExcludedParticipant",
        "MsgUpdateParams",
        "MsgStartInference",
        "MsgFinishInference",
        "MsgSubmitNewParticipant",
        "GenesisState",
        "ParticipantStatus",
        "InferenceStatus",
        "ActiveParticipant",
        "ActiveParticipants",
        "ModelMLNodes",
        "ProposalDetails",
        "PocParams",
        "TokenomicsParams",
        "CollateralParams",
        "BitcoinRewardParams",
        "DynamicPricingParams",
        "BandwidthLimitsParams",
        "ConfirmationPoCParams",
        "GenesisGuardianParams",
        "DeveloperAccessParams",
        "ParticipantAccessParams",
        "TransferAgentAccessParams",
        "DevshardEscrowParams",
        "FeeParams",
        "DelegationParams",
        "MaintenanceParams",
        "SeedSignature",
        "Model",
        "ConfirmationWeightScale",
        "GenesisOnlyParams",
        "CosmWasmParams",
        "MLNodeVersion",
        "Bridge",
        "PoCModelParams",
        "PoCStatTestParams",
        "PoCModelConfig",
        "DevshardApprovedVersion",
        "BridgeContractAddress",
        "BridgeTokenMetadata",
        "BridgeTokenReference",
        "BridgePendingMintRefund",
        "BridgePendingWithdrawalRefund",
        "QueryEpochInfoResponse",
        "ConfirmationPoCEvent",
        "ConfirmationPoCPhase",
        "ParticipantWithBalance",
    ]
)
CHAIN_PACKAGE = "inference.inference"
OWN_PACKAGE = "keepersim.v1"


def get_generated_types() -> dict[str, tuple[str, str]]:
    """Every top-level message and enum of the generated code: full name -> (package, module)."""
    import keepersim.types.pb as pb

    out: dict[str, tuple[str, str]] = {}
    for info in pkgutil.walk_packages(pb.__path__, pb.__name__ + "."):
        if not info.name.endswith("_pb2"):
            continue
        module = importlib.import_module(info.name)
        file = module.DESCRIPTOR
        kinds = (file.message_types_by_name, file.enum_types_by_name)
        for descriptor in (d for kind in kinds for d in kind.values()):
            out[descriptor.full_name] = (file.package, info.name)
    return out


def test_generated_modules_follow_their_proto_package() -> None:
    types = get_generated_types()
    assert {package for package, _ in types.values()} == {CHAIN_PACKAGE, OWN_PACKAGE}
    for full_name, (package, module) in types.items():
        assert full_name == f"{package}.{full_name.rsplit('.', 1)[1]}"
        assert module.startswith(f"keepersim.types.pb.{package}."), (full_name, module)


def test_keepersim_package_holds_none_of_the_chains_names() -> None:
    own = {n.rsplit(".", 1)[1] for n, (p, _) in get_generated_types().items() if p == OWN_PACKAGE}
    assert own, "keepersim.v1 defines no message"
    assert not own & CHAIN_NAMES, sorted(own & CHAIN_NAMES)


def test_chain_named_types_are_in_the_chains_package_and_nothing_else_is() -> None:
    """Guard for vendoring the chain's protos: what bears a chain name is in inference.inference
    (to be replaced by the chain's definition), and keepersim adds nothing of its own there."""
    types = get_generated_types()
    for full_name, (package, _) in types.items():
        short = full_name.rsplit(".", 1)[1]
        assert (package == CHAIN_PACKAGE) == (short in CHAIN_NAMES), full_name
