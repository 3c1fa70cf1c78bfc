"""The chain's messages that keepersim reads and writes, from one import.

They are generated from the protos vendored from gonka-ai/gonka at ee730031 (v0.2.14;
proto/inference/UPSTREAM.md): every field, number and enum value is upstream's, so a real node's
bytes and JSON decode into the same values. keepersim's own messages are in ``keepersim.v1``
(keepersim/types/pb/keepersim/v1/); none of them reuses a chain name.
"""

from __future__ import annotations

from keepersim.types.pb.inference.inference.confirmation_poc_event_pb2 import ConfirmationPoCEvent
from keepersim.types.pb.inference.inference.epoch_group_data_pb2 import (
    EpochGroupData,
    MLNodeInfo,
    ValidationWeight,
)
from keepersim.types.pb.inference.inference.epoch_pb2 import Epoch
from keepersim.types.pb.inference.inference.epoch_performance_summary_pb2 import (
    EpochPerformanceSummary,
)
from keepersim.types.pb.inference.inference.excluded_participant_pb2 import ExcludedParticipant
from keepersim.types.pb.inference.inference.genesis_pb2 import GenesisState
from keepersim.types.pb.inference.inference.inference_pb2 import (
    EXPIRED,
    FINISHED,
    INVALIDATED,
    STARTED,
    VALIDATED,
    VOTING,
    Inference,
    InferenceStatus,
)
from keepersim.types.pb.inference.inference.inference_timeout_pb2 import InferenceTimeout
from keepersim.types.pb.inference.inference.params_pb2 import (
    Decimal,
    EpochParams,
    Params,
    ValidationParams,
)
from keepersim.types.pb.inference.inference.participant_pb2 import (
    ACTIVE,
    INACTIVE,
    INVALID,
    RAMPING,
    UNCONFIRMED,
    CurrentEpochStats,
    Participant,
    ParticipantStatus,
)
from keepersim.types.pb.inference.inference.tx_pb2 import (
    MsgFinishInference,
    MsgStartInference,
    MsgUpdateParams,
)

__all__ = [
    "ACTIVE",
    "EXPIRED",
    "FINISHED",
    "INACTIVE",
    "INVALID",
    "INVALIDATED",
    "RAMPING",
    "STARTED",
    "UNCONFIRMED",
    "VALIDATED",
    "VOTING",
    "ConfirmationPoCEvent",
    "CurrentEpochStats",
    "Decimal",
    "Epoch",
    "EpochGroupData",
    "EpochParams",
    "EpochPerformanceSummary",
    "ExcludedParticipant",
    "GenesisState",
    "Inference",
    "InferenceStatus",
    "InferenceTimeout",
    "MLNodeInfo",
    "MsgFinishInference",
    "MsgStartInference",
    "MsgUpdateParams",
    "Params",
    "ParticipantStatus",
    "Participant",
    "ValidationParams",
    "ValidationWeight",
]
