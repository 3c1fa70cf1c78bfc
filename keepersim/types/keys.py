"""Collection prefixes and key codecs, in the Cosmos collections style of the chain's store.

uint64 values are 8-byte big-endian so that byte order equals numeric order; a string that is not
the last part of a composite key ends with 0x00 so that ``"ab"`` never sorts inside ``"a"``'s range.
"""

from __future__ import annotations

from collections.abc import Iterable

from keepersim.types.errors import KeyCodecError

# Chain collections (x/inference types/keys.go).
PARTICIPANTS = b"\x00"
INFERENCE_TIMEOUTS = b"\x07"
EPOCH_GROUP_DATA = b"\x0a"
EPOCHS = b"\x0b"
EFFECTIVE_EPOCH_INDEX = b"\x0c"
INFERENCES = b"\x0e"
EPOCH_PERFORMANCE_SUMMARIES = b"\x12"
EXCLUDED_PARTICIPANTS = b"\x18"

# keepersim collections.
PARAMS = b"\x28"
PENDING_PARAMS = b"\x29"
CHAIN_ID = b"\x2a"
EXTENSION_PARAMS = b"\x2b"
PENDING_EXTENSION_PARAMS = b"\x2c"
# address -> keepersim.v1.ParticipantNodes (models and ML nodes, read at epoch formation).
PARTICIPANT_NODES = b"\x2d"
# (uint64 epoch, address) -> keepersim.v1.EpochDeclines.
EPOCH_DECLINES = b"\x2e"
# Health-policy state: each policy owns one prefix byte (keepersim.keeper.policies).
POLICY_STATE = b"\x40"
# Height-keyed wake-up queues of health policies: (policy prefix, uint64 height) -> the
# addresses (POLICY_QUEUE) or other items, e.g. inference ids (POLICY_ITEMS), due then.
POLICY_QUEUE = b"\x41"
POLICY_ITEMS = b"\x42"
# (policy prefix, uint64 height) -> a policy's record of that height, e.g. the outcomes of that
# height (trin-additive) or who was offered an inference then (trin-multiplicative).
POLICY_LOG = b"\x43"

U64_MAX = (1 << 64) - 1


def encode_u64(value: int) -> bytes:
    if not 0 <= value <= U64_MAX:
        raise KeyCodecError(f"uint64 key part out of range: {value}")
    return value.to_bytes(8, "big")


def decode_u64(data: bytes) -> int:
    if len(data) != 8:
        raise KeyCodecError(f"uint64 key part must be 8 bytes, got {len(data)}")
    return int.from_bytes(data, "big")


def encode_str(value: str, *, last: bool) -> bytes:
    raw = value.encode()
    if b"\x00" in raw:
        raise KeyCodecError(f"string key part contains a 0x00 byte: {value!r}")
    return raw if last else raw + b"\x00"


def split_str(data: bytes) -> tuple[str, bytes]:
    """Decode a 0x00-terminated string at the start of ``data``; return it and the rest."""
    end = data.find(b"\x00")
    if end < 0:
        raise KeyCodecError("composite key: missing 0x00 terminator after a string part")
    return data[:end].decode(), data[end + 1 :]


def participant_key(address: str) -> bytes:
    return encode_str(address, last=True)


def inference_key(inference_id: str) -> bytes:
    return encode_str(inference_id, last=True)


def timeout_key(expiration_height: int, inference_id: str) -> bytes:
    """encode_u64 + encode_str(last=True), checked in one go (one key per inference start)."""
    raw = inference_id.encode()
    if 0 <= expiration_height <= U64_MAX and b"\x00" not in raw:
        return expiration_height.to_bytes(8, "big") + raw
    return encode_u64(expiration_height) + encode_str(inference_id, last=True)  # raises


def decode_timeout_key(key: bytes) -> tuple[int, str]:
    if len(key) < 8:
        raise KeyCodecError("timeout key shorter than its uint64 height")
    return decode_u64(key[:8]), key[8:].decode()


def epoch_key(epoch_index: int) -> bytes:
    return encode_u64(epoch_index)


def epoch_group_key(epoch_index: int, model: str) -> bytes:
    return encode_u64(epoch_index) + encode_str(model, last=True)


def decode_epoch_group_key(key: bytes) -> tuple[int, str]:
    return decode_u64(key[:8]), key[8:].decode()


def summary_key(address: str, epoch_index: int) -> bytes:
    return encode_str(address, last=False) + encode_u64(epoch_index)


def decode_summary_key(key: bytes) -> tuple[str, int]:
    address, rest = split_str(key)
    return address, decode_u64(rest)


def summary_prefix(address: str) -> bytes:
    return encode_str(address, last=False)


def declines_key(epoch_index: int, address: str) -> bytes:
    return encode_u64(epoch_index) + encode_str(address, last=True)


def excluded_key(epoch_index: int, address: str) -> bytes:
    return encode_u64(epoch_index) + encode_str(address, last=True)


def decode_excluded_key(key: bytes) -> tuple[int, str]:
    return decode_u64(key[:8]), key[8:].decode()


def height_key(height: int) -> bytes:
    """A policy's key of one height, under its queue or log prefix (wake-ups of that height,
    its log record of that height)."""
    return encode_u64(height)


def decode_height_key(key: bytes) -> int:
    return decode_u64(key[:8])


def encode_address_set(addresses: Iterable[str]) -> bytes:
    """Sorted, distinct addresses (or ids) joined by 0x00 (they never hold that byte)."""
    return b"\x00".join(sorted({a.encode() for a in addresses}))


def decode_address_set(raw: bytes) -> list[str]:
    return [part.decode() for part in raw.split(b"\x00")] if raw else []
